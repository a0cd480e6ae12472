"""OpenAI Agents SDK: a tool input guardrail, run hooks and a model-input filter.

::

    from agents import Agent, Runner, function_tool
    from loopwatch.integrations.openai_agents import LoopwatchAgents

    watch = LoopwatchAgents(on_loop="skip")             # one per app; holds the Guard
    agent = Agent(name="researcher", tools=watch.protect([web_search]))
    run = watch.run("ticket-42")                         # one per Runner.run
    result = await Runner.run(agent, "...", hooks=run.hooks, run_config=run.run_config)

* The **tool input guardrail** observes each call before it runs: ``skip`` answers
  the model with ``reject_content(message)`` instead of running the tool; ``stop``
  returns ``raise_exception`` (the SDK raises ``ToolInputGuardrailTripwireTriggered``
  whose ``output.output_info`` is the :class:`~loopwatch.Verdict`).
* The **run hooks** observe model output (``on_llm_end``) and tool results
  (``on_tool_end``); a ``stop`` there raises :class:`~loopwatch.LoopDetected`
  (for a tool result: before the next model call).
  :func:`loop_verdict` reads the verdict out of either exception.
* The **call_model_input_filter** adds pending warnings to the next model input
  only, as its last item (a user message after the tool outputs).

The guardrail is attached to the tools, which outlive a run, so it learns the run
from the run config: :meth:`LoopwatchAgents.run` puts the run id in
``RunConfig.trace_metadata["loopwatch_run_id"]``.
"""

from __future__ import annotations

import dataclasses
import inspect
import uuid
from collections.abc import Iterable
from typing import Any, Final, TypeVar

try:
    from agents import RunConfig, RunContextWrapper, RunHooks
    from agents.exceptions import ToolInputGuardrailTripwireTriggered
    from agents.items import ModelResponse
    from agents.run_config import CallModelData, CallModelInputFilter, ModelInputData
    from agents.tool import FunctionTool, Tool
    from agents.tool_context import ToolContext
    from agents.tool_guardrails import (
        ToolGuardrailFunctionOutput,
        ToolInputGuardrail,
        ToolInputGuardrailData,
    )
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "openai-agents", "the OpenAI Agents SDK (openai-agents)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, PendingWarnings, aobserve_safely, content_text, make_guard

__all__ = ["LoopTripwire", "LoopwatchAgents", "LoopwatchRun", "LoopwatchRunHooks", "loop_verdict"]

RUN_KEY: Final = "loopwatch_run_id"
DEFAULT_RUN: Final = "default"

T = TypeVar("T", bound=Tool)


class LoopTripwire(ToolInputGuardrailTripwireTriggered):
    """The SDK's tool-guardrail tripwire, saying which loop tripped it.

    The SDK builds its own tripwire exception with a message that names only the
    guardrail's class ("Tool input guardrail ToolInputGuardrail triggered
    tripwire"); a stopped run should say why. Raised by the guardrail itself, so
    ``except ToolInputGuardrailTripwireTriggered`` still catches it and
    ``output.output_info`` is still the :class:`~loopwatch.Verdict`.
    """

    def __init__(self, guardrail: ToolInputGuardrail[Any], output: ToolGuardrailFunctionOutput):
        super().__init__(guardrail, output)
        info = output.output_info
        message = info.message if isinstance(info, Verdict) and info.message else None
        self.args = (message or "[loopwatch] Run stopped: a loop was detected.",)


