"""Claude Agent SDK: hook callbacks (``ClaudeAgentOptions(hooks=watch.hooks)``).

::

    from claude_agent_sdk import ClaudeAgentOptions, query
    from loopwatch import LoopDetected
    from loopwatch.integrations.claude_agent_sdk import LoopwatchHooks

    watch = LoopwatchHooks()  # one per app
    options = ClaudeAgentOptions(hooks=watch.hooks, allowed_tools=["Bash"])
    async for message in query(prompt="Fix the tests.", options=options):
        result = message  # the last one is the session's ResultMessage
    try:
        watch.check(result)  # raises LoopDetected when loopwatch stopped the session
    except LoopDetected as stop:
        print(stop.verdict.message)

The SDK drives the Claude Code CLI, which calls these hooks back for every tool call of
the session, the sub-agents' included (``query`` and ``ClaudeSDKClient`` alike):

* ``UserPromptSubmit``: each prompt is a ``user`` event;
* ``PreToolUse`` observes each call before it runs; on ``skip`` it answers
  ``permissionDecision: "deny"`` with the explanation as the reason: the tool does not
  run and the model gets the reason as the call's result;
* ``PostToolUse`` / ``PostToolUseFailure`` observe the result (or the failure);
* on ``warn`` the message goes back as the ``additionalContext`` of the call's
  ``PostToolUse`` (or ``PostToolUseFailure``) answer, once: the CLI adds it to the
  conversation after the tool result, where it keeps every call paired with its result;
* on ``stop`` the hook answers ``continue: false`` with the message as ``stopReason``
  (a stopped call is also denied, with the message as the reason): the CLI ends the
  session (``terminal_reason == "hook_stopped"``) and :meth:`LoopwatchHooks.check`
  raises :class:`~loopwatch.LoopDetected` on its ``ResultMessage``, naming the loop.

The run id is the session id (a resumed session continues its run); a sub-agent's
(``Task``) calls carry its ``agent_type``, which goes in the ``agent`` field, and its
start is a ``span`` event. The model's own text does not pass through hooks: the
detectors see the tool calls and results.
"""

from __future__ import annotations

from typing import Any, Final

try:
    from claude_agent_sdk import HookMatcher, ResultMessage
    from claude_agent_sdk.types import (
        HookContext,
        HookEvent,
        HookInput,
        HookJSONOutput,
        SyncHookJSONOutput,
    )
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(
        _exc, "claude-agent-sdk", "the Claude Agent SDK (claude-agent-sdk)"
    ) from _exc

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

_NOTIFICATION: Final = "<task-notification>"
"""How the CLI's own prompt about a finished background task starts."""


class LoopwatchHooks:
    """Loop detection for Claude Agent SDK sessions; one instance may serve many.

    ``LoopwatchHooks()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self._stopped = StoppedRuns()

    @property
    def hooks(self) -> dict[HookEvent, list[HookMatcher]]:
        """The ``hooks`` of ``ClaudeAgentOptions`` (merge your own into this dict)."""
        return {
            "UserPromptSubmit": [HookMatcher(hooks=[self._user_prompt])],
            "SubagentStart": [HookMatcher(hooks=[self._subagent_start])],
            "PreToolUse": [HookMatcher(hooks=[self._pre_tool_use])],
            "PostToolUse": [HookMatcher(hooks=[self._post_tool_use])],
            "PostToolUseFailure": [HookMatcher(hooks=[self._post_tool_use])],
        }

    def stopped(self, session_id: str) -> Verdict | None:
        """The verdict that stopped the session, if loopwatch stopped it."""
        return self._stopped.get(session_id)

    def check(self, message: Any) -> None:
        """Raise :class:`~loopwatch.LoopDetected` on the ``ResultMessage`` of a session
        that loopwatch stopped; any other message passes."""
        if isinstance(message, ResultMessage):
            verdict = self._stopped.pop(message.session_id)
            self.pending.discard(message.session_id)
            if verdict is not None:
                raise LoopDetected(verdict)

    async def _observe(self, run: str, event: dict[str, Any]) -> Verdict:
        return await aobserve_queued(self.guard, run, event, self.pending, self._stopped)

    # -- hooks ----------------------------------------------------------------------------
    async def _user_prompt(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        run = str(data.get("session_id"))
        prompt = str(data.get("prompt") or "")
        if not prompt.lstrip().startswith(_NOTIFICATION):
            # A new turn of the session (not the CLI telling it a background sub-agent,
            # maybe the one loopwatch stopped, has finished).
            self._stopped.pop(run)
        await self._observe(run, {"kind": "user", "text": prompt})
        return {}

    async def _subagent_start(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        name = data.get("agent_type") or data.get("agent_id")
        event = {"kind": "span", "type": "agent", "name": name, "id": data.get("agent_id")}
        await self._observe(str(data.get("session_id")), event)
        return {}

    async def _pre_tool_use(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        run = str(data.get("session_id"))
        stopped = self.stopped(run)
        if stopped is None:
            event = {
                "kind": "tool_call",
                "name": data.get("tool_name"),
                "args": data.get("tool_input"),
                "id": data.get("tool_use_id") or tool_use_id,
            }
            verdict = await self._observe(run, _with_agent(event, data))
            if verdict.action is Action.SKIP:
                return _deny(verdict.message or NOT_RUN)
            if verdict.action is not Action.STOP:
                return {}
            stopped = verdict
        message = stopped.message or STOPPED
        output = _deny(message)
        output["continue_"] = False
        output["stopReason"] = message
        return output

    async def _post_tool_use(
        self, data: HookInput, tool_use_id: str | None, context: HookContext
    ) -> HookJSONOutput:
        run = str(data.get("session_id"))
        if self.stopped(run) is not None:
            return {}
        failed = data.get("hook_event_name") == "PostToolUseFailure"
        text = data.get("error") if failed else data.get("tool_response")
        event = {
            "kind": "tool_result",
            "name": data.get("tool_name"),
            "id": data.get("tool_use_id") or tool_use_id,
            "text": content_text(text),
            "error": failed,
        }
        verdict = await self._observe(run, _with_agent(event, data))
        if verdict.action is Action.STOP:
            message = verdict.message or STOPPED
            return {"continue_": False, "stopReason": message}
        warnings = self.pending.take(run)
        if not warnings:
            return {}
        note = "\n\n".join(warnings)
        if failed:
            return {
                "hookSpecificOutput": {
                    "hookEventName": "PostToolUseFailure",
                    "additionalContext": note,
                }
            }
        return {"hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": note}}


def _deny(reason: str) -> SyncHookJSONOutput:
    return {
        "hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": reason,
        }
    }


def _with_agent(event: dict[str, Any], data: HookInput) -> dict[str, Any]:
    """The event with the sub-agent that made the call (the main thread names none)."""
    agent = data.get("agent_type") or data.get("agent_id")
    if agent:
        event["agent"] = str(agent)
    return event
