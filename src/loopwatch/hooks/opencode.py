"""OpenCode's side of the hook: OpenCode (1.18) has no command hooks, only in-process
plugins, so ``loopwatch install opencode`` writes a small plugin
(``opencode_plugin.js``, into ``.opencode/plugins/``) that runs
``loopwatch hook opencode`` for each event, with a Claude-style payload on stdin:
``hook_event_name`` (``PreToolUse`` from ``tool.execute.before``, ``PostToolUse``
from ``tool.execute.after``, ``UserPromptSubmit`` from ``chat.message``),
``session_id``, ``tool_name`` (``bash``...), ``tool_input``, ``tool_use_id``,
``tool_response`` (the output the model reads), ``exit`` (a shell's exit code),
``prompt`` and ``cwd``.

The answer is a JSON object the plugin acts on:

* ``deny``: the plugin throws it from ``tool.execute.before``, so the tool does not
  run and the model reads the sentence as the call's result; with ``end_turn``
  (a call after a stop) it also aborts the session's turn;
* ``stop``: appended to the output the model reads, then the plugin aborts the
  turn (``opencode run`` ends with "MessageAbortedError"), and prints it;
* ``context``: appended to the output the model reads (a warning; a warning about
  a call is held until its result);
* ``notice``: printed on stderr and shown as a toast, for the user.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import orjson

from ._dispatch import Answer, Outcome
from ._events import session_run_id
from .claude_code import claude_events

__all__ = ["WARN_AFTER_TOOL", "answer", "events", "run_id"]

WARN_AFTER_TOOL = True
PRE = "PreToolUse"
POST = "PostToolUse"
PROMPT = "UserPromptSubmit"

run_id = session_run_id


def _result(payload: Mapping[str, Any]) -> tuple[Any, bool]:
    code = payload.get("exit")
    failed = isinstance(code, int) and not isinstance(code, bool) and code != 0
    return payload.get("tool_response"), failed


def events(payload: Mapping[str, Any]) -> list[dict[str, Any]]:
    return claude_events(payload, _result, (PRE, POST, None, PROMPT))


def answer(payload: Mapping[str, Any], outcome: Outcome) -> Answer:
    event = payload.get("hook_event_name")
    action, message = outcome.action, outcome.message
    out: dict[str, Any] = {}
    if action != "ok" and message:
        if event == PRE and action in ("skip", "stop"):
            out = {"deny": message, "end_turn": outcome.after_stop}
        elif event == POST and action == "stop":
            out = {"stop": message}
        elif event == POST:
            out = {"context": message}
    if outcome.notice:
        out["notice"] = outcome.notice
    return Answer(0, orjson.dumps(out).decode() + "\n")
