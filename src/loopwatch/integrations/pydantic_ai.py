"""Pydantic AI: a capability (``Agent(capabilities=[LoopwatchCapability()])``).

::

    from pydantic_ai import Agent
    from loopwatch.integrations.pydantic_ai import LoopwatchCapability

    agent = Agent(model, tools=[web_search], capabilities=[LoopwatchCapability(on_loop="skip")])
    result = agent.run_sync("Weather in Paris?", conversation_id="ticket-42")

Pydantic AI's capability hooks carry every path a run takes (``run``, ``run_sync``,
``run_stream``, ``run_stream_events``, ``iter``):

* ``wrap_tool_execute`` observes each call before it runs and its result after; on
  ``skip`` it raises the framework's ``SkipToolExecution`` with the explanation, which
  the model gets as the call's tool return (the tool does not run);
* ``after_model_request`` observes each model response (text, tokens, agent name);
* on ``warn`` the message is enqueued (``RunContext.enqueue``) as a request-scoped
  ``SystemPromptPart``: Pydantic AI sends it in the next model request, after the tool
  returns, and in no later request, rendered as each provider accepts it;
* on ``stop`` the hook raises :class:`~loopwatch.LoopDetected`, which ends the run and
  propagates from ``run`` / ``run_sync`` as is; its message names the loop.

The run id is Pydantic AI's ``conversation_id`` (pass ``conversation_id=`` or a
``message_history`` to follow a conversation across runs); each run's prompt is a
``user`` event. An agent run started inside another watched run (an agent delegating
to another from a tool) joins the outer run, as a ``span`` event of type ``agent``, so
that the exchange between the agents is one run whose events name their agent.
"""

from __future__ import annotations

import contextvars
from typing import Any, Final

try:
    from pydantic_ai import RunContext
    from pydantic_ai.capabilities import AbstractCapability, WrapRunHandler
    from pydantic_ai.capabilities.abstract import WrapToolExecuteHandler
    from pydantic_ai.exceptions import SkipToolExecution
    from pydantic_ai.messages import ModelResponse, SystemPromptPart, TextPart, ToolCallPart
    from pydantic_ai.models import ModelRequestContext
    from pydantic_ai.run import AgentRunResult
    from pydantic_ai.tools import ToolDefinition
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "pydantic-ai", "Pydantic AI (pydantic-ai-slim)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, PendingWarnings, aobserve_safely, content_text, make_guard

__all__ = ["LoopwatchCapability"]

DEFAULT_RUN: Final = "default"

# The loopwatch run of the agent run being executed in this context: (guard, run id).
# Set by ``wrap_run``; an agent run started from inside it (delegation) inherits it.
_ACTIVE: contextvars.ContextVar[tuple[Guard, str] | None] = contextvars.ContextVar(
    "loopwatch_pydantic_ai_run", default=None
)


