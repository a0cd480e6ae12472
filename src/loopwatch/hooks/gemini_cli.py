"""Gemini CLI's hook protocol (Gemini CLI 0.61).

Payloads: ``BeforeTool`` (``tool_name``, e.g. ``run_shell_command``, and
``tool_input``) becomes a ``tool_call``; ``AfterTool`` (``tool_response``
``{llmContent, returnDisplay, error?}``, read by
:func:`~loopwatch.hooks._events.gemini_result` exactly as the session reader reads
the session file) a ``tool_result``; ``BeforeAgent`` (``prompt``) a ``user`` event.
There is no call id: results pair with calls by name and order. ``session_id`` is
the run id.

Answers, always JSON on stdout with exit 0 (Gemini CLI parses stdout):

* a skip or stop before a tool: ``{"decision": "deny", "reason": ...}`` (the model
  reads "Tool execution blocked: <reason>");
* a stop after a tool: ``continue: false`` with the sentence as ``stopReason``:
  Gemini CLI ends the turn and shows "Agent execution stopped by hook: <reason>";
  a call made after a stop is denied the same way (its turn ends there too);
* a warning: ``hookSpecificOutput.additionalContext`` after the tool (appended to
  its result: a warning about a call is held until that call's AfterTool);
* a notice for the user: ``systemMessage`` (printed as "Hook system message: ...");
* otherwise ``{}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import gemini_result, session_run_id
from .claude_code import claude_events

__all__ = ["HOOK_EVENTS", "WARN_AFTER_TOOL", "answer", "events", "read_result", "run_id"]

# BeforeTool output has no context channel (Gemini CLI 0.61 reads additionalContext
# only after a tool, appending it to the result): a warning about a call is kept
# and shown with that call's result.
WARN_AFTER_TOOL = True
BEFORE = "BeforeTool"
AFTER = "AfterTool"
PROMPT = "BeforeAgent"
HOOK_EVENTS = ((BEFORE, True), (AFTER, True), (PROMPT, False))


run_id = session_run_id


def read_result(payload: Mapping[str, Any]) -> tuple[str | None, bool]:
    """``tool_response`` as the session reader reads the result (Qwen Code's too)."""
    response = payload.get("tool_response")
    failed = isinstance(response, Mapping) and bool(response.get("error"))
    return (None if response is None else gemini_result(response)), failed


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    return claude_events(payload, read_result, (BEFORE, AFTER, None, PROMPT))


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if action != "ok" and message:
        if event == BEFORE and action in ("skip", "stop"):
            out = {"decision": "deny", "reason": message}
            if outcome.after_stop:
                out.update({"continue": False, "stopReason": message})
        elif event == AFTER and action == "stop":
            out = {"continue": False, "stopReason": message}
        elif event in (AFTER, PROMPT):
            out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": message}}
    if outcome.notice:
        out["systemMessage"] = outcome.notice
    return Answer(0, orjson.dumps(out).decode() + "\n")
