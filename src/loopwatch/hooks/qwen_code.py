"""Qwen Code's hook protocol (Qwen Code 0.15): Claude Code's events and answers, with
Gemini CLI's tool results.

Payloads: ``PreToolUse`` / ``PostToolUse`` / ``PostToolUseFailure`` as in Claude
Code, with Gemini CLI's tool names (``run_shell_command``) and results
(``tool_response {llmContent, returnDisplay}``, read by
:func:`~loopwatch.hooks._events.gemini_result`: Qwen Code's shell output ends with
the same process group id). A failing shell command fires ``PostToolUse``.
``UserPromptSubmit`` fires for the user's prompt and again, with an empty prompt,
before each request that carries tool results: the empty one is the agent going
on with its turn, not a prompt (:func:`resumes`).

Answers: a deny is ``hookSpecificOutput.permissionDecision = "deny"`` (the model
reads the reason as the call's result). A stop on a result is ``continue: false``
with the sentence as ``stopReason`` (the model reads it in place of the result).
After a stop, the next continuation is answered ``continue: false``: Qwen Code
ends the turn there and shows the user "UserPromptSubmit operation blocked by
hook: <reason>"; a call made before that is denied. A notice for the user is
``systemMessage``, which Qwen Code shows only for its ``Stop`` hook, so it waits
for the end of the turn.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id
from .claude_code import POST, POST_FAILURE, PRE, PROMPT, claude_events, claude_format
from .gemini_cli import read_result

__all__ = ["HOOK_EVENTS", "answer", "events", "resumes", "run_id", "shows_notice"]

STOP = "Stop"
HOOK_EVENTS = ((PRE, True), (POST, True), (POST_FAILURE, True), (PROMPT, False), (STOP, False))

run_id = session_run_id


def resumes(payload: Mapping[str, Any]) -> bool:
    """The agent sending tool results back to the model: an empty-prompt
    ``UserPromptSubmit``."""
    return payload.get("hook_event_name") == PROMPT and not str(payload.get("prompt") or "").strip()


def shows_notice(payload: Mapping[str, Any]) -> bool:
    return payload.get("hook_event_name") == STOP


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [] if resumes(payload) else claude_events(payload, read_result)


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    if event == PROMPT and outcome.after_stop:
        out: dict[str, Any] = {"continue": False, "stopReason": outcome.message}
    else:
        out = claude_format(event, outcome, (POST,))
    return Answer(0, orjson.dumps(out).decode() + "\n") if out else Answer()
