"""GitHub Copilot CLI's hook protocol (Copilot CLI 1.0.102, its own camelCase format).

The payloads do not name their event, so the installed command does:
``loopwatch hook copilot-cli preToolUse``. ``preToolUse`` (``toolName``, ``toolArgs``)
becomes a ``tool_call``; ``postToolUse`` (``toolResult {resultType,
textResultForLlm}``) a ``tool_result`` (the shell's ``<shellId: N completed with
exit code C>`` line, whose id grows on every call, is not part of the output; a
non-zero code is a failure); ``postToolUseFailure`` (``error``) a failed one;
``userPromptSubmitted`` (``prompt``) a ``user`` event. There is no call id:
results pair with calls by name and order. ``sessionId`` is the run id.

Answers (stdout JSON, exit 0; Copilot CLI denies a call whose ``preToolUse`` hook
exits non-zero, and drops stderr, so a deny is always JSON):

* a skip or stop before a tool, and every call after a stop until the next prompt:
  ``{"permissionDecision": "deny", "permissionDecisionReason": ...}`` (the model
  reads "Denied by preToolUse hook: <reason>");
* a warning or a stop after a tool: ``additionalContext``, appended to the result
  the model reads (a warning about a call is held until its result; Copilot CLI
  shows none given before a tool). These hooks cannot end the turn;
* after a failed tool (``postToolUseFailure``, e.g. ``view`` of a missing file) the
  same ``additionalContext``, which 1.0.102 does not show the model (nor an exit 2's
  output, which its documentation describes): there the stop shows at the next call,
  denied;
* a notice for the user: a ``{"type": "progress", "message": ...}`` line before the
  answer, which Copilot CLI shows in its timeline ("● <message>"; not in
  ``--output-format json``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import copilot_result, tool_call, tool_result, user_prompt

__all__ = ["HOOK_EVENTS", "WARN_AFTER_TOOL", "answer", "events", "run_id"]

WARN_AFTER_TOOL = True
PRE = "preToolUse"
POST = "postToolUse"
POST_FAILURE = "postToolUseFailure"
PROMPT = "userPromptSubmitted"
HOOK_EVENTS = ((PRE, True), (POST, True), (POST_FAILURE, True), (PROMPT, False))


def run_id(payload: Mapping[str, Any]) -> str | None:
    session = payload.get("sessionId")
    return None if session is None else str(session)


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    event = payload.get("hook_event_name")
    name = payload.get("toolName")
    if event == PRE:
        return [tool_call(name, payload.get("toolArgs"), None)]
    if event == POST:
        result = payload.get("toolResult")
        if not isinstance(result, Mapping):
            return [tool_result(name, None, None, None)]
        text, failed = copilot_result(str(result.get("textResultForLlm") or ""))
        failed = failed or result.get("resultType") == "failure"
        return [tool_result(name, None, text, failed)]
    if event == POST_FAILURE:
        return [tool_result(name, None, payload.get("error"), True)]
    if event == PROMPT:
        return [user_prompt(payload.get("prompt") or "")]
    return []


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if action != "ok" and message:
        if event == PRE and action in ("skip", "stop"):
            out = {"permissionDecision": "deny", "permissionDecisionReason": message}
        elif event in (POST, POST_FAILURE):
            out = {"additionalContext": message}
    # Always one final object: a progress line alone has been read as a failed hook
    # (which denies the call) in Copilot CLI 1.0.102's text mode.
    text = orjson.dumps(out).decode() + "\n"
    if outcome.notice:
        progress = {"type": "progress", "message": outcome.notice}
        text = orjson.dumps(progress).decode() + "\n" + text
    return Answer(0, text)
