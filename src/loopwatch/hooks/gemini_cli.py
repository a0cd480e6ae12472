"""Gemini CLI's hook protocol.

Payloads: ``BeforeTool`` (``tool_name``, e.g. ``run_shell_command``, and
``tool_input``) becomes a ``tool_call``; ``AfterTool`` (``tool_response``
``{llmContent, returnDisplay, error?}``) a ``tool_result``; ``BeforeAgent``
(``prompt``) a ``user`` event. There is no call id: results pair with calls by
name and order. ``session_id`` is the run id.

Answers, always JSON on stdout with exit 0 (Gemini CLI parses stdout):
a skip or stop before a tool is ``{"decision": "deny", "reason": ...}`` (the model
reads "Tool execution blocked: <reason>"); a warning, or a stop after a tool, is
``hookSpecificOutput.additionalContext`` after the tool (appended to its result: a
warning about a call is held until that call's AfterTool); otherwise ``{}``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id, tool_call, tool_result, user_prompt

__all__ = ["HOOK_EVENTS", "WARN_AFTER_TOOL", "answer", "events", "run_id"]

# BeforeTool output has no context channel (Gemini CLI 0.61 reads additionalContext
# only after a tool, appending it to the result): a warning about a call is kept
# and shown with that call's result.
WARN_AFTER_TOOL = True
BEFORE = "BeforeTool"
AFTER = "AfterTool"
PROMPT = "BeforeAgent"
HOOK_EVENTS = ((BEFORE, True), (AFTER, True), (PROMPT, False))


run_id = session_run_id


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    event = payload.get("hook_event_name")
    name = payload.get("tool_name")
    if event == BEFORE:
        return [tool_call(name, payload.get("tool_input"), payload.get("tool_use_id"))]
    if event == AFTER:
        response = payload.get("tool_response")
        failed = isinstance(response, Mapping) and bool(response.get("error"))
        return [tool_result(name, payload.get("tool_use_id"), response, failed)]
    if event == PROMPT:
        return [user_prompt(payload.get("prompt") or "")]
    return []


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if action != "ok" and message:
        if event == BEFORE and action in ("skip", "stop"):
            out = {"decision": "deny", "reason": message}
        elif event in (AFTER, PROMPT):
            out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": message}}
    return Answer(0, orjson.dumps(out).decode() + "\n")
