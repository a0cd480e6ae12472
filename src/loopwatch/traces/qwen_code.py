"""Qwen Code session logs: ``~/.qwen/projects/<project>/chats/<session id>.jsonl``.

One record per line, written by Qwen Code (0.15) as the session goes: ``uuid``,
``parentUuid``, ``sessionId`` (the run id), ``type``, ``message {role, parts}`` with
Gemini-style parts. The mapping:

* ``user``: a ``user`` event with the text of its parts (the prompt);
* ``assistant``: a ``model`` event with its visible text (``thought`` parts are not
  output) and output tokens, then a ``tool_call`` per ``functionCall`` part
  (``name``, ``args``, ``id``);
* ``tool_result``: a ``tool_result`` per ``functionResponse`` part, its text read by
  :func:`~loopwatch.hooks._events.gemini_result` exactly as ``loopwatch hook
  qwen-code`` reads the live ``tool_response`` (the shell's ``Process Group PGID``,
  new on every run, is not output), failed when ``toolCallResult.status`` is not
  ``success``; a call the hook denied is recorded as a failed result carrying the
  hook's reason;
* ``system`` records (telemetry, snapshots) are not steps.

Every tool call comes in an ``assistant`` record, so each model turn is a ``model``
event, as the hook records one for a call that follows a result or a prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..hooks._events import gemini_result, tool_call, tool_result, user_prompt
from ._common import number
from .coding_cli import SessionLog

__all__ = ["QwenCodeReader", "looks_like"]

_STEPS = frozenset({"user", "assistant", "tool_result"})


def looks_like(obj: Any) -> bool:
    """A line of a Qwen Code session log."""
    if not isinstance(obj, dict) or "uuid" not in obj or "sessionId" not in obj:
        return False
    if obj.get("type") == "system":
        return "systemPayload" in obj
    message = obj.get("message")
    return obj.get("type") in _STEPS and isinstance(message, dict) and "parts" in message


def _parts(record: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    message = record.get("message")
    parts = message.get("parts") if isinstance(message, Mapping) else None
    return [p for p in parts if isinstance(p, Mapping)] if isinstance(parts, list) else []


def _text(parts: list[Mapping[str, Any]]) -> str:
    return "\n".join(
        p["text"] for p in parts if isinstance(p.get("text"), str) and not p.get("thought")
    )


class QwenCodeReader(SessionLog):
    """A session log: one session per file; yielded when the file ends."""

    FORMAT = "qwen_code"

    def take(self, obj: dict[str, Any]) -> None:
        if self.run_id is None and obj.get("sessionId") is not None:
            self.run_id = str(obj["sessionId"])
        for key in ("cwd", "version"):
            if obj.get(key) is not None:
                self.meta.setdefault(key, obj[key])
        kind, parts, events = obj.get("type"), _parts(obj), self.events
        if kind == "user":
            text = _text(parts)
            if text:
                events.append(user_prompt(text))
        elif kind == "assistant":
            model: dict[str, Any] = {"kind": "model", "text": _text(parts)}
            tokens = number((obj.get("usageMetadata") or {}).get("candidatesTokenCount"))
            if tokens:
                model["tokens"] = tokens
            if obj.get("model"):
                self.meta.setdefault("model", obj["model"])
            events.append(model)
            for part in parts:
                call = part.get("functionCall")
                if isinstance(call, Mapping):
                    events.append(tool_call(call.get("name"), call.get("args"), call.get("id")))
        elif kind == "tool_result":
            status = (obj.get("toolCallResult") or {}).get("status")
            for part in parts:
                response = part.get("functionResponse")
                if not isinstance(response, Mapping):
                    continue
                inner = response.get("response")
                error = inner.get("error") if isinstance(inner, Mapping) else None
                text = error if isinstance(error, str) else gemini_result([part])
                failed = status not in (None, "success") or isinstance(error, str)
                events.append(tool_result(response.get("name"), response.get("id"), text, failed))