class LoopwatchCapability(AbstractCapability[Any]):
    """Loop detection for Pydantic AI agents; one instance may serve many agents.

    ``LoopwatchCapability()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()

    # -- run ids ------------------------------------------------------------------------
    def run_id(self, ctx: RunContext[Any]) -> str:
        """The loopwatch run a hook belongs to: the outermost watched agent run's
        conversation id (delegated agents join it)."""
        active = _ACTIVE.get()
        if active is not None and active[0] is self.guard:
            return active[1]
        return str(ctx.conversation_id or ctx.run_id or DEFAULT_RUN)

    async def wrap_run(
        self, ctx: RunContext[Any], *, handler: WrapRunHandler
    ) -> AgentRunResult[Any]:
        active = _ACTIVE.get()
        nested = active is not None and active[0] is self.guard
        run = self.run_id(ctx)
        prompt = None if ctx.prompt is None else content_text(_prompt_blocks(ctx.prompt))
        if nested:
            # A delegated agent: its prompt comes from the other agent, not the user, so
            # it does not start a new user turn (counts go on across the exchange).
            event: dict[str, Any] = {"kind": "span", "type": "agent", "name": _agent(ctx)}
            if prompt is not None:
                event["text"] = prompt
            await aobserve_safely(self.guard, run, event)
        elif prompt is not None:
            await aobserve_safely(self.guard, run, {"kind": "user", "text": prompt})
        token = _ACTIVE.set((self.guard, run))
        try:
            return await handler()
        finally:
            _ACTIVE.reset(token)
            if not nested:
                self.pending.discard(run)

    # -- warnings: into the next model request only -------------------------------------
    async def before_model_request(
        self, ctx: RunContext[Any], request_context: ModelRequestContext
    ) -> ModelRequestContext:
        warnings = self.pending.take(self.run_id(ctx))
        if warnings:
            # Request-scoped: the model sees it in this request only; Pydantic AI places
            # it after the tool returns and renders it the way each provider accepts.
            ctx.enqueue(SystemPromptPart("\n\n".join(warnings), scope="request"))
        return request_context

    def _act(self, run: str, verdict: Verdict) -> None:
        """Queue a warning, or end the run on a stop."""
        if verdict.action is Action.WARN:
            self.pending.add(run, verdict.message)
        elif verdict.action is Action.STOP:
            self.pending.discard(run)
            raise LoopDetected(verdict)

    # -- model output -------------------------------------------------------------------
    async def after_model_request(
        self,
        ctx: RunContext[Any],
        *,
        request_context: ModelRequestContext,
        response: ModelResponse,
    ) -> ModelResponse:
        text = "\n".join(p.content for p in response.parts if isinstance(p, TextPart))
        event: dict[str, Any] = {"kind": "model", "text": text}
        tokens = response.usage.total_tokens
        if tokens:
            event["tokens"] = tokens
        agent = _agent(ctx)
        if agent:
            event["agent"] = agent
        run = self.run_id(ctx)
        self._act(run, await aobserve_safely(self.guard, run, event))
        return response

    # -- tool calls -----------------------------------------------------------------------
    async def wrap_tool_execute(
        self,
        ctx: RunContext[Any],
        *,
        call: ToolCallPart,
        tool_def: ToolDefinition,
        args: Any,
        handler: WrapToolExecuteHandler,
    ) -> Any:
        run = self.run_id(ctx)
        event: dict[str, Any] = {
            "kind": "tool_call",
            "name": call.tool_name,
            "args": _args(call),
            "id": call.tool_call_id,
        }
        agent = _agent(ctx)
        if agent:
            event["agent"] = agent
        verdict = await aobserve_safely(self.guard, run, event)
        if verdict.action is Action.SKIP:
            raise SkipToolExecution(verdict.message or NOT_RUN)
        self._act(run, verdict)
        result_event: dict[str, Any] = {
            "kind": "tool_result",
            "name": call.tool_name,
            "id": call.tool_call_id,
        }
        if agent:
            result_event["agent"] = agent
        try:
            result = await handler(args)
        except Exception as exc:
            # The tool failed (or asked for a retry): the error goes on as it would
            # without loopwatch; a warning waits for the next request.
            result_event.update(text=f"{type(exc).__name__}: {exc}", error=True)
            verdict = await aobserve_safely(self.guard, run, result_event)
            if verdict.action is not Action.OK:
                self.pending.add(run, verdict.message)
            raise
        result_event.update(text=content_text(result), error=False)
        self._act(run, await aobserve_safely(self.guard, run, result_event))
        return result


def _agent(ctx: RunContext[Any]) -> str | None:
    agent = ctx.agent
    name = getattr(agent, "name", None) if agent is not None else None
    return str(name) if name else None


def _args(call: ToolCallPart) -> Any:
    """The call's arguments as the model sent them (a dict; raw text if not JSON)."""
    try:
        return call.args_as_dict()
    except ValueError:
        return call.args


def _prompt_blocks(prompt: Any) -> Any:
    """A prompt as text or text blocks (images and files by their repr)."""
    if isinstance(prompt, str):
        return prompt
    return [p if isinstance(p, str) else repr(p) for p in prompt]
