"""Claude Code sessions: ``--output-format stream-json`` logs and the transcripts
under ``~/.claude/projects/`` (one JSON object per line in both).

One run per session id (a sub-agent's transcript under ``<session>/subagents/``
is its own run, ``<session>/<agentId>``). The mapping:

* an assistant message (its content blocks arrive on several lines sharing the
  message id) becomes one ``model`` event with its visible text (``text``
  blocks; thinking is not output) and its output tokens, followed by one
  ``tool_call`` per ``tool_use`` block (``name``, ``args`` = ``input``, ``id``);
* a ``tool_result`` block becomes a ``tool_result`` whose text is the structured
  result the hook is given (``tool_use_result`` / ``toolUseResult``: a shell's
  stdout and stderr), else the block's content, and ``error`` = ``is_error``;
* a user's typed prompt becomes a ``user`` event (a sub-agent's prompt, meta
  messages and tool results do not);
* a ``tool_use`` that never got a result before its id was used again, or before
  later calls were answered, was not run (Claude Code answers every call it runs
  before the next model request): it is dropped (:func:`calls_run`), and so is
  the whole message when none of its calls ran (a recording proxy's duplicate);
  ``meta.dropped_calls`` counts them.

Hook payloads become events through the same functions
(:mod:`loopwatch.hooks._events`), so a session replayed through
``loopwatch hook claude-code`` and the same session scanned here agree.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..hooks._events import tool_call, tool_result, user_prompt
from ._common import Item, Reader, number
from .base import InputError, TraceRun

__all__ = ["ClaudeCodeReader", "calls_run", "looks_like", "session_events"]

_TYPES = frozenset({"system", "assistant", "user", "result"})


def looks_like(obj: Any) -> bool:
    """A line of a stream-json log or of a ``~/.claude/projects`` transcript."""
    if not isinstance(obj, dict) or obj.get("type") not in _TYPES:
        return False
    if "session_id" not in obj and "sessionId" not in obj:
        return False
    if obj["type"] == "system":
        return "subtype" in obj
    if obj["type"] == "result":
        return "subtype" in obj and "num_turns" in obj
    message = obj.get("message")
    return isinstance(message, dict) and "content" in message and "role" in message


class ClaudeCodeReader(Reader):
    """Buffers a file's lines per session and yields one run per session at the end."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.sessions: dict[str, list[dict[str, Any]]] = {}
        self.first_line: dict[str, int | None] = {}

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        for record in obj if isinstance(obj, list) else [obj]:
            if not isinstance(record, dict):
                yield InputError(self.path, line, "skipped a line that is not an object")
                continue
            session = record.get("session_id", record.get("sessionId"))
            if session is None:
                continue  # summaries, file snapshots: not part of a session's steps
            key = str(session)
            if record.get("isSidechain") and record.get("agentId"):
                key = f"{key}/{record['agentId']}"  # a sub-agent's own transcript
            if key not in self.sessions:
                self.sessions[key] = []
                self.first_line[key] = line
            self.sessions[key].append(record)

    def finish(self) -> Iterator[Item]:
        for session, records in self.sessions.items():
            events, meta = session_events(records)
            yield TraceRun(session, events, meta, {}, self.path, self.first_line[session])
        self.sessions.clear()


