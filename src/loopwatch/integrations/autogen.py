"""AutoGen AgentChat: a model client wrapper, tool wrappers and a termination condition.

::

    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.conditions import MaxMessageTermination
    from autogen_agentchat.teams import RoundRobinGroupChat
    from loopwatch.integrations.autogen import LoopwatchAutogen

    watch = LoopwatchAutogen(on_loop="skip")         # one per conversation
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(client, agent="researcher"),
        tools=watch.tools([web_search]),
        max_tool_iterations=10,
    )
    team = RoundRobinGroupChat([agent], termination_condition=watch.termination)
    result = await team.run(task="Weather in Paris?")  # result.stop_reason says why

* The **model client** wrapper observes each model response (its text, and the tool
  calls it asks for, by call id, so the tools know which agent asked), and adds the
  pending warnings to the next request only, as a last ``UserMessage`` after the
  tool results: the agent's model context (its history) never holds them.
* The **tool** wrappers observe each call before it runs and its result after. On
  ``skip`` and ``stop`` the tool does not run: the call's result is the
  explanation, so every tool call still gets its result.
* The **termination condition** ends a team's run on ``stop`` with a ``StopMessage``
  that names the loop (``TaskResult.stop_reason``); combine it with yours
  (``watch.termination | MaxMessageTermination(30)``). It also observes what only
  the team sees: the user's messages (a ``user`` event per new input) and handoffs.
  An agent run without a team (``agent.run``) ends on a stop by the model client
  raising :class:`~loopwatch.LoopDetected` before the next model call.

The run id is the conversation's: ``LoopwatchAutogen(run_id=...)``, else a new id per
``LoopwatchAutogen``. Events carry the agent's name (the model client's ``agent=``;
the message's ``source`` in the team), so a handoff ping-pong is seen.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from collections.abc import AsyncGenerator, Callable, Iterable, Mapping, Sequence
from typing import Any, Final

try:
    from autogen_agentchat.base import TerminatedException, TerminationCondition
    from autogen_agentchat.messages import (
        BaseAgentEvent,
        BaseChatMessage,
        HandoffMessage,
        StopMessage,
    )
    from autogen_core import CancellationToken, FunctionCall
    from autogen_core.models import (
        ChatCompletionClient,
        CreateResult,
        LLMMessage,
        ModelCapabilities,  # deprecated, still abstract
        ModelInfo,
        RequestUsage,
        UserMessage,
    )
    from autogen_core.tools import BaseTool, FunctionTool, Tool, ToolSchema
    from pydantic import BaseModel
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "autogen", "AutoGen AgentChat (autogen-agentchat)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, STOPPED, PendingWarnings, aobserve_safely, content_text, make_guard

__all__ = ["LoopwatchAutogen", "LoopwatchModelClient", "LoopwatchTermination", "LoopwatchTool"]

_CALLS_MAX: Final = 4096  # call id -> agent, for the tools


class LoopwatchAutogen:
    """Loop detection for one AutoGen AgentChat conversation (a team or an agent).

    ``LoopwatchAutogen()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=`` (one
    guard can serve many conversations: give each its ``run_id``).
    """

    def __init__(self, guard: Guard | None = None, *, run_id: str | None = None, **config: Any):
        self.guard = make_guard(guard, config)
        self.run_id = run_id or f"ag-{uuid.uuid4().hex}"
        self.pending = PendingWarnings()
        self.stopped: Verdict | None = None
        self._callers: OrderedDict[str, str | None] = OrderedDict()
        self._lock = threading.Lock()
        self.termination = LoopwatchTermination(self)

    # -- wiring -----------------------------------------------------------------------
    def model_client(
        self, client: ChatCompletionClient, agent: str | None = None
    ) -> LoopwatchModelClient:
        """``client`` watched for the agent named ``agent``."""
        return LoopwatchModelClient(client, self, agent)

    def tools(
        self, tools: Iterable[BaseTool[Any, Any] | Callable[..., Any]]
    ) -> list[LoopwatchTool]:
        """``tools`` wrapped so that each call is observed before it runs; plain
        functions become ``FunctionTool``s first, as ``AssistantAgent`` does."""
        return [
            LoopwatchTool(
                tool
                if isinstance(tool, BaseTool)
                else FunctionTool(tool, description=tool.__doc__ or "", strict=False),
                self,
            )
            for tool in tools
        ]

    # -- shared ------------------------------------------------------------------------
    async def observe(self, event: dict[str, Any]) -> Verdict:
        verdict = await aobserve_safely(self.guard, self.run_id, event)
        if verdict.action is Action.STOP:
            self.pending.discard(self.run_id)
            if self.stopped is None:
                self.stopped = verdict
        elif verdict.action is Action.WARN:  # a skip's message is the call's result
            self.pending.add(self.run_id, verdict.message)
        return verdict

    def _asked(self, call_id: str, agent: str | None) -> None:
        with self._lock:
            self._callers[call_id] = agent
            while len(self._callers) > _CALLS_MAX:
                self._callers.popitem(last=False)

    def _caller(self, call_id: str | None) -> str | None:
        with self._lock:
            return self._callers.get(call_id) if call_id else None


class LoopwatchModelClient(ChatCompletionClient):
    """A model client that observes each response and delivers pending warnings."""

    def __init__(self, inner: ChatCompletionClient, owner: LoopwatchAutogen, agent: str | None):
        self.inner = inner
        self._owner = owner
        self._agent = agent

    def _request(self, messages: Sequence[LLMMessage]) -> list[LLMMessage]:
        stopped = self._owner.stopped
        if stopped is not None:
            self._owner.stopped = None  # raised once: the conversation's next turn may go on
            raise LoopDetected(stopped)
        warnings = self._owner.pending.take(self._owner.run_id)
        if not warnings:
            return list(messages)
        # Last, after the tool results, as a user turn: providers reject a system
        # message in mid-conversation and a message between a tool call and its result.
        return [*messages, UserMessage(content="\n\n".join(warnings), source="loopwatch")]

    async def _observed(self, result: CreateResult) -> None:
        content = result.content
        text = content if isinstance(content, str) else (result.thought or "")
        event: dict[str, Any] = {"kind": "model", "text": content_text(text)}
        tokens = result.usage.prompt_tokens + result.usage.completion_tokens
        if tokens:
            event["tokens"] = tokens
        if self._agent:
            event["agent"] = self._agent
        if isinstance(content, list):
            for call in content:
                if isinstance(call, FunctionCall):
                    self._owner._asked(call.id, self._agent)
        await self._owner.observe(event)

    async def create(
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> CreateResult:  # forwards the keywords as they come
        result = await self.inner.create(self._request(messages), **kwargs)
        await self._observed(result)
        return result

    def create_stream(
        self, messages: Sequence[LLMMessage], **kwargs: Any
    ) -> AsyncGenerator[str | CreateResult, None]:
        request = self._request(messages)

        async def stream() -> AsyncGenerator[str | CreateResult, None]:
            async for chunk in self.inner.create_stream(request, **kwargs):
                if isinstance(chunk, CreateResult):
                    await self._observed(chunk)
                yield chunk

        return stream()

    async def close(self) -> None:
        await self.inner.close()

    def actual_usage(self) -> RequestUsage:
        return self.inner.actual_usage()

    def total_usage(self) -> RequestUsage:
        return self.inner.total_usage()

    def count_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
    ) -> int:
        return self.inner.count_tokens(messages, tools=tools)

    def remaining_tokens(
        self, messages: Sequence[LLMMessage], *, tools: Sequence[Tool | ToolSchema] = ()
    ) -> int:
        return self.inner.remaining_tokens(messages, tools=tools)

    @property
    def capabilities(self) -> ModelCapabilities:
        return self.inner.capabilities

    @property
    def model_info(self) -> ModelInfo:
        return self.inner.model_info


class LoopwatchTool(BaseTool[BaseModel, Any]):
    """A tool that asks loopwatch before running the tool it wraps (same name, same
    schema: the model sees no difference)."""

    def __init__(self, inner: BaseTool[Any, Any], owner: LoopwatchAutogen) -> None:
        super().__init__(inner.args_type(), inner.return_type(), inner.name, inner.description)
        self.inner = inner
        self._owner = owner

    @property
    def schema(self) -> ToolSchema:
        return self.inner.schema

    def return_value_as_string(self, value: Any) -> str:
        if isinstance(value, str):
            return value
        return self.inner.return_value_as_string(value)

    async def run(self, args: BaseModel, cancellation_token: CancellationToken) -> Any:
        return await self.inner.run(args, cancellation_token)

    async def run_json(
        self,
        args: Mapping[str, Any],
        cancellation_token: CancellationToken,
        call_id: str | None = None,
    ) -> Any:
        owner = self._owner
        agent = owner._caller(call_id)
        call: dict[str, Any] = {"kind": "tool_call", "name": self.name, "args": dict(args)}
        result: dict[str, Any] = {"kind": "tool_result", "name": self.name}
        for event in (call, result):
            if call_id:
                event["id"] = call_id
            if agent:
                event["agent"] = agent
        verdict = await owner.observe(call)
        if verdict.action is Action.SKIP or verdict.action is Action.STOP:
            return verdict.message or NOT_RUN
        try:
            value = await self.inner.run_json(args, cancellation_token, call_id=call_id)
        except Exception as exc:
            result.update(text=f"{type(exc).__name__}: {exc}", error=True)
            await owner.observe(result)
            raise
        result["text"] = self.inner.return_value_as_string(value)
        await owner.observe(result)
        return value


class LoopwatchTermination(TerminationCondition):
    """Ends the team's run when loopwatch stops it; observes the user's messages and
    the handoffs between agents."""

    def __init__(self, owner: LoopwatchAutogen) -> None:
        self._owner = owner
        self._terminated = False

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def __call__(
        self, messages: Sequence[BaseAgentEvent | BaseChatMessage]
    ) -> StopMessage | None:
        if self._terminated:
            raise TerminatedException("Termination condition has already been reached")
        owner = self._owner
        for message in messages:
            event = _team_event(message)
            if event is not None:
                await owner.observe(event)
        verdict = owner.stopped
        if verdict is None:
            return None
        self._terminated = True
        owner.stopped = None  # the next run of the conversation starts afresh
        return StopMessage(content=verdict.message or STOPPED, source="loopwatch")

    async def reset(self) -> None:
        self._terminated = False


def _team_event(message: BaseAgentEvent | BaseChatMessage) -> dict[str, Any] | None:
    """What the team adds to what the model client and the tools saw: the user's
    messages and the handoffs (model outputs and tool calls are observed as they
    happen, so they are not observed again here)."""
    if isinstance(message, HandoffMessage):
        return {
            "kind": "model",
            "agent": message.source,
            "to": message.target,
            "text": message.content,
        }
    if isinstance(message, BaseChatMessage) and message.source == "user":
        return {"kind": "user", "text": message.to_text()}
    return None
