"""Strands Agents: a hook provider (``Agent(hooks=[LoopwatchHooks()])``).

::

    from strands import Agent
    from loopwatch import LoopDetected
    from loopwatch.integrations.strands import LoopwatchHooks

    agent = Agent(model=model, tools=[web_search], hooks=[LoopwatchHooks(on_loop="skip")])
    try:
        agent("Weather in Paris?")
    except LoopDetected as stop:
        print(stop.verdict.message)

Through Strands' own hook events, on every path a run takes (``agent(...)``,
``invoke_async``, ``stream_async``):

* ``BeforeToolCallEvent`` observes each call before it runs; on ``skip`` it sets
  ``cancel_tool`` to the explanation: the tool does not run and the model gets it as
  the call's (error) tool result; ``AfterToolCallEvent`` observes the result;
* ``AfterModelCallEvent`` observes each complete model response (text, tokens);
* on ``warn`` the message waits for the **next model request only**: an
  ``InvokeModelStage.Input`` middleware (added to each agent on its first run) appends it
  as a text block to the request's last user message, after the tool results, the way
  Strands' own context manager adds its notes; the agent's history is not touched;
* on ``stop`` the run ends Strands' way: the stopped call is cancelled with the message,
  the rest of its batch too (``BeforeToolsEvent.cancel``), the batch ends the turn
  (``AfterToolsEvent.end_turn``, the message is the final answer, the model is not
  called again) so that the conversation stays valid for the next turn; then
  :class:`~loopwatch.LoopDetected` is raised from the call that started the run
  (``agent(...)``, ``invoke_async``, ``stream_async``, or the swarm's call); its message
  names the loop.

The run id is the agent's ``session_id`` (its session manager's id, else one per agent
instance: one conversation), or the swarm's ``id``; each invocation's prompt is a
``user`` event. Multi-agent: an agent used as another's tool (``agent.as_tool()``, or
called from a tool) joins the run of the agent that called it, its prompt a ``span``
event; the agents of a ``Swarm`` created with ``hooks=[watch]`` (and each agent with
``hooks=[watch]``) share the swarm's run. Every event names its agent.
"""

from __future__ import annotations

import contextlib
import contextvars
import weakref
from dataclasses import dataclass, field
from typing import Any, Final, cast

try:
    from strands.hooks import (
        AfterInvocationEvent,
        AfterModelCallEvent,
        AfterMultiAgentInvocationEvent,
        AfterToolCallEvent,
        AfterToolsEvent,
        BeforeInvocationEvent,
        BeforeModelCallEvent,
        BeforeMultiAgentInvocationEvent,
        BeforeToolCallEvent,
        BeforeToolsEvent,
        HookProvider,
        HookRegistry,
    )
    from strands.middleware import InvokeModelContext, InvokeModelStage
    from strands.types.content import Message
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "strands", "Strands Agents (strands-agents)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import (
    NOT_RUN,
    STOPPED,
    PendingWarnings,
    StoppedRuns,
    aobserve_queued,
    content_text,
    make_guard,
)

__all__ = ["LoopwatchHooks"]

_KEY: Final = "loopwatch"
"""Where a run's loopwatch record lives in Strands' ``invocation_state``."""


@dataclass(eq=False)
class _Run:
    """One loopwatch run: its id and what started it (an agent or a swarm)."""

    watch: LoopwatchHooks
    run_id: str
    owner: Any
    user_seen: bool = False
    tokens: dict[int, contextvars.Token[_Run | None]] = field(default_factory=dict)


# The run of the agent invocation being executed in this context: an agent invoked from
# inside it (an agent used as a tool) inherits it and joins that run.
_ACTIVE: contextvars.ContextVar[_Run | None] = contextvars.ContextVar(
    "loopwatch_strands_run", default=None
)


