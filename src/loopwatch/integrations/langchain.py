"""LangChain v1 / LangGraph: the agent middleware.

``LoopwatchMiddleware`` plugs into ``create_agent(..., middleware=[...])``:

* every tool call is observed before it runs and its result after
  (``wrap_tool_call`` / ``awrap_tool_call``); on ``skip`` the tool does not run and
  the model gets a ``ToolMessage(status="error")`` with the explanation;
* every model output is observed in ``after_model`` / ``aafter_model``;
* on ``warn`` the message is added to the **next model request only**, as its last
  message (after the tool results), never written into the state;
* on ``stop`` the run ends through ``jump_to: "end"`` (a ``Command(goto=END)`` from
  a tool hook does not end ``create_agent``): pending tool calls are answered and a
  final ``AIMessage`` says why, so the history stays valid for the next turn.

The run id is the LangGraph thread id, else one id per invocation.

``LoopwatchCallbackHandler`` (in :mod:`.langchain_callbacks`, importable from here)
observes any LangChain or LangGraph app through callbacks; it cannot rewrite a
request or a tool result, so ``skip`` and ``stop`` both raise
:class:`~loopwatch.LoopDetected` before the tool runs.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final

try:
    from langchain.agents.middleware import (
        AgentMiddleware,
        AgentState,
        ModelRequest,
        ModelResponse,
        ToolCallRequest,
        hook_config,
    )
    from langchain.agents.middleware.types import ModelCallResult, PrivateStateAttr
    from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
    from langgraph.channels.untracked_value import UntrackedValue
    from langgraph.types import Command
    from typing_extensions import NotRequired
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "langchain", "LangChain (langchain and langgraph)") from _exc

from ..findings import Action, Verdict
from ..guard import Guard
from ._common import (
    NOT_RUN,
    STOPPED,
    PendingWarnings,
    aobserve_safely,
    content_text,
    make_guard,
    observe_safely,
)

# The callback handler lives in its own module (one job per file); both are
# importable from here, as the README shows.
from .langchain_callbacks import LoopwatchCallbackHandler

__all__ = ["LoopwatchCallbackHandler", "LoopwatchMiddleware", "LoopwatchState"]

log = logging.getLogger("loopwatch")

# Key of the verdict recorded in a ToolMessage's response_metadata.
_MARK: Final = "loopwatch"
_RUN_KEY: Final = "loopwatch_run_id"


class LoopwatchState(AgentState[Any]):
    """Agent state plus the per-invocation run id used when there is no thread id.

    Untracked (not checkpointed) and private (not in the input or output schema):
    it only lives while one invocation runs.
    """

    loopwatch_run_id: NotRequired[Annotated[str, UntrackedValue, PrivateStateAttr]]


def _thread_id(runtime: Any, config: Any = None) -> str | None:
    """The LangGraph thread id: ``runtime.execution_info`` (langgraph >= 1.2), else the
    ``configurable`` of the running config."""
    info = getattr(runtime, "execution_info", None)
    thread = getattr(info, "thread_id", None)
    if thread:
        return str(thread)
    if config is None:
        try:
            from langgraph.config import get_config

            config = get_config()
        except Exception:  # outside a runnable context: no config to read
            config = None
    if isinstance(config, dict):
        configurable = config.get("configurable") or {}
        thread = configurable.get("thread_id")
        if thread:
            return str(thread)
    return None


def _verdict_meta(verdict: Verdict) -> dict[str, Any]:
    """What loopwatch records on a ToolMessage it answered or ended the run at, under
    ``response_metadata["loopwatch"]`` (kept in the state, never sent to a model)."""
    return {
        "action": verdict.action.value,
        "step": verdict.step,
        "message": verdict.message,
        "findings": [f.to_dict() for f in verdict.findings],
    }


def _stop_of(message: Any) -> str | None:
    """The stop message recorded on a ToolMessage, if the run is to end there."""
    meta = getattr(message, "response_metadata", None)
    mark = meta.get(_MARK) if isinstance(meta, dict) else None
    if isinstance(mark, dict) and mark.get("action") == Action.STOP.value:
        return str(mark.get("message") or STOPPED)
    return None


class LoopwatchMiddleware(AgentMiddleware[LoopwatchState, Any, Any]):
    """Loop detection for ``langchain.agents.create_agent``.

    ``LoopwatchMiddleware()`` uses a guard configured from ``loopwatch.toml`` /
    ``[tool.loopwatch]`` (or the defaults); keywords override it
    (``LoopwatchMiddleware(on_loop="skip", repeated_call={"stop_at": 8})``), or
    pass a ready ``guard=Guard(...)`` (shared with other agents or a Redis store).
    """

    state_schema = LoopwatchState

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        super().__init__()
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()

    # -- run ids ------------------------------------------------------------------------
    def run_id(self, state: Any, runtime: Any, config: Any = None) -> str:
        """The run a hook belongs to: the thread id, else this invocation's own id."""
        thread = _thread_id(runtime, config)
        if thread:
            return thread
        if isinstance(state, dict):
            own = state.get(_RUN_KEY)
            if own:
                return str(own)
        return "loopwatch-unidentified"

    def before_agent(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        """Mark the user turn, and give the invocation its own run id when there is
        no thread to name it.

        Each invocation on a thread is a user turn: its last human message is
        observed as a ``user`` event, so counts that belong to one turn (the same
        call, the same result, the same error) start afresh, while a user who has to
        repeat themselves is still seen (a thread that looks the weather up once per
        turn is not stopped on turn 5).
        """
        update = None
        run = _thread_id(runtime) or state.get(_RUN_KEY)
        if not run:
            run = f"lc-{uuid.uuid4().hex}"
            update = {_RUN_KEY: run}
        human = _last_human(state)
        if human is not None:
            observe_safely(
                self.guard, str(run), {"kind": "user", "text": content_text(human.content)}
            )
        return update

    async def abefore_agent(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        return self.before_agent(state, runtime)

    # -- stop after a blocked tool call ------------------------------------------------
    @hook_config(can_jump_to=["end"])
    def before_model(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        """End the run if a tool call of the last turn was stopped.

        A tool hook cannot end ``create_agent`` (``Command(goto=END)`` is not
        honoured there), so ``wrap_tool_call`` answers the call with a marked
        ``ToolMessage`` and the run ends here, before the next model call.
        """
        stopped = None
        for message in reversed(state.get("messages") or ()):
            if not isinstance(message, ToolMessage):
                break  # only the tool results of the latest turn count
            stopped = _stop_of(message)
            if stopped is not None:
                break
        if stopped is None:
            return None
        self.pending.discard(self.run_id(state, runtime))
        return {"jump_to": "end", "messages": [AIMessage(content=stopped)]}

    @hook_config(can_jump_to=["end"])
    async def abefore_model(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    # -- model output ---------------------------------------------------------------------
    @hook_config(can_jump_to=["end"])
    def after_model(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        """Observe the model's output; warn next turn, or end the run."""
        message = _last_ai(state)
        if message is None:
            return None
        run = self.run_id(state, runtime)
        return self._after_model_verdict(
            observe_safely(self.guard, run, _model_event(message)), run, message
        )

    @hook_config(can_jump_to=["end"])
    async def aafter_model(self, state: LoopwatchState, runtime: Any) -> dict[str, Any] | None:
        message = _last_ai(state)
        if message is None:
            return None
        run = self.run_id(state, runtime)
        verdict = await aobserve_safely(self.guard, run, _model_event(message))
        return self._after_model_verdict(verdict, run, message)

    def _after_model_verdict(
        self, verdict: Verdict, run: str, message: AIMessage
    ) -> dict[str, Any] | None:
        if verdict.action is Action.WARN:
            self.pending.add(run, verdict.message)
            return None
        if verdict.action is not Action.STOP:
            return None
        self.pending.discard(run)
        text = verdict.message or STOPPED
        answers: list[AnyMessage] = [
            ToolMessage(
                content=text,
                tool_call_id=call["id"],
                name=call.get("name"),
                status="error",
                response_metadata={_MARK: _verdict_meta(verdict)},
            )
            for call in message.tool_calls
            if call.get("id")
        ]
        return {"jump_to": "end", "messages": [*answers, AIMessage(content=text)]}

    # -- the model request: deliver warnings --------------------------------------------
    def _with_warnings(self, request: ModelRequest[Any]) -> ModelRequest[Any]:
        run = self.run_id(request.state, request.runtime)
        warnings = self.pending.take(run)
        if not warnings:
            return request
        # Last, after the tool results, as a user turn: providers reject a system
        # message in mid-conversation and a message between a tool call and its result.
        note = HumanMessage(content="\n\n".join(warnings), name="loopwatch")
        return request.override(messages=[*request.messages, note])

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelCallResult[Any]:
        return handler(self._with_warnings(request))

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelCallResult[Any]:
        return await handler(self._with_warnings(request))

    # -- tool calls -----------------------------------------------------------------------
    def _tool_run(self, request: ToolCallRequest) -> str:
        runtime = request.runtime
        return self.run_id(request.state, runtime, getattr(runtime, "config", None))

    def _blocked(self, request: ToolCallRequest, verdict: Verdict) -> ToolMessage | None:
        """The answer to a call the guard does not let run, or None to run it."""
        if verdict.action is Action.WARN:
            self.pending.add(self._tool_run(request), verdict.message)
            return None
        if verdict.action is not Action.SKIP and verdict.action is not Action.STOP:
            return None
        call = request.tool_call
        return ToolMessage(
            content=verdict.message or NOT_RUN,
            tool_call_id=call["id"],
            name=call.get("name"),
            status="error",
            response_metadata={_MARK: _verdict_meta(verdict)},
        )

    def _observed_result(
        self, request: ToolCallRequest, verdict: Verdict, result: ToolMessage | Command[Any]
    ) -> ToolMessage | Command[Any]:
        """The tool's own result, marked to end the run if its observation says stop."""
        if verdict.action is Action.WARN:
            self.pending.add(self._tool_run(request), verdict.message)
        elif verdict.action is Action.STOP and isinstance(result, ToolMessage):
            # The tool already ran: keep its result (the history stays true) and mark it,
            # so that before_model ends the run before the next model call.
            meta = {**result.response_metadata, _MARK: _verdict_meta(verdict)}
            return result.model_copy(update={"response_metadata": meta})
        elif verdict.action is Action.STOP:
            log.warning("loopwatch: cannot end the run at a Command result: %s", verdict.message)
        return result

    def _observed_error(self, request: ToolCallRequest, verdict: Verdict) -> None:
        """A tool raised: its exception propagates as it would without loopwatch (the
        agent's own error handling decides); a warning waits for the next request."""
        if verdict.action is not Action.OK:
            self.pending.add(self._tool_run(request), verdict.message)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        run = self._tool_run(request)
        blocked = self._blocked(request, observe_safely(self.guard, run, _call_event(request)))
        if blocked is not None:
            return blocked
        try:
            result = handler(request)
        except Exception as exc:
            self._observed_error(
                request, observe_safely(self.guard, run, _error_event(request, exc))
            )
            raise
        verdict = observe_safely(self.guard, run, _result_event(request, result))
        return self._observed_result(request, verdict, result)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        run = self._tool_run(request)
        verdict = await aobserve_safely(self.guard, run, _call_event(request))
        blocked = self._blocked(request, verdict)
        if blocked is not None:
            return blocked
        try:
            result = await handler(request)
        except Exception as exc:
            verdict = await aobserve_safely(self.guard, run, _error_event(request, exc))
            self._observed_error(request, verdict)
            raise
        verdict = await aobserve_safely(self.guard, run, _result_event(request, result))
        return self._observed_result(request, verdict, result)


# -- events ------------------------------------------------------------------------------
def _last_human(state: Any) -> HumanMessage | None:
    messages = state.get("messages") if isinstance(state, dict) else None
    for message in reversed(messages or ()):
        if isinstance(message, HumanMessage):
            return message
    return None


def _last_ai(state: Any) -> AIMessage | None:
    messages = state.get("messages") if isinstance(state, dict) else None
    if messages and isinstance(messages[-1], AIMessage):
        return messages[-1]
    return None


def _model_event(message: AIMessage) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": "model", "text": content_text(message.content)}
    usage = message.usage_metadata
    if usage:
        event["tokens"] = usage.get("total_tokens", 0)
    if message.name:
        event["agent"] = message.name
    return event


def _call_event(request: ToolCallRequest) -> dict[str, Any]:
    call = request.tool_call
    return {
        "kind": "tool_call",
        "name": call.get("name"),
        "args": call.get("args"),
        "id": call.get("id"),
    }


def _result_event(request: ToolCallRequest, result: ToolMessage | Command[Any]) -> dict[str, Any]:
    call = request.tool_call
    message: Any = result
    if isinstance(result, Command):
        # A tool may answer with a Command that carries its ToolMessage in the update.
        update = result.update if isinstance(result.update, dict) else {}
        found = [
            m
            for m in update.get("messages") or ()
            if isinstance(m, ToolMessage) and m.tool_call_id == call.get("id")
        ]
        message = found[0] if found else None
    text = content_text(getattr(message, "content", "")) if message is not None else ""
    return {
        "kind": "tool_result",
        "name": call.get("name"),
        "id": call.get("id"),
        "text": text,
        "error": getattr(message, "status", "success") == "error",
    }


def _error_event(request: ToolCallRequest, exc: BaseException) -> dict[str, Any]:
    call = request.tool_call
    return {
        "kind": "tool_result",
        "name": call.get("name"),
        "id": call.get("id"),
        "text": f"{type(exc).__name__}: {exc}",
        "error": True,
    }
