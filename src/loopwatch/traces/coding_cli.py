"""Codex session rollouts and Gemini CLI session files, the other two coding CLIs'
transcripts (Claude Code's are in :mod:`.claude_code`).

**Codex** (``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-*.jsonl``): lines
``{"timestamp", "type", "payload"}``; ``session_meta`` names the session (the run
id), ``response_item`` lines carry the conversation. An assistant ``message`` is a
``model`` event; ``function_call`` a ``tool_call`` (a shell call, ``exec_command`` /
``shell``, is named ``Bash`` with ``{"command": ...}``, as Codex's hooks name it);
``function_call_output`` a ``tool_result`` (the command's output without the
header Codex adds, failed when it reports a non-zero exit code); a user message a
``user`` event, except the context blocks Codex injects (``<environment_context>``
and the like). Instructions (developer messages) and reasoning are not events.

**Gemini CLI** (``~/.gemini/tmp/<project>/chats/session-*.jsonl``): one record
per line, a record written again (same ``id``) when it changes, and ``$set``
patches, which carry no steps. The last version of each record counts, in order
of first appearance. A ``gemini`` record is a ``model`` event (its ``content``),
then each of its ``toolCalls`` as a ``tool_call`` and a ``tool_result``
(``status`` other than ``success`` is a failure; the output is read by
:func:`~loopwatch.hooks._events.gemini_result`, as the hook reads it); a ``user``
record with text is a ``user`` event (not the ``<session_context>`` the CLI sends
first).

In both, a tool call that follows a result or a prompt with no model message in
between starts a model turn (an empty ``model`` event), as the hooks do.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any

import orjson

from ..hooks._events import gemini_result, tool_call, tool_result, user_prompt
from ._common import Item, Reader, number
from .base import InputError, TraceRun

__all__ = [
    "CodexReader",
    "GeminiSessionReader",
    "SessionLog",
    "codex_looks_like",
    "gemini_looks_like",
]

_CODEX_TYPES = frozenset({"session_meta", "response_item", "event_msg", "turn_context"})
_SHELL_TOOLS = frozenset({"exec_command", "shell", "container.exec", "local_shell"})
_INJECTED = re.compile(r"^\s*<(environment_context|user_instructions|skills_instructions|"
                       r"permissions[^>]*|session_context|user_shell_command)>")  # fmt: skip
_EXIT = re.compile(r"^Process exited with code (-?\d+)$", re.MULTILINE)


def codex_looks_like(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and obj.get("type") in _CODEX_TYPES
        and isinstance(obj.get("payload"), dict)
        and "timestamp" in obj
    )


def gemini_looks_like(obj: Any) -> bool:
    """The header line of a Gemini CLI session file (or one of its records)."""
    if not isinstance(obj, dict):
        return False
    if "sessionId" in obj and "projectHash" in obj:
        return True
    return obj.get("type") == "gemini" and "id" in obj and "content" in obj


def _turn(events: list[dict[str, Any]]) -> None:
    """Before a tool call: start a model turn unless the model just spoke or called."""
    if not events or events[-1]["kind"] not in ("model", "tool_call"):
        events.append({"kind": "model", "text": ""})


def _text(parts: Any) -> str:
    if isinstance(parts, str):
        return parts
    if isinstance(parts, list):
        return "\n".join(
            str(p.get("text")) for p in parts if isinstance(p, Mapping) and p.get("text")
        )
    return ""


class SessionLog(Reader):
    """A coding CLI's session log: one session per file, one record per line, read in
    order into ``events`` by :meth:`take`; the run is yielded when the file ends."""

    FORMAT = ""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.run_id: str | None = None
        self.meta: dict[str, Any] = {"format": self.FORMAT}
        self.events: list[dict[str, Any]] = []
        self.names: dict[str, Any] = {}  # call id -> tool name, for results that lack it
        self.line: int | None = None

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        if not isinstance(obj, dict):
            yield InputError(self.path, line, "skipped a line that is not an object")
            return
        if self.line is None:
            self.line = line
        self.take(obj)

    def take(self, obj: dict[str, Any]) -> None:
        """One record of the log."""
        raise NotImplementedError

    def finish(self) -> Iterator[Item]:
        if self.run_id is None and not self.events:
            return
        yield TraceRun(self.run_id or self.path, self.events, self.meta, {}, self.path, self.line)


class CodexReader(SessionLog):
    """A rollout file: one session; yielded when the file ends."""

    FORMAT = "codex"

    def take(self, obj: dict[str, Any]) -> None:
        payload = obj.get("payload")
        if not isinstance(payload, Mapping):
            return
        kind = obj.get("type")
        if kind == "session_meta":
            session = payload.get("id", payload.get("session_id"))
            if session is not None and self.run_id is None:
                self.run_id = str(session)
            for key in ("cwd", "cli_version", "originator", "model_provider"):
                if payload.get(key) is not None:
                    self.meta[key] = payload[key]
            return
        if kind == "turn_context" and payload.get("model") is not None:
            self.meta.setdefault("model", payload["model"])
        if kind != "response_item":
            return
        self._item(payload)

    def _item(self, item: Mapping[str, Any]) -> None:
        events = self.events
        itype = item.get("type")
        if itype == "message":
            role = item.get("role")
            text = _text(item.get("content"))
            if role == "assistant":
                events.append({"kind": "model", "text": text})
            elif role == "user" and text and not _INJECTED.match(text):
                events.append(user_prompt(text))
        elif itype in ("function_call", "custom_tool_call", "local_shell_call"):
            name = str(item.get("name") or ("local_shell" if itype == "local_shell_call" else ""))
            raw = item.get("arguments", item.get("input", item.get("action")))
            args: Any = raw
            if isinstance(raw, str):
                try:
                    args = orjson.loads(raw)
                except orjson.JSONDecodeError:
                    args = {"input": raw}
            if name in _SHELL_TOOLS and isinstance(args, Mapping):
                command = args.get("cmd", args.get("command"))
                if isinstance(command, list):
                    command = (
                        command[-1]
                        if command[:1] in (["bash"], ["/bin/bash"])
                        else " ".join(map(str, command))
                    )
                name, args = "Bash", {"command": command}
            call_id = item.get("call_id", item.get("id"))
            self.names[str(call_id)] = name
            _turn(events)
            events.append(tool_call(name, args, call_id))
        elif itype in ("function_call_output", "custom_tool_call_output"):
            call_id = item.get("call_id")
            text, failed = _codex_output(item.get("output"))
            events.append(tool_result(self.names.get(str(call_id)), call_id, text, failed))


def _codex_output(output: Any) -> tuple[str, bool]:
    """A call's output without Codex's header, and whether it failed."""
    if isinstance(output, Mapping):  # older rollouts: {"output": ..., "metadata": {...}}
        code = (output.get("metadata") or {}).get("exit_code")
        return str(output.get("output") or ""), bool(code)
    text = str(output or "")
    if text.startswith("{"):
        try:
            decoded = orjson.loads(text)
        except orjson.JSONDecodeError:
            decoded = None
        if isinstance(decoded, Mapping) and "output" in decoded:
            return _codex_output(decoded)
    exit_code = _EXIT.search(text[:500])
    _, marker, body = text.partition("\nOutput:\n")
    if marker and exit_code is not None:
        return body, int(exit_code.group(1)) != 0
    return text, False


class GeminiSessionReader(Reader):
    """A Gemini CLI session file: one session; yielded when the file ends."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.run_id: str | None = None
        self.meta: dict[str, Any] = {"format": "gemini_cli"}
        self.records: dict[str, Mapping[str, Any]] = {}
        self.line: int | None = None

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        if not isinstance(obj, dict):
            yield InputError(self.path, line, "skipped a line that is not an object")
            return
        if self.line is None:
            self.line = line
        if "sessionId" in obj and "projectHash" in obj:
            self.run_id = self.run_id or str(obj["sessionId"])
            return
        patch = obj.get("$set")
        if isinstance(patch, Mapping):
            for message in patch.get("messages") or []:
                if isinstance(message, Mapping) and message.get("id") is not None:
                    self.records[str(message["id"])] = message
            return
        if obj.get("id") is not None and obj.get("type") is not None:
            self.records[str(obj["id"])] = obj

    def finish(self) -> Iterator[Item]:
        if self.run_id is None and not self.records:
            return
        events: list[dict[str, Any]] = []
        for record in self.records.values():
            rtype = record.get("type")
            if rtype == "user":
                text = _text(record.get("content"))
                if text and not _INJECTED.match(text):
                    events.append(user_prompt(text))
            elif rtype == "gemini":
                model: dict[str, Any] = {"kind": "model", "text": _text(record.get("content"))}
                tokens = number((record.get("tokens") or {}).get("output"))
                if tokens:
                    model["tokens"] = tokens
                if record.get("model"):
                    self.meta.setdefault("model", record["model"])
                events.append(model)
                calls = [c for c in record.get("toolCalls") or [] if isinstance(c, Mapping)]
                for call in calls:
                    events.append(tool_call(call.get("name"), call.get("args"), call.get("id")))
                for call in calls:
                    text = gemini_result(call.get("result"))
                    failed = call.get("status") not in (None, "success")
                    events.append(tool_result(call.get("name"), call.get("id"), text, failed))
        yield TraceRun(self.run_id or self.path, events, self.meta, {}, self.path, self.line)
