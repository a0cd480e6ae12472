"""Codex's hook protocol: Claude Code's, with these differences.

``tool_name`` is ``Bash`` for shell calls, ``tool_response`` is a plain string,
and each payload also carries ``turn_id`` and ``model``. Codex accepts the same
``hookSpecificOutput`` answers (``permissionDecision: "deny"``,
``additionalContext``) and ``decision: "block"`` after a tool. It runs matching
hooks concurrently; the SQLite store serialises their updates of one session.
"""

from __future__ import annotations

from .claude_code import HOOK_EVENTS, answer, events, run_id

__all__ = ["HOOK_EVENTS", "answer", "events", "run_id"]
