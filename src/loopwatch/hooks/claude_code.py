"""Claude Code's hook protocol (Codex speaks the same one, see :mod:`.codex`).

Payloads: ``PreToolUse`` (``tool_name``, ``tool_input``, ``tool_use_id``) becomes a
``tool_call``; ``PostToolUse`` (``tool_response``) a ``tool_result``;
``PostToolUseFailure`` (``error``) a failed ``tool_result``; ``UserPromptSubmit``
(``prompt``) a ``user`` event. ``session_id`` is the run id. Other events are
let through untouched.

Answers, on stdout with exit 0:

* a skip or stop on a tool call denies it:
  ``hookSpecificOutput.permissionDecision = "deny"`` with the finding's sentence
  as ``permissionDecisionReason``, which the model reads;
* a stop on a result: ``decision = "block"`` with the sentence as ``reason``
  (the model reads it beside the result);
* a warning: ``hookSpecificOutput.additionalContext``, added to what the model
  reads next;
* otherwise nothing (a silent allow).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id, tool_call, tool_result, user_prompt

__all__ = ["answer", "events", "run_id"]

PRE = "PreToolUse"
POST = "PostToolUse"
POST_FAILURE = "PostToolUseFailure"
PROMPT = "UserPromptSubmit"
# The events `loopwatch install` registers, with whether they take a tool matcher.
HOOK_EVENTS = ((PRE, True), (POST, True), (POST_FAILURE, True), (PROMPT, False))


run_id = session_run_id


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    event = payload.get("hook_event_name")
    name = payload.get("tool_name")
    if event == PRE:
        return [tool_call(name, payload.get("tool_input"), payload.get("tool_use_id"))]
    if event == POST:
        response = payload.get("tool_response")
        failed = isinstance(response, Mapping) and bool(response.get("is_error"))
        return [tool_result(name, payload.get("tool_use_id"), response, failed)]
    if event == POST_FAILURE:
        return [tool_result(name, payload.get("tool_use_id"), payload.get("error"), True)]
    if event == PROMPT:
        return [user_prompt(payload.get("prompt") or "")]
    return []


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    if action == "ok" or not message:
        return Answer()
    out: dict[str, Any]
    if event == PRE and action in ("skip", "stop"):
        out = {
            "hookSpecificOutput": {
                "hookEventName": PRE,
                "permissionDecision": "deny",
                "permissionDecisionReason": message,
            }
        }
    elif event in (POST, POST_FAILURE) and action in ("skip", "stop"):
        out = {
            "decision": "block",
            "reason": message,
            "hookSpecificOutput": {"hookEventName": event, "additionalContext": message},
        }
    elif event in (PRE, POST, POST_FAILURE, PROMPT):
        out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": message}}
    else:
        return Answer()
    return Answer(0, orjson.dumps(out).decode() + "\n")
