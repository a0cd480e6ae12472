"""What a coding agent's tool call and result become as loopwatch events.

Shared by the hooks (live payloads) and the transcript readers (recorded
sessions), so that a session replayed through the hook and the same session
scanned offline see the same events: the same arguments, the same result text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

from ..content import media_only

__all__ = [
    "copilot_result",
    "gemini_result",
    "result_text",
    "tool_call",
    "tool_result",
    "user_prompt",
]

# Result fields that only say how long something took or where it was written:
# they differ between two identical calls and say nothing about the outcome.
_NOISE: Final = frozenset({"duration_ms", "durationMs", "interrupted", "isImage"})


def result_text(response: Any) -> str:
    """A tool's result as the text loopwatch compares.

    Claude Code hands the hook (and records in transcripts as ``tool_use_result``)
    a structured object per tool; a shell's is ``{stdout, stderr, ...}``, whose
    text is its output. Failures come as a string (``Error: Exit code 1 ...``);
    the leading ``Error:`` is dropped because the hook's failure payload lacks it.
    Other objects are compared as canonical JSON. Gemini CLI's ``llmContent`` and
    Codex's plain strings are the text as they are.
    """
    if response is None:
        return ""
    if isinstance(response, str):
        return response[7:] if response.startswith("Error: ") else response
    if isinstance(response, Mapping):
        if "stdout" in response or "stderr" in response:
            out = str(response.get("stdout") or "")
            err = str(response.get("stderr") or "")
            return f"{out}\n{err}" if out and err else out or err
        if "llmContent" in response:
            return result_text(response["llmContent"])
        kept = {k: v for k, v in response.items() if k not in _NOISE}
        return orjson.dumps(kept, option=orjson.OPT_SORT_KEYS, default=str).decode()
    if isinstance(response, list):
        parts = [
            p.get("text") if isinstance(p, Mapping) and isinstance(p.get("text"), str) else None
            for p in response
        ]
        if parts and all(p is not None for p in parts):
            return "\n".join(p for p in parts if p is not None)
    return orjson.dumps(response, option=orjson.OPT_SORT_KEYS, default=str).decode()


# What Gemini CLI (and Qwen Code, its fork) wraps around a tool's output, none of it the
# output: the process group id of the shell (new on every run, so without this every
# result of a repeated command would be new), the <untrusted_context> wrapper, and the
# <hook_context> a hook's AfterTool answer appended (in the session file only).
_PGID: Final = re.compile(r"^Process Group PGID: \d+[ \t]*(?:\n|\Z)", re.MULTILINE)
_HOOK_CONTEXT: Final = re.compile(r"\s*<hook_context>.*?</hook_context>", re.DOTALL)
_UNTRUSTED: Final = re.compile(
    r"\A\s*<untrusted_context>\n?(.*?)\n?</untrusted_context>\s*\Z", re.DOTALL
)


def gemini_result(value: Any) -> str:
    """A Gemini CLI or Qwen Code tool result as loopwatch compares it: the text the
    model read, without the wrapping the CLI adds around it.

    The one reading of these results: the hook's ``tool_response``
    (``{llmContent, returnDisplay}``, ``llmContent`` a string or a list of parts) and
    the session file's ``result`` (a list of ``functionResponse`` parts whose
    ``response`` is ``{output}`` or ``{error}``) both come through here, so a live
    session and its session file give the detectors the same text.
    """
    if isinstance(value, Mapping) and "llmContent" in value:
        value = value["llmContent"]
    texts = []
    for part in value if isinstance(value, list) else [value]:
        if isinstance(part, str):
            texts.append(part)
            continue
        if not isinstance(part, Mapping):
            continue
        response = part.get("functionResponse")
        if isinstance(response, Mapping):
            inner = response.get("response")
            text = inner.get("output", inner) if isinstance(inner, Mapping) else inner
            texts.append(text if isinstance(text, str) else orjson.dumps(text).decode())
        elif isinstance(part.get("text"), str):
            texts.append(part["text"])
    text = _HOOK_CONTEXT.sub("", "\n".join(texts))
    unwrapped = _UNTRUSTED.match(text)
    if unwrapped is not None:
        text = unwrapped.group(1)
    return _PGID.sub("", text).rstrip("\n")


# Copilot CLI ends a shell tool's result with the id of the shell it ran in (one more
# on every call) and the exit code.
_SHELL_END: Final = re.compile(r"\n?<shellId: [^>\n]* completed with exit code (-?\d+)>\s*\Z")


def copilot_result(text: str) -> tuple[str, bool]:
    """A Copilot CLI tool result without its shell's id, and whether the command
    failed (a non-zero exit code)."""
    end = _SHELL_END.search(text)
    if end is None:
        return text, False
    return text[: end.start()], int(end.group(1)) != 0


def tool_call(name: Any, args: Any, call_id: Any) -> dict[str, Any]:
    event: dict[str, Any] = {"kind": "tool_call", "name": str(name or "")}
    if args is None:
        event["unknown"] = ["args"]  # not in the payload: unknown, not "no arguments"
    else:
        event["args"] = args
    if call_id is not None:
        event["id"] = str(call_id)
    return event


def tool_result(name: Any, call_id: Any, response: Any, error: bool | None) -> dict[str, Any]:
    """A result; ``error`` None when the source does not say whether it failed (the
    flag is left out: FORMAT.md's convention reads an ``Error: ...`` text as one)."""
    event: dict[str, Any] = {"kind": "tool_result", "name": str(name or "")}
    if error is not None:
        event["error"] = bool(error)
    if response is None or media_only(response):
        # no result in the payload, or only an image of one: unknown, not empty (two
        # screenshots recorded without their pixels are not the same screen)
        event["unknown"] = ["text"]
    else:
        event["text"] = result_text(response)
    if call_id is not None:
        event["id"] = str(call_id)
    return event


def user_prompt(text: Any) -> dict[str, Any]:
    return {"kind": "user", "text": text if isinstance(text, str) else result_text(text)}


def session_run_id(payload: Mapping[str, Any]) -> str | None:
    """The run a hook call belongs to: the CLI session (every CLI here names it
    ``session_id``)."""
    session = payload.get("session_id")
    return None if session is None else str(session)
