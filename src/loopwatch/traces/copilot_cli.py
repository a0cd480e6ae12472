"""GitHub Copilot CLI session logs: ``~/.copilot/session-state/<session id>/events.jsonl``.

One event per line, written by Copilot CLI (1.0) as the session goes: ``type``,
``data``, ``id``, ``parentId``, ``timestamp``. The mapping:

* ``session.start``: the run id (``data.sessionId``) and meta (version, model, cwd);
* ``user.message``: a ``user`` event (``data.content``, what the user typed; the hook
  is given the same prompt);
* ``assistant.message``: a ``model`` event (``data.content``), then a ``tool_call``
  per ``toolRequests`` entry (``name``, ``arguments``, ``toolCallId``);
* ``tool.execution_complete``: a ``tool_result`` read as ``loopwatch hook
  copilot-cli`` reads the live ``postToolUse`` payload
  (:func:`~loopwatch.hooks._events.copilot_result`: without the shell's
  ``<shellId: N completed with exit code C>`` line, whose id grows on every call;
  failed on a non-zero exit code or when the call did not succeed), without the
  guidance Copilot CLI appended from ``postToolUse`` hooks (not the tool's output);
  a call a hook denied is a failed result with Copilot's "Denied by preToolUse
  hook: ..." text;
* everything else (hooks, turns, usage, the system prompt) is not a step.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

from ..hooks._events import copilot_result, tool_call, tool_result, user_prompt
from .coding_cli import SessionLog

__all__ = ["CopilotCliReader", "looks_like"]

_PREFIXES: Final = ("session.", "user.", "assistant.", "tool.", "hook.", "system.", "subagent.")
# What Copilot CLI appends to a result from the postToolUse hooks' additionalContext.
_GUIDANCE: Final = re.compile(
    r'\n\nTool "[^"\n]*" \w+\. Additional guidance from \w+ hooks:\n.*\Z', re.DOTALL
)


def looks_like(obj: Any) -> bool:
    """A line of a Copilot CLI ``events.jsonl``."""
    return (
        isinstance(obj, dict)
        and isinstance(obj.get("type"), str)
        and obj["type"].startswith(_PREFIXES)
        and isinstance(obj.get("data"), dict)
        and "parentId" in obj
        and "timestamp" in obj
    )


def _result(data: Mapping[str, Any]) -> tuple[str, bool]:
    """A ``tool.execution_complete``'s text as the hook reads it, and whether it failed."""
    result = data.get("result")
    if isinstance(result, Mapping) and isinstance(result.get("content"), str):
        text, failed = copilot_result(_GUIDANCE.sub("", result["content"]))
    else:
        error = data.get("error")
        message = error.get("message") if isinstance(error, Mapping) else error
        text, failed = str(message or ""), True
    shell = data.get("shellExecution")
    code = shell.get("exitCode") if isinstance(shell, Mapping) else None
    failed = failed or data.get("success") is False
    return text, failed or (isinstance(code, int) and not isinstance(code, bool) and code != 0)


class CopilotCliReader(SessionLog):
    """An ``events.jsonl``: one session per file; yielded when the file ends."""

    FORMAT = "copilot_cli"

    def take(self, obj: dict[str, Any]) -> None:
        data = obj.get("data")
        if not isinstance(data, Mapping):
            return
        kind, events = obj.get("type"), self.events
        if kind == "session.start":
            if self.run_id is None and data.get("sessionId") is not None:
                self.run_id = str(data["sessionId"])
            for key, value in (("copilot_version", data.get("copilotVersion")),
                               ("model", data.get("selectedModel")),
                               ("cwd", (data.get("context") or {}).get("cwd"))):  # fmt: skip
                if value is not None:
                    self.meta.setdefault(key, value)
        elif kind == "user.message":
            content = data.get("content")
            if isinstance(content, str) and content:
                events.append(user_prompt(content))
        elif kind == "assistant.message":
            content = data.get("content")
            events.append({"kind": "model", "text": content if isinstance(content, str) else ""})
            for request in data.get("toolRequests") or []:
                if isinstance(request, Mapping):
                    call_id = request.get("toolCallId")
                    self.names[str(call_id)] = request.get("name")
                    events.append(tool_call(request.get("name"), request.get("arguments"),
                                            call_id))  # fmt: skip
        elif kind == "tool.execution_complete":
            call_id = data.get("toolCallId")
            text, failed = _result(data)
            events.append(tool_result(self.names.get(str(call_id)), call_id, text, failed))
