"""Cursor's hook protocol (its agent hooks, ``.cursor/hooks.json``), from its documentation:
https://cursor.com/docs/agent/hooks (Cursor's editor and CLI are not on npm, so this
module is tested with the documented payloads, not with Cursor itself).

Every payload names its event (``hook_event_name``) and the conversation
(``conversation_id``, the run id), with ``generation_id`` and ``workspace_roots``.
The events loopwatch registers:

* ``beforeShellExecution`` (``command``, ``cwd``): a ``tool_call`` of ``Shell`` with
  ``{"command": ...}``; ``afterShellExecution`` (``command``, ``output``): its
  ``tool_result`` (Cursor gives no exit code: a result is not known to have failed);
* ``beforeMCPExecution`` (``tool_name``, ``tool_input``: an object, or the JSON text
  of one): a ``tool_call``; ``afterMCPExecution`` (``result_json``): its result;
* ``afterFileEdit`` (``file_path``, ``edits``): an ``Edit`` call that already ran,
  with no output to compare (its result is unknown, not empty);
* ``beforeSubmitPrompt`` (``prompt``): a ``user`` event (it lifts a stop);
* ``stop`` (the agent loop ended): nothing to judge.

There is no call id: results pair with calls by name and order.

Answers, JSON on stdout with exit 0:

* before a shell command or an MCP tool, a skip or stop, and every call after a stop
  until the user's next prompt: ``{"permission": "deny", "agent_message": ...,
  "user_message": ...}``, the sentence for the model and for the user (also under
  the camelCase names ``agentMessage`` / ``userMessage`` of the first hooks
  release); otherwise ``{"permission": "allow"}``, with a warning as
  ``agent_message``;
* the after-events' answers are not read by Cursor ("fire and forget"): a stop found
  on a result shows at the session's next call, which is denied; an edit cannot be
  denied (there is no before-edit hook), only counted;
* ``beforeSubmitPrompt``: ``{"continue": true}`` (loopwatch never holds a prompt back);
* a notice for the user (the configuration could not be loaded): ``user_message`` on
  the next before-event's answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import tool_call, tool_result, user_prompt

__all__ = ["HOOK_EVENTS", "answer", "events", "run_id", "shows_notice"]

BEFORE_SHELL = "beforeShellExecution"
AFTER_SHELL = "afterShellExecution"
BEFORE_MCP = "beforeMCPExecution"
AFTER_MCP = "afterMCPExecution"
AFTER_EDIT = "afterFileEdit"
PROMPT = "beforeSubmitPrompt"
STOP = "stop"
SHELL = "Shell"  # the shell tool's name in Cursor's generic tool hooks
EDIT = "Edit"
# The events `loopwatch install cursor` registers (none takes a matcher).
HOOK_EVENTS = tuple(
    (e, False) for e in (BEFORE_SHELL, AFTER_SHELL, BEFORE_MCP, AFTER_MCP, AFTER_EDIT, PROMPT)
)
_BEFORE = (BEFORE_SHELL, BEFORE_MCP)


def run_id(payload: Mapping[str, Any]) -> str | None:
    conversation = payload.get("conversation_id")
    return None if conversation is None else str(conversation)


def shows_notice(payload: Mapping[str, Any]) -> bool:
    return payload.get("hook_event_name") in _BEFORE


def _json(value: Any) -> Any:
    """An MCP tool's input or result: Cursor may pass the JSON as text."""
    if isinstance(value, str):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value
    return value


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    event = payload.get("hook_event_name")
    if event == BEFORE_SHELL:
        return [tool_call(SHELL, {"command": payload.get("command")}, None)]
    if event == AFTER_SHELL:
        return [tool_result(SHELL, None, payload.get("output"), None)]
    if event == BEFORE_MCP:
        return [tool_call(payload.get("tool_name"), _json(payload.get("tool_input")), None)]
    if event == AFTER_MCP:
        return [tool_result(payload.get("tool_name"), None, _json(payload.get("result_json")),
                            None)]  # fmt: skip
    if event == AFTER_EDIT:
        args = {"file_path": payload.get("file_path"), "edits": payload.get("edits")}
        return [tool_call(EDIT, args, None), tool_result(EDIT, None, None, False)]
    if event == PROMPT:
        return [user_prompt(payload.get("prompt") or "")]
    return []


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if event in _BEFORE:
        denied = action in ("skip", "stop") and bool(message)
        out["permission"] = "deny" if denied else "allow"
        if message and action != "ok":
            out.update(agent_message=message, agentMessage=message)
        user = " ".join(m for m in (message if denied else "", outcome.notice) if m)
        if user:
            out.update(user_message=user, userMessage=user)
    elif event == PROMPT:
        out["continue"] = True
    return Answer(0, orjson.dumps(out).decode() + "\n")