def loop_verdict(exc: BaseException) -> Verdict | None:
    """The loopwatch verdict behind an exception from ``Runner.run``, if any (also
    when the SDK wrapped it in another exception)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, LoopDetected):
            return current.verdict
        if isinstance(current, ToolInputGuardrailTripwireTriggered):
            info = current.output.output_info
            return info if isinstance(info, Verdict) else None
        current = current.__cause__ or current.__context__
    return None


def _run_of_config(run_config: Any) -> str | None:
    metadata = getattr(run_config, "trace_metadata", None)
    if isinstance(metadata, dict) and metadata.get(RUN_KEY):
        return str(metadata[RUN_KEY])
    group = getattr(run_config, "group_id", None)
    return str(group) if group else None


class LoopwatchAgents:
    """Loop detection for OpenAI Agents SDK runs; one per application.

    ``LoopwatchAgents()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self.tool_guardrail: ToolInputGuardrail[Any] = ToolInputGuardrail(
            guardrail_function=self._check_call, name="loopwatch"
        )

    # -- wiring -----------------------------------------------------------------------
    def protect(self, tools: Iterable[T]) -> list[T]:
        """The tools with the loopwatch tool input guardrail added to each function tool.

        Function tools are copied, not changed: a tool object shared with another
        agent (or another ``LoopwatchAgents``) keeps its own guardrails. Other tools
        (hosted, MCP...) are returned as they are.
        """
        out: list[T] = []
        for tool in tools:
            if isinstance(tool, FunctionTool):
                guards = list(tool.tool_input_guardrails or [])
                if self.tool_guardrail not in guards:
                    guards.append(self.tool_guardrail)
                tool = dataclasses.replace(tool, tool_input_guardrails=guards)
            out.append(tool)
        return out

    def run(
        self, run_id: str | None = None, *, run_config: RunConfig | None = None
    ) -> LoopwatchRun:
        """Hooks and a run config for one ``Runner.run`` (``run_id`` defaults to a new
        id; pass the conversation id to follow a conversation across runs).
        ``run_config`` is your own configuration to extend."""
        return LoopwatchRun(self, run_id or f"oa-{uuid.uuid4().hex}", run_config)

    # -- the guardrail ----------------------------------------------------------------
    def run_id_of(self, context: Any) -> str:
        """The run a tool call belongs to, read from the run config the SDK hands to
        tools; the run config's ``group_id`` serves when loopwatch did not build it."""
        found = _run_of_config(getattr(context, "run_config", None))
        return found or DEFAULT_RUN

    async def _check_call(self, data: ToolInputGuardrailData) -> ToolGuardrailFunctionOutput:
        context: ToolContext[Any] = data.context
        run = self.run_id_of(context)
        event = {
            "kind": "tool_call",
            "name": context.tool_name,
            "args": context.tool_arguments,
            "id": context.tool_call_id,
            "agent": getattr(data.agent, "name", None),
        }
        verdict = await aobserve_safely(self.guard, run, event)
        if verdict.action is Action.SKIP:
            return ToolGuardrailFunctionOutput.reject_content(
                verdict.message or NOT_RUN, output_info=verdict
            )
        if verdict.action is Action.STOP:
            self.pending.discard(run)
            raise LoopTripwire(
                self.tool_guardrail,
                ToolGuardrailFunctionOutput.raise_exception(output_info=verdict),
            )
        if verdict.action is Action.WARN:
            self.pending.add(run, verdict.message)
        return ToolGuardrailFunctionOutput.allow(output_info=verdict)

    # -- the model input filter -------------------------------------------------------
    def input_filter(
        self, run_id: str, inner: CallModelInputFilter | None = None
    ) -> CallModelInputFilter:
        """A ``call_model_input_filter`` that adds the run's pending warnings to the
        next model input (after ``inner``, your own filter, if any)."""

        async def add_warnings(data: CallModelData[Any]) -> ModelInputData:
            model_data = data.model_data
            if inner is not None:
                produced = inner(data)
                model_data = await produced if inspect.isawaitable(produced) else produced
            warnings = self.pending.take(run_id)
            if not warnings:
                return model_data
            note: Any = {"role": "user", "content": "\n\n".join(warnings)}
            return ModelInputData(
                input=[*model_data.input, note], instructions=model_data.instructions
            )

        return add_warnings


class LoopwatchRunHooks(RunHooks[Any]):
    """Observes model output and tool results of one run.

    A stop on a model output raises :class:`LoopDetected` at once (the tool calls it
    asked for do not run). A stop on a tool result raises it just before the next
    model call: raised inside a tool hook, the SDK would wrap it in ``UserError``.
    """

    def __init__(self, owner: LoopwatchAgents, run_id: str) -> None:
        self.owner = owner
        self.run_id = run_id
        self.stopped: Verdict | None = None

    async def _observe(self, event: dict[str, Any]) -> Verdict:
        verdict = await aobserve_safely(self.owner.guard, self.run_id, event)
        if verdict.action is Action.STOP:
            self.owner.pending.discard(self.run_id)
            if self.stopped is None:
                self.stopped = verdict
        elif verdict.action is Action.WARN:  # a skip's message is the call's result
            self.owner.pending.add(self.run_id, verdict.message)
        return verdict

    async def on_llm_start(
        self,
        context: RunContextWrapper[Any],
        agent: Any,
        system_prompt: str | None,
        input_items: list[Any],
    ) -> None:
        if self.stopped is not None:
            raise LoopDetected(self.stopped)

    async def on_llm_end(
        self, context: RunContextWrapper[Any], agent: Any, response: ModelResponse
    ) -> None:
        texts: list[str] = []
        for item in response.output:
            if getattr(item, "type", None) == "message":
                texts.extend(
                    part.text
                    for part in getattr(item, "content", ())
                    if getattr(part, "type", None) == "output_text"
                )
        event: dict[str, Any] = {"kind": "model", "text": "\n".join(texts)}
        tokens = getattr(response.usage, "total_tokens", 0)
        if tokens:
            event["tokens"] = tokens
        name = getattr(agent, "name", None)
        if name:
            event["agent"] = name
        verdict = await self._observe(event)
        if verdict.action is Action.STOP:
            raise LoopDetected(verdict)

    async def on_tool_end(
        self, context: RunContextWrapper[Any], agent: Any, tool: Tool, result: object
    ) -> None:
        await self._observe(
            {
                "kind": "tool_result",
                "name": getattr(context, "tool_name", None) or tool.name,
                "id": getattr(context, "tool_call_id", None),
                "text": content_text(result),
            }
        )


class LoopwatchRun:
    """What one ``Runner.run`` needs: ``hooks`` and ``run_config``."""

    def __init__(self, owner: LoopwatchAgents, run_id: str, base: RunConfig | None) -> None:
        self.run_id = run_id
        self.hooks = LoopwatchRunHooks(owner, run_id)
        base = base if base is not None else RunConfig()
        metadata = {**(base.trace_metadata or {}), RUN_KEY: run_id}
        self.run_config = dataclasses.replace(
            base,
            trace_metadata=metadata,
            call_model_input_filter=owner.input_filter(run_id, base.call_model_input_filter),
        )
