"""OpenCode sessions: its database (``~/.local/share/opencode/opencode.db``, SQLite, OpenCode
1.18) and the JSON ``opencode export <session id>`` prints.

Both hold, per session, its messages (``info``: ``role``, ids, times) and each
message's parts. One run per session (a sub-agent's session is its own run). The
mapping:

* a user message: a ``user`` event with the text of its non-synthetic ``text``
  parts (what ``loopwatch hook opencode`` is given as the prompt);
* an assistant message: a ``model`` event per step (``step-start``), with the text
  of its ``text`` parts and the step's output tokens; each ``tool`` part is a
  ``tool_call`` (``tool``, ``state.input``, ``callID``) and, when it ran, a
  ``tool_result``: ``state.output`` (without what loopwatch's plugin appended to it
  for the model: the hook was given the output before that), failed on a non-zero
  ``metadata.exit``; a call that ended in an error (denied by the plugin, or the tool
  failed) is a failed result with its ``state.error``; a call still pending when the
  session ended has no result.

The database is opened read-only; a SQLite file that is not OpenCode's is reported,
not read.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Final

import orjson

from ..hooks._events import tool_call, tool_result, user_prompt
from ._common import Item, Reader, number
from .base import InputError, TraceRun

__all__ = ["DB_NAME", "OpencodeExportReader", "is_sqlite", "looks_like", "read_database"]

DB_NAME: Final = "opencode.db"
_SQLITE_MAGIC: Final = b"SQLite format 3\x00"
_SQLITE_HEADER: Final = 100  # bytes of header a database file starts with
_SQLITE_FRACTIONS: Final = b"\x40\x20\x20"  # its payload fractions: fixed values
_PLUGIN_NOTE: Final = "\n\n[loopwatch] "  # what loopwatch's plugin appends to an output


def is_sqlite(path: str) -> bool:
    """Whether a file is a SQLite database, by its 100-byte header: the magic string
    and the payload fractions every database has (bytes 21-23: 64, 32, 32). Not by the
    magic string alone: a text trace that happens to start with it (a line of garbage
    before the runs) is read as text, and its runs are not lost."""
    if path == "-":
        return False
    try:
        with open(path, "rb") as fh:
            header = fh.read(_SQLITE_HEADER)
    except OSError:
        return False
    return header.startswith(_SQLITE_MAGIC) and header[21:24] == _SQLITE_FRACTIONS


def looks_like(obj: Any) -> bool:
    """The document ``opencode export`` prints: ``{info, messages: [{info, parts}]}``."""
    if not isinstance(obj, dict) or not isinstance(obj.get("messages"), list):
        return False
    info = obj.get("info")
    return isinstance(info, dict) and "id" in info and "directory" in info


def _output(state: Mapping[str, Any]) -> tuple[str, bool]:
    text = str(state.get("output") or "")
    cut = text.rfind(_PLUGIN_NOTE)
    if cut >= 0:
        text = text[:cut]
    metadata = state.get("metadata")
    code = metadata.get("exit") if isinstance(metadata, Mapping) else None
    return text, isinstance(code, int) and not isinstance(code, bool) and code != 0


def session_events(
    messages: Iterable[tuple[Mapping[str, Any], list[Mapping[str, Any]]]],
) -> list[dict[str, Any]]:
    """A session's messages (each its ``info`` and its parts, in order) as events."""
    events: list[dict[str, Any]] = []
    for info, parts in messages:
        if info.get("role") == "user":
            text = "\n".join(
                p["text"] for p in parts
                if p.get("type") == "text" and isinstance(p.get("text"), str)
                and not p.get("synthetic")
            )  # fmt: skip
            if text:
                events.append(user_prompt(text))
            continue
        model: dict[str, Any] | None = None
        for part in parts:
            ptype = part.get("type")
            if ptype == "step-start" or (model is None and ptype in ("text", "tool")):
                model = {"kind": "model", "text": ""}
                events.append(model)
            if ptype == "text" and model is not None and isinstance(part.get("text"), str):
                model["text"] = "\n".join(t for t in (model["text"], part["text"]) if t)
            elif ptype == "step-finish" and model is not None:
                tokens = number((part.get("tokens") or {}).get("output"))
                if tokens:
                    model["tokens"] = tokens
                model = None
            elif ptype == "tool":
                name, call_id = part.get("tool"), part.get("callID")
                state = part.get("state")
                if not isinstance(state, Mapping):
                    state = {}
                events.append(tool_call(name, state.get("input"), call_id))
                if state.get("status") == "completed":
                    text, failed = _output(state)
                    events.append(tool_result(name, call_id, text, failed))
                elif state.get("status") == "error":
                    events.append(tool_result(name, call_id, str(state.get("error") or ""), True))
    return events


def _meta(info: Mapping[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"format": "opencode"}
    for key, field in (("cwd", "directory"), ("version", "version"), ("title", "title")):
        if info.get(field) is not None:
            meta[key] = info[field]
    if info.get("parent_id") or info.get("parentID"):
        meta["parent_session"] = info.get("parent_id") or info.get("parentID")
    return meta


class OpencodeExportReader(Reader):
    """The JSON of ``opencode export``: one session."""

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        if not looks_like(obj):
            yield InputError(self.path, line, "skipped a record that is not an OpenCode export")
            return
        messages = [
            (m["info"], [p for p in m.get("parts") or [] if isinstance(p, Mapping)])
            for m in obj["messages"]
            if isinstance(m, Mapping) and isinstance(m.get("info"), Mapping)
        ]
        info = obj["info"]
        yield TraceRun(str(info["id"]), session_events(messages), _meta(info), {}, self.path, line)


def _decode(raw: Any) -> Any:
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


def read_database(path: str) -> Iterator[TraceRun | InputError]:
    """The sessions of an OpenCode database, oldest first."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    except sqlite3.Error as exc:
        yield InputError.whole(path, None, f"cannot open the database: {exc}")
        return
    try:
        tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if not {"session", "message", "part"} <= tables:
            yield InputError.whole(
                path, None, "a SQLite database, but not OpenCode's (no session/message/part tables)"
            )
            return
        sessions = db.execute(
            "SELECT id, directory, version, title, parent_id FROM session ORDER BY time_created, id"
        ).fetchall()
        for sid, directory, version, title, parent in sessions:
            parts: dict[str, list[Mapping[str, Any]]] = {}
            for message_id, data in db.execute(
                "SELECT message_id, data FROM part WHERE session_id = ? ORDER BY id", (sid,)
            ):
                part = _decode(data)
                if isinstance(part, Mapping):
                    parts.setdefault(message_id, []).append(part)
            messages = []
            for message_id, data in db.execute(
                "SELECT id, data FROM message WHERE session_id = ? ORDER BY time_created, id",
                (sid,),
            ):
                info = _decode(data)
                if isinstance(info, Mapping):
                    messages.append((info, parts.get(message_id, [])))
            info = {"directory": directory, "version": version, "title": title,
                    "parent_id": parent}  # fmt: skip
            yield TraceRun(str(sid), session_events(messages), _meta(info), {}, path, None)
    except sqlite3.Error as exc:
        yield InputError.whole(path, None, f"cannot read the database: {exc}")
    finally:
        db.close()