class LoopwatchHooks(HookProvider):
    """Loop detection for Strands agents; one instance may serve many agents.

    ``LoopwatchHooks()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self._stopped = StoppedRuns()
        self._with_middleware: weakref.WeakSet[Any] = weakref.WeakSet()

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeInvocationEvent, self._before_invocation)
        registry.add_callback(AfterInvocationEvent, self._after_invocation)
        registry.add_callback(BeforeModelCallEvent, self._before_model_call)
        registry.add_callback(AfterModelCallEvent, self._after_model_call)
        registry.add_callback(BeforeToolsEvent, self._before_tools)
        registry.add_callback(BeforeToolCallEvent, self._before_tool_call)
        registry.add_callback(AfterToolCallEvent, self._after_tool_call)
        registry.add_callback(AfterToolsEvent, self._after_tools)
        registry.add_callback(BeforeMultiAgentInvocationEvent, self._before_multi_agent)
        registry.add_callback(AfterMultiAgentInvocationEvent, self._after_multi_agent)

    # -- run ids ------------------------------------------------------------------------
    def run_id(self, agent: Any) -> str:
        """The run id of an agent invoked on its own: its session id (one per agent
        instance when it has no session manager)."""
        return str(getattr(agent, "session_id", None) or getattr(agent, "agent_id", "default"))

    def _run(self, invocation_state: dict[str, Any] | None) -> _Run | None:
        run = (invocation_state or {}).get(_KEY)
        return run if isinstance(run, _Run) and run.watch is self else None

    async def _observe(self, run: _Run, event: dict[str, Any]) -> Verdict:
        return await aobserve_queued(self.guard, run.run_id, event, self.pending, self._stopped)

    def _stop_message(self, run: _Run | None) -> str | None:
        """The stop message when the run was stopped (its remaining steps are refused)."""
        if run is None:
            return None
        verdict = self._stopped.get(run.run_id)
        if verdict is None:
            return None
        return verdict.message or STOPPED

    # -- invocations: user turns, delegation --------------------------------------------
    async def _before_invocation(self, event: BeforeInvocationEvent) -> None:
        agent = event.agent
        state = event.invocation_state
        run = self._run(state)
        if run is None:
            active = _ACTIVE.get()
            if active is not None and active.watch is self:
                run = active  # invoked from inside a watched run: an agent used as a tool
        if run is None:
            run = _Run(self, self.run_id(agent), owner=agent)
            self._stopped.pop(run.run_id)  # a new run of a conversation
        state[_KEY] = run
        run.tokens[id(agent)] = _ACTIVE.set(run)
        self._add_middleware(agent)
        prompt = _messages_text(event.messages)
        if run.owner is agent or not run.user_seen:
            run.user_seen = True
            await self._observe(run, {"kind": "user", "text": prompt})
        else:
            # Another agent's request, not the user's: it does not start a user turn.
            span = {"kind": "span", "type": "agent", "name": _name(agent), "text": prompt}
            await self._observe(run, span)

    async def _after_invocation(self, event: AfterInvocationEvent) -> None:
        agent = event.agent
        run = self._run(event.invocation_state)
        if run is None:
            return
        token = run.tokens.pop(id(agent), None)
        if token is not None:
            with contextlib.suppress(ValueError):  # reset from another context: leave it
                _ACTIVE.reset(token)
        if run.owner is agent:
            self._end(run)

    def _end(self, run: _Run) -> None:
        """The run's owner is done: forget its warnings; raise if it was stopped."""
        self.pending.discard(run.run_id)
        verdict = self._stopped.pop(run.run_id)
        if verdict is not None:
            raise LoopDetected(verdict)

    async def _before_multi_agent(self, event: BeforeMultiAgentInvocationEvent) -> None:
        state = event.invocation_state
        if state is None:
            return
        source = event.source
        run = _Run(self, str(getattr(source, "id", None) or "default"), owner=source)
        self._stopped.pop(run.run_id)
        state[_KEY] = run

    async def _after_multi_agent(self, event: AfterMultiAgentInvocationEvent) -> None:
        run = self._run(event.invocation_state)
        if run is not None and run.owner is event.source:
            self._end(run)

    # -- warnings: into the next model request only -------------------------------------
    def _add_middleware(self, agent: Any) -> None:
        add = getattr(agent, "add_middleware", None)
        if add is None or agent in self._with_middleware:
            return
        add(InvokeModelStage.Input, self._deliver_warnings)
        self._with_middleware.add(agent)

    async def _deliver_warnings(self, context: InvokeModelContext) -> InvokeModelContext:
        run = self._run(context.invocation_state)
        warnings = self.pending.take(run.run_id) if run is not None else []
        if not warnings:
            return context
        note = {"text": "\n\n".join(warnings)}
        messages = list(context.messages)
        if messages and messages[-1].get("role") == "user":
            # After the tool results of the same user message: each call keeps its result
            # right after it and the roles keep alternating. The request's copy only.
            last: dict[str, Any] = dict(messages[-1])
            last["content"] = [*last.get("content", []), note]
            messages[-1] = cast("Message", last)
            return context.replace(
                messages=messages, dynamic_trailing_blocks=context.dynamic_trailing_blocks + 1
            )
        messages.append(cast("Message", {"role": "user", "content": [note]}))
        return context.replace(messages=messages)

    # -- model output -------------------------------------------------------------------
    async def _before_model_call(self, event: BeforeModelCallEvent) -> None:
        message = self._stop_message(self._run(event.invocation_state))
        if message is not None:
            event.cancel = message  # a stopped run does not call the model again

    async def _after_model_call(self, event: AfterModelCallEvent) -> None:
        run = self._run(event.invocation_state)
        response = event.stop_response
        if run is None or response is None or self._stop_message(run) is not None:
            return
        message = response.message
        observed: dict[str, Any] = {
            "kind": "model",
            "text": _blocks_text(message.get("content")),
            "agent": _name(event.agent),
        }
        usage: dict[str, Any] = dict((message.get("metadata") or {}).get("usage") or {})
        if usage.get("totalTokens"):
            observed["tokens"] = usage["totalTokens"]
        await self._observe(run, observed)

    # -- tool calls -----------------------------------------------------------------------
    async def _before_tools(self, event: BeforeToolsEvent) -> None:
        message = self._stop_message(self._run(event.invocation_state))
        if message is not None and not event.cancel:
            event.cancel = message  # the model's response was the stop: none of its calls run

    async def _before_tool_call(self, event: BeforeToolCallEvent) -> None:
        run = self._run(event.invocation_state)
        if run is None or event.cancel_tool:
            return
        stopped = self._stop_message(run)
        if stopped is not None:
            event.cancel_tool = stopped  # a call of the stopped batch
            return
        tool_use = event.tool_use
        verdict = await self._observe(
            run,
            {
                "kind": "tool_call",
                "name": tool_use.get("name"),
                "args": tool_use.get("input"),
                "id": tool_use.get("toolUseId"),
                "agent": _name(event.agent),
            },
        )
        if verdict.action is Action.SKIP:
            event.cancel_tool = verdict.message or NOT_RUN
        elif verdict.action is Action.STOP:
            event.cancel_tool = verdict.message or STOPPED

    async def _after_tool_call(self, event: AfterToolCallEvent) -> None:
        run = self._run(event.invocation_state)
        if run is None or event.cancel_message is not None or self._stop_message(run):
            return  # a cancelled call (by loopwatch or another hook) did not run
        result = event.result
        error = event.exception is not None or result.get("status") == "error"
        text = _blocks_text(result.get("content"))
        if event.exception is not None and not text:
            text = f"{type(event.exception).__name__}: {event.exception}"
        await self._observe(
            run,
            {
                "kind": "tool_result",
                "name": event.tool_use.get("name"),
                "id": event.tool_use.get("toolUseId"),
                "text": text,
                "error": error,
                "agent": _name(event.agent),
            },
        )

    async def _after_tools(self, event: AfterToolsEvent) -> None:
        message = self._stop_message(self._run(event.invocation_state))
        if message is not None and not event.end_turn:
            event.end_turn = message  # the run's final answer: the model is not called again


def _name(agent: Any) -> str | None:
    name = getattr(agent, "name", None)
    return str(name) if name else None


def _blocks_text(blocks: Any) -> str:
    """The text of Strands content blocks (``text``; ``json`` as JSON; the rest skipped
    when it is a tool use or reasoning, which other events carry or the model hides)."""
    if not isinstance(blocks, list):
        return content_text(blocks)
    parts = []
    for block in blocks:
        if not isinstance(block, dict):
            parts.append(str(block))
        elif "text" in block:
            parts.append(str(block["text"]))
        elif "json" in block:
            parts.append(content_text(block["json"]))
        elif "toolResult" in block:
            parts.append(_blocks_text(block["toolResult"].get("content")))
    return "\n".join(parts)


def _messages_text(messages: Any) -> str:
    """The text of an invocation's input messages (the user's prompt)."""
    if not isinstance(messages, list):
        return ""
    return "\n".join(
        _blocks_text(m.get("content")) for m in messages if isinstance(m, dict)
    ).strip()