def session_events(
    records: Sequence[Mapping[str, Any]],
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """One session's lines (in file order) as FORMAT.md events, and its meta."""
    meta: dict[str, Any] = {"format": "claude_code"}
    ran = calls_run(records)
    # A message none of whose calls ran was never part of the conversation (a
    # recording proxy's duplicate): its text goes too.
    used: dict[Any, bool] = {}
    for i, rec in enumerate(records):
        if rec.get("type") == "assistant":
            msg_id = (rec.get("message") or {}).get("id")
            for block in _blocks(rec):
                if block.get("type") == "tool_use" and msg_id is not None:
                    used[msg_id] = used.get(msg_id, False) or (i, str(block.get("id"))) in ran
    phantom = {m for m, any_ran in used.items() if not any_ran}

    events: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    dropped = 0
    current_message: Any = None
    for i, rec in enumerate(records):
        kind = rec.get("type")
        if kind == "system" and rec.get("subtype") == "init":
            for key in ("model", "cwd", "claude_code_version", "permissionMode"):
                if rec.get(key) is not None:
                    meta.setdefault(key, rec[key])
            continue
        if kind == "result":
            for key in ("num_turns", "total_cost_usd", "subtype"):
                if rec.get(key) is not None:
                    meta[f"result_{key}" if key == "subtype" else key] = rec[key]
            current_message = None
            continue
        message = rec.get("message")
        if not isinstance(message, Mapping):
            continue
        if kind == "assistant":
            msg_id = message.get("id")
            if msg_id in phantom:
                dropped += sum(1 for b in _blocks(rec) if b.get("type") == "tool_use")
                continue
            new_turn = msg_id is None or msg_id != current_message
            current_message = msg_id
            texts = [
                str(b.get("text") or "")
                for b in _blocks(rec)
                if b.get("type") == "text" and str(b.get("text") or "").strip()
            ]
            tokens = number((message.get("usage") or {}).get("output_tokens"))
            if new_turn:
                model: dict[str, Any] = {"kind": "model", "text": "\n".join(texts)}
                if tokens:
                    model["tokens"] = tokens
                events.append(model)
            elif texts:
                last = _last_model(events)
                if last is not None:
                    last["text"] = "\n".join(t for t in (last["text"], *texts) if t)
            for block in _blocks(rec):
                if block.get("type") != "tool_use":
                    continue
                call_id = block.get("id")
                key = str(call_id)
                if (i, key) not in ran:
                    dropped += 1
                    continue
                names[key] = str(block.get("name") or "")
                events.append(tool_call(block.get("name"), block.get("input"), call_id))
        elif kind == "user":
            current_message = None
            structured = rec.get("tool_use_result", rec.get("toolUseResult"))
            content = message.get("content")
            if isinstance(content, str):
                if not rec.get("isMeta") and not _from_subagent(rec):
                    events.append(user_prompt(content))
                continue
            for block in _blocks(rec):
                btype = block.get("type")
                if btype == "tool_result":
                    call_id = block.get("tool_use_id")
                    response = structured if structured is not None else block.get("content")
                    events.append(
                        tool_result(
                            names.get(str(call_id)),
                            call_id,
                            response,
                            bool(block.get("is_error")),
                        )
                    )
                elif btype == "text" and not rec.get("isMeta") and not _from_subagent(rec):
                    text = str(block.get("text") or "")
                    if not text.lstrip().startswith("<system-reminder>"):  # hooks' context
                        events.append(user_prompt(text))
    if dropped:
        meta["dropped_calls"] = dropped
    return events, meta


def calls_run(records: Sequence[Mapping[str, Any]]) -> set[tuple[int, str]]:
    """The ``(line index, tool_use id)`` of every call the agent actually ran.

    A call ran if a result with its id comes before the next call reusing the id
    (ids repeat: a sub-agent numbers its calls afresh, and a recording proxy may
    send a message twice). One with no result is kept only when nothing was
    answered after it (the session ended while it ran).
    """
    uses: list[tuple[int, str]] = []
    results: dict[str, list[int]] = {}
    last_result = -1
    for i, rec in enumerate(records):
        for block in _blocks(rec):
            btype = block.get("type")
            if btype == "tool_use" and block.get("id") is not None:
                uses.append((i, str(block["id"])))
            elif btype == "tool_result" and block.get("tool_use_id") is not None:
                results.setdefault(str(block["tool_use_id"]), []).append(i)
                last_result = i
    next_use: dict[tuple[int, str], int] = {}
    later: dict[str, int] = {}
    for i, key in reversed(uses):
        next_use[(i, key)] = later.get(key, len(records))
        later[key] = i
    ran: set[tuple[int, str]] = set()
    for i, key in uses:
        end = next_use[(i, key)]
        answered = any(i <= r < end for r in results.get(key, ()))
        if answered or (end == len(records) and i > last_result):
            ran.add((i, key))
    return ran


def _blocks(rec: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    message = rec.get("message")
    if not isinstance(message, Mapping):
        return []
    content = message.get("content")
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, Mapping)]


def _from_subagent(rec: Mapping[str, Any]) -> bool:
    return rec.get("parent_tool_use_id") is not None or bool(rec.get("isSidechain"))


def _last_model(events: list[dict[str, Any]]) -> dict[str, Any] | None:
    found: dict[str, Any] | None = next((e for e in reversed(events) if e["kind"] == "model"), None)
    return found
