"""Google ADK (Agent Development Kit): a runner plugin.

::

    from google.adk.agents import LlmAgent
    from google.adk.apps import App
    from google.adk.runners import InMemoryRunner
    from loopwatch.integrations.google_adk import LoopwatchPlugin

    agent = LlmAgent(name="researcher", model=model, tools=[web_search])
    app = App(name="weather", root_agent=agent, plugins=[LoopwatchPlugin(on_loop="skip")])
    runner = InMemoryRunner(app=app)

A plugin sees every agent of the runner (sub-agents, transfers, agent tools):

* ``before_tool_callback`` observes each call before it runs; on ``skip`` it answers
  the call with ``{"error": message}`` (the tool does not run, the model gets the
  function response); ``after_tool_callback`` observes the result and
  ``on_tool_error_callback`` a failure (the error goes on as without loopwatch);
* ``after_model_callback`` observes each model response (partial streamed chunks are
  left out: the complete response is observed);
* on ``warn`` the message is added to the **next model request only**, as a text part
  of its last user turn (after the function responses), never to the session;
* on ``stop`` the run ends ADK's way: a stopped call is answered with the stop message
  and ``skip_summarization`` (the function response is the run's final event, the model
  is not called again); a stopped model response is replaced by a final text response
  with the message. Either way the session stays valid for the next turn and its state
  says why under ``"loopwatch_stop"`` (:data:`STOP_KEY`).

The run id is the ADK session id; each user message is a ``user`` event, and every
event names the agent that produced it, so the agents of one session passing the same
request back and forth are seen.
"""

from __future__ import annotations

from typing import Any, Final

try:
    from google.adk.agents.callback_context import CallbackContext
    from google.adk.agents.invocation_context import InvocationContext
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.adk.plugins.base_plugin import BasePlugin
    from google.adk.tools.base_tool import BaseTool
    from google.adk.tools.tool_context import ToolContext
    from google.genai import types
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "google-adk", "Google ADK (google-adk)") from _exc

from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, STOPPED, PendingWarnings, aobserve_queued, content_text, make_guard

__all__ = ["STOP_KEY", "LoopwatchPlugin"]

STOP_KEY: Final = "loopwatch_stop"
"""The session state key where a stopped run's message is kept."""

_ANSWERED_MAX: Final = 10_000


def _texts(content: types.Content | None) -> str:
    parts = content.parts if content is not None and content.parts else []
    return "\n".join(p.text for p in parts if p.text and not p.thought)


class LoopwatchPlugin(BasePlugin):
    """Loop detection for every agent of an ADK runner.

    ``LoopwatchPlugin()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, *, name: str = "loopwatch", **config: Any):
        super().__init__(name=name)
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        # Calls loopwatch answered itself (skip, stop): ADK still runs the after-tool
        # callbacks on that answer, which is not a tool result to observe.
        self._answered: set[str] = set()

    def _answer(self, tool_context: ToolContext, message: str) -> dict[str, Any]:
        if len(self._answered) >= _ANSWERED_MAX:
            self._answered.clear()
        self._answered.add(f"{tool_context.session.id}/{tool_context.function_call_id}")
        return {"error": message}

    async def _observe(self, run: str, event: dict[str, Any]) -> Verdict:
        # No StoppedRuns: ADK's own end of the invocation reports the stop (STOP_KEY).
        return await aobserve_queued(self.guard, run, event, self.pending)

    # -- user turns ---------------------------------------------------------------------
    async def on_user_message_callback(
        self, *, invocation_context: InvocationContext, user_message: types.Content
    ) -> types.Content | None:
        await self._observe(
            invocation_context.session.id, {"kind": "user", "text": _texts(user_message)}
        )
        return None

    # -- warnings: into the next model request only -------------------------------------
    async def before_model_callback(
        self, *, callback_context: CallbackContext, llm_request: LlmRequest
    ) -> LlmResponse | None:
        warnings = self.pending.take(callback_context.session.id)
        if not warnings:
            return None
        note = types.Part(text="\n\n".join(warnings))
        contents = llm_request.contents
        if contents and contents[-1].role == "user":
            # One user turn after the function responses: roles keep alternating and each
            # call keeps its response right after it. A copy: the session is not touched.
            last = contents[-1]
            contents[-1] = types.Content(role="user", parts=[*(last.parts or []), note])
        else:
            contents.append(types.Content(role="user", parts=[note]))
        return None

    # -- model output -------------------------------------------------------------------
    async def after_model_callback(
        self, *, callback_context: CallbackContext, llm_response: LlmResponse
    ) -> LlmResponse | None:
        if llm_response.partial:
            return None  # a streamed chunk: the complete response follows
        event: dict[str, Any] = {
            "kind": "model",
            "text": _texts(llm_response.content),
            "agent": callback_context.agent_name,
        }
        usage = llm_response.usage_metadata
        if usage is not None and usage.total_token_count:
            event["tokens"] = usage.total_token_count
        verdict = await self._observe(callback_context.session.id, event)
        if verdict.action is not Action.STOP:
            return None
        # End the run: a final answer in place of the response (its calls do not run).
        message = verdict.message or STOPPED
        callback_context.state[STOP_KEY] = message
        return LlmResponse(
            content=types.Content(role="model", parts=[types.Part(text=message)]),
            usage_metadata=llm_response.usage_metadata,
        )

    # -- tool calls -----------------------------------------------------------------------
    async def before_tool_callback(
        self, *, tool: BaseTool, tool_args: dict[str, Any], tool_context: ToolContext
    ) -> dict[str, Any] | None:
        event = {
            "kind": "tool_call",
            "name": tool.name,
            "args": tool_args,
            "id": tool_context.function_call_id,
            "agent": tool_context.agent_name,
        }
        verdict = await self._observe(tool_context.session.id, event)
        if verdict.action is Action.SKIP:
            message = verdict.message or NOT_RUN
            return self._answer(tool_context, message)
        if verdict.action is Action.STOP:
            return self._answer(tool_context, _stop(tool_context, verdict))
        return None

    async def after_tool_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        result: dict[str, Any],
    ) -> dict[str, Any] | None:
        key = f"{tool_context.session.id}/{tool_context.function_call_id}"
        if key in self._answered:
            self._answered.discard(key)
            return None  # loopwatch's own answer to a skipped or stopped call
        event = _result_event(tool, tool_context, content_text(result), error=False)
        verdict = await self._observe(tool_context.session.id, event)
        if verdict.action is Action.STOP:
            _stop(tool_context, verdict)  # the tool ran: its result stays, the run ends
        return None

    async def on_tool_error_callback(
        self,
        *,
        tool: BaseTool,
        tool_args: dict[str, Any],
        tool_context: ToolContext,
        error: Exception,
    ) -> dict[str, Any] | None:
        text = f"{type(error).__name__}: {error}"
        await self._observe(
            tool_context.session.id, _result_event(tool, tool_context, text, error=True)
        )
        return None  # the error goes on as it would without loopwatch


def _result_event(
    tool: BaseTool, tool_context: ToolContext, text: str, *, error: bool
) -> dict[str, Any]:
    return {
        "kind": "tool_result",
        "name": tool.name,
        "id": tool_context.function_call_id,
        "text": text,
        "error": error,
        "agent": tool_context.agent_name,
    }


def _stop(tool_context: ToolContext, verdict: Verdict) -> str:
    """End the run after this call: its function response is the final event."""
    message = verdict.message or STOPPED
    tool_context.state[STOP_KEY] = message
    tool_context.actions.skip_summarization = True
    return message
