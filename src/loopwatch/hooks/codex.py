"""Codex's hook protocol: Claude Code's, with these differences (Codex 0.169).

``tool_name`` is ``Bash`` for shell calls, ``tool_response`` is a plain string,
and each payload also carries ``turn_id`` and ``model``. Codex accepts the same
``hookSpecificOutput`` answers (``permissionDecision: "deny"``,
``additionalContext``). A stop on a result is ``continue: false`` with the sentence
as ``stopReason``: Codex hands it to the model in place of the command's output, and
the turn goes on (it cannot be ended from a hook), so every call after it is
denied until the user's next prompt. A notice for the user is ``systemMessage``.
It runs matching hooks concurrently; the SQLite store serialises their updates of
one session.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id
from .claude_code import HOOK_EVENTS as CLAUDE_EVENTS
from .claude_code import POST, POST_FAILURE, claude_format, events

__all__ = ["HOOK_EVENTS", "answer", "events", "run_id"]

# Codex has no PostToolUseFailure: a failed command fires PostToolUse.
HOOK_EVENTS = tuple(e for e in CLAUDE_EVENTS if e[0] != POST_FAILURE)

run_id = session_run_id


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    out = claude_format(payload.get("hook_event_name"), outcome, (POST,))
    return Answer(0, orjson.dumps(out).decode() + "\n") if out else Answer()
