"""Claude Code's hook protocol (Codex and Qwen Code speak dialects of it).

Payloads: ``PreToolUse`` (``tool_name``, ``tool_input``, ``tool_use_id``) becomes a
``tool_call``; ``PostToolUse`` (``tool_response``) a ``tool_result``;
``PostToolUseFailure`` (``error``) a failed ``tool_result``; ``UserPromptSubmit``
(``prompt``) a ``user`` event. ``session_id`` is the run id. Other events are
let through untouched.

Answers, on stdout with exit 0 (measured with Claude Code 2.1.197):

* a skip or stop on a tool call denies it:
  ``hookSpecificOutput.permissionDecision = "deny"`` with the finding's sentence
  as ``permissionDecisionReason``, which the model reads (so does every call after
  a stop, until the user's next prompt);
* a stop on a successful result ends the turn: ``continue: false`` with the
  sentence as ``stopReason`` (shown to the user) and as context for the model;
* a stop on a failed result (``PostToolUseFailure``, where Claude Code ignores
  ``continue: false``): ``decision = "block"`` with the sentence as ``reason``,
  which the model reads beside the result; its next call is denied;
* a warning: ``hookSpecificOutput.additionalContext``, added to what the model
  reads next;
* a notice for the user (the configuration could not be loaded): ``systemMessage``;
* otherwise nothing (a silent allow).

Copilot CLI runs the hooks of a repository's ``.claude/settings.json`` too, with
payloads of its own: there this hook steps aside (answers nothing, records
nothing), since ``loopwatch install copilot-cli`` gives Copilot its own hook and
one session must not be counted twice.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id, tool_call, tool_result, user_prompt

__all__ = ["HOOK_EVENTS", "answer", "claude_events", "claude_format", "events", "run_id"]

PRE = "PreToolUse"
POST = "PostToolUse"
POST_FAILURE = "PostToolUseFailure"
PROMPT = "UserPromptSubmit"
# The events `loopwatch install` registers, with whether they take a tool matcher.
HOOK_EVENTS = ((PRE, True), (POST, True), (POST_FAILURE, True), (PROMPT, False))


def run_id(payload: Mapping[str, Any]) -> str | None:
    if os.environ.get("COPILOT_CLI"):
        return None  # Copilot CLI running .claude/settings.json: see the module docstring
    return session_run_id(payload)


Result = Callable[[Mapping[str, Any]], tuple[Any, bool]]


def claude_events(
    payload: Mapping[str, Any],
    result: Result,
    names: tuple[str, str, str | None, str] = (PRE, POST, POST_FAILURE, PROMPT),
) -> list[dict[str, Any]]:
    """A payload in Claude's shape (``tool_name``, ``tool_input``, ``tool_use_id``,
    ``error``, ``prompt``) as events, for the agents that send that shape under their
    own event ``names`` (pre-tool, post-tool, post-tool failure, prompt); ``result``
    reads a post-tool payload: the result (None: not in the payload) and whether the
    call failed."""
    pre, post, failure, prompt = names
    event = payload.get("hook_event_name")
    name, call_id = payload.get("tool_name"), payload.get("tool_use_id")
    if event == pre:
        return [tool_call(name, payload.get("tool_input"), call_id)]
    if event == post:
        response, failed = result(payload)
        return [tool_result(name, call_id, response, failed)]
    if event == failure:
        return [tool_result(name, call_id, payload.get("error"), True)]
    if event == prompt:
        return [user_prompt(payload.get("prompt") or "")]
    return []


def _result(payload: Mapping[str, Any]) -> tuple[Any, bool]:
    response = payload.get("tool_response")
    return response, isinstance(response, Mapping) and bool(response.get("is_error"))


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    return claude_events(payload, _result)


def claude_format(event: Any, outcome: Outcome, ends_turn_after: tuple[str, ...]) -> dict[str, Any]:
    """The answer object of the Claude hook format, shared by the dialects:
    ``ends_turn_after`` are the post-tool events whose ``continue: false`` the agent
    honours (Claude Code: ``PostToolUse``; Codex and Qwen Code: ``PostToolUse``, where
    the sentence replaces the tool's output for the model and the turn goes on)."""
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if action != "ok" and message:
        if event == PRE and action in ("skip", "stop"):
            out = {
                "hookSpecificOutput": {
                    "hookEventName": PRE,
                    "permissionDecision": "deny",
                    "permissionDecisionReason": message,
                }
            }
        elif event in ends_turn_after and action == "stop":
            out = {"continue": False, "stopReason": message}
        elif event in (POST, POST_FAILURE) and action in ("skip", "stop"):
            out = {"decision": "block", "reason": message}
        elif event in (PRE, POST, POST_FAILURE, PROMPT):
            out = {"hookSpecificOutput": {"hookEventName": event, "additionalContext": message}}
    if outcome.notice:
        out["systemMessage"] = outcome.notice
    return out


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    out = claude_format(event, outcome, (POST,))
    if out.get("continue") is False:
        # the turn ends; the sentence stays in the transcript for the model's next turn
        out["hookSpecificOutput"] = {"hookEventName": event, "additionalContext": outcome.message}
    elif out.get("decision") == "block":
        out["hookSpecificOutput"] = {"hookEventName": event, "additionalContext": outcome.message}
    return Answer(0, orjson.dumps(out).decode() + "\n") if out else Answer()
