"""LangChain / LangGraph through callbacks: ``LoopwatchCallbackHandler`` observes any
LangChain or LangGraph app (a chain, a graph, ``create_agent``) without changing it.

A callback cannot rewrite a request or a tool result, so a ``stop`` (and a ``skip`` of
a loop the agent was already told about) raises :class:`~loopwatch.LoopDetected`
before the tool runs; warnings, and the skip that tells, are logged and kept on the
handler. For agents built with ``create_agent``, the middleware in
:mod:`loopwatch.integrations.langchain` can do more (skip a call, warn the model).
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from typing import Any, Final
from uuid import UUID

try:
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.messages import ToolMessage
    from langchain_core.outputs import ChatGeneration, LLMResult
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "langchain", "LangChain (langchain-core)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import (
    content_text,
    make_guard,
    observe_safely,
)

__all__ = ["LoopwatchCallbackHandler"]

log = logging.getLogger("loopwatch")


# -- callback handler --------------------------------------------------------------------
_ROOTS_MAX: Final = 100_000


class LoopwatchCallbackHandler(BaseCallbackHandler):
    """Observes any LangChain / LangGraph app through callbacks.

    ``raise_error = True`` makes LangChain propagate :class:`LoopDetected` from
    ``on_tool_start``, so a ``stop`` (or a ``skip`` that blocks: a callback cannot
    replace a tool's result, so not running it means raising) ends the run before the
    tool runs. Warnings, and the skip that only tells, are logged and kept in
    :attr:`warnings`.

    The run id is ``run_id=`` if given, else the LangGraph ``thread_id`` from the
    callback metadata, else the id of the outermost LangChain run.
    """

    raise_error = True
    run_inline = True  # observe in order, in the caller's thread / event loop

    def __init__(
        self, guard: Guard | None = None, *, run_id: str | None = None, **config: Any
    ) -> None:
        super().__init__()
        self.guard = make_guard(guard, config)
        self.fixed_run_id = run_id
        self.warnings: list[Verdict] = []
        self._roots: OrderedDict[UUID, str] = OrderedDict()
        self._tools: dict[UUID, tuple[str, str]] = {}  # callback run -> (tool name, run id)
        self._lock = threading.Lock()

    def _run_for(
        self, run_id: UUID, parent_run_id: UUID | None, metadata: dict[str, Any] | None
    ) -> str:
        with self._lock:
            if run_id in self._roots:
                return self._roots[run_id]
            if self.fixed_run_id is not None:
                root = self.fixed_run_id
            elif metadata and metadata.get("thread_id"):
                root = str(metadata["thread_id"])
            elif parent_run_id is not None and parent_run_id in self._roots:
                root = self._roots[parent_run_id]
            else:
                root = str(parent_run_id or run_id)
            self._roots[run_id] = root
            while len(self._roots) > _ROOTS_MAX:
                self._roots.popitem(last=False)
            return root

    def _handle(self, verdict: Verdict, *, before_tool: bool) -> None:
        # A told skip (the agent has not been warned yet) is a warning here: a callback
        # cannot answer the call in the tool's place, and raising would stop the run
        # with a message that promises a next time.
        if verdict.action is Action.STOP or (
            before_tool and verdict.action is Action.SKIP and self.guard.policy.blocks(verdict)
        ):
            raise LoopDetected(verdict)
        if verdict.action is not Action.OK:
            self.warnings.append(verdict)
            log.warning("%s", verdict.message)

    def on_chain_start(
        self,
        serialized: dict[str, Any] | None,
        inputs: Any,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._run_for(run_id, parent_run_id, metadata)

    def on_chain_end(self, outputs: Any, *, run_id: UUID, **kwargs: Any) -> None:
        with self._lock:
            self._roots.pop(run_id, None)

    def on_chat_model_start(
        self,
        serialized: dict[str, Any] | None,
        messages: list[list[Any]],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._run_for(run_id, parent_run_id, metadata)

    def on_llm_start(
        self,
        serialized: dict[str, Any] | None,
        prompts: list[str],
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        self._run_for(run_id, parent_run_id, metadata)

    def on_llm_end(
        self,
        response: LLMResult,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._run_for(run_id, parent_run_id, kwargs.get("metadata"))
        with self._lock:
            self._roots.pop(run_id, None)
        for generations in response.generations[:1]:
            for generation in generations[:1]:
                event: dict[str, Any] = {"kind": "model", "text": generation.text}
                if isinstance(generation, ChatGeneration):
                    message = generation.message
                    event["text"] = content_text(message.content)
                    usage = getattr(message, "usage_metadata", None)
                    if usage:
                        event["tokens"] = usage.get("total_tokens", 0)
                self._handle(observe_safely(self.guard, run, event), before_tool=False)

    def on_tool_start(
        self,
        serialized: dict[str, Any] | None,
        input_str: str,
        *,
        run_id: UUID,
        parent_run_id: UUID | None = None,
        metadata: dict[str, Any] | None = None,
        inputs: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        run = self._run_for(run_id, parent_run_id, metadata)
        name = str((serialized or {}).get("name") or kwargs.get("name") or "tool")
        with self._lock:
            self._tools[run_id] = (name, run)
        event = {
            "kind": "tool_call",
            "name": name,
            "args": inputs if inputs is not None else input_str,
            "id": str(run_id),
        }
        try:
            self._handle(observe_safely(self.guard, run, event), before_tool=True)
        except LoopDetected:
            with self._lock:
                self._tools.pop(run_id, None)
                self._roots.pop(run_id, None)
            raise

    def _tool_done(self, run_id: UUID) -> tuple[str, str] | None:
        with self._lock:
            self._roots.pop(run_id, None)
            return self._tools.pop(run_id, None)

    def on_tool_end(self, output: Any, *, run_id: UUID, **kwargs: Any) -> None:
        known = self._tool_done(run_id)
        if known is None:
            return
        name, run = known
        message = output if isinstance(output, ToolMessage) else None
        text = content_text(message.content if message is not None else output)
        event = {
            "kind": "tool_result",
            "name": name,
            "id": str(run_id),
            "text": text,
            "error": message is not None and message.status == "error",
        }
        self._handle(observe_safely(self.guard, run, event), before_tool=False)

    def on_tool_error(self, error: BaseException, *, run_id: UUID, **kwargs: Any) -> None:
        known = self._tool_done(run_id)
        if known is None or isinstance(error, LoopDetected):
            return
        name, run = known
        event = {
            "kind": "tool_result",
            "name": name,
            "id": str(run_id),
            "text": f"{type(error).__name__}: {error}",
            "error": True,
        }
        self._handle(observe_safely(self.guard, run, event), before_tool=False)
