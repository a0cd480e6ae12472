"""Which format is this file? Decided from its content, then read with that format's reader.

The first records are decoded and offered to each format's ``looks_like`` in a
fixed order (most specific first). JSON Lines is tried first: the first line
that decodes to an object or array that some format recognises decides. When
no line of the first :data:`PEEK_LINES` does, the file is read as one JSON
document (a pretty-printed export). Why content and not extensions: exports
are ``.json``, ``.jsonl``, ``.ndjson``, ``.gz`` or ``-`` alike.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson

from . import claude_code, coding_cli, langfuse, langsmith, openai_agents, otlp
from ._common import Item, Reader
from .base import InputError, TraceRun, open_text
from .jsonl import parse_run

__all__ = ["FORMATS", "PEEK_LINES", "NativeReader", "detect", "read_path"]

PEEK_LINES = 64


class NativeReader(Reader):
    """The native format (FORMAT.md) behind the common reader interface."""

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        for record in obj if isinstance(obj, list) else [obj]:
            yield parse_run(record, self.path, line)


def _native_looks_like(obj: Any) -> bool:
    if isinstance(obj, list):
        return bool(obj) and _native_looks_like(obj[0])
    return isinstance(obj, dict) and "run_id" in obj and "events" in obj


class _DeepevalReader(Reader):
    """Adapts the deepeval module's ``runs_from_obj`` (stateless per record)."""

    def __init__(self, path: str, runs_from_obj: Callable[..., Iterator[Item]]) -> None:
        super().__init__(path)
        self.runs_from_obj = runs_from_obj

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        try:
            yield from self.runs_from_obj(obj, self.path, line)
        except Exception as exc:  # another team's reader: contain its failures to the record
            yield InputError(self.path, line, f"deepeval reader failed: {exc!r}")


def _deepeval() -> tuple[Callable[[Any], bool], Callable[..., Iterator[Item]]] | None:
    """The deepeval reader's two functions, or None when that module is not there."""
    try:
        from . import deepeval as module  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return None
    looks = getattr(module, "looks_like", None)
    runs = getattr(module, "runs_from_obj", None)
    if not callable(looks) or not callable(runs):
        return None
    return looks, runs


# name -> (looks_like, reader factory); order is the sniffing order
_FORMATS: dict[str, tuple[Callable[[Any], bool], Callable[[str], Reader]]] = {
    "jsonl": (_native_looks_like, NativeReader),
    "otlp": (otlp.looks_like, otlp.OtlpReader),
    "openai_agents": (openai_agents.looks_like, openai_agents.OpenAIAgentsReader),
    "langsmith": (langsmith.looks_like, langsmith.LangSmithReader),
    "langfuse": (langfuse.looks_like, langfuse.LangfuseReader),
    "claude_code": (claude_code.looks_like, claude_code.ClaudeCodeReader),
    "codex": (coding_cli.codex_looks_like, coding_cli.CodexReader),
    "gemini_cli": (coding_cli.gemini_looks_like, coding_cli.GeminiSessionReader),
}
FORMATS = (*_FORMATS, "deepeval")


def detect(obj: Any) -> str | None:
    """The format a decoded record is in, or None when no reader recognises it."""
    for name, (looks, _factory) in _FORMATS.items():
        if _safe(looks, obj):
            return name
    found = _deepeval()
    if found is not None and _safe(found[0], obj):
        return "deepeval"
    return None


def _safe(looks: Callable[[Any], bool], obj: Any) -> bool:
    try:
        return bool(looks(obj))
    except Exception:  # a sniffer that trips over odd input just says no
        return False


def _reader(name: str, path: str) -> Reader | InputError:
    if name in ("native", "jsonl"):
        return NativeReader(path)
    if name in _FORMATS:
        return _FORMATS[name][1](path)
    if name == "deepeval":
        found = _deepeval()
        if found is None:
            return InputError(
                path,
                None,
                "the deepeval format is not available in this installation "
                "(loopwatch.traces.deepeval is missing or incomplete)",
            )
        return _DeepevalReader(path, found[1])
    return InputError(path, None, f"unknown format {name!r}; known: {', '.join(FORMATS)}")


def _describe(obj: Any) -> str:
    if isinstance(obj, dict):
        keys = ", ".join(sorted(map(str, obj))[:6])
        return f"an object with keys {keys or '(none)'}"
    if isinstance(obj, list):
        return f"an array of {len(obj)} items"
    return f"a JSON {type(obj).__name__}"


def read_path(path: str, format: str | None = None) -> Iterator[TraceRun | InputError]:
    """Stream the runs of one file, sniffing its format unless ``format`` is given."""
    if format is not None and format not in ("native", *FORMATS):
        yield InputError(path, None, f"unknown format {format!r}; known: {', '.join(FORMATS)}")
        return
    try:
        fh = open_text(path)
    except OSError as exc:
        yield InputError(path, None, f"cannot open: {exc.strerror or exc}")
        return
    with fh:
        try:
            yield from _read_open(path, fh, format)
        except (OSError, EOFError) as exc:  # a truncated .gz, a read error mid-way
            yield InputError(path, None, f"read failed: {exc}")


def _read_open(path: str, fh: Iterable[str], format: str | None) -> Iterator[Item]:
    lines = enumerate(fh, 1)
    peeked: list[tuple[int, str]] = []
    chosen: str | None = None
    first_decoded: Any = None
    for number, raw in lines:
        peeked.append((number, raw))
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = None
        if isinstance(obj, (dict, list)) and obj:
            if first_decoded is None:
                first_decoded = obj
            chosen = format if format is not None else detect(obj)
            if chosen is not None:
                break
        if len(peeked) >= PEEK_LINES:
            break
    if chosen is not None:
        yield from _read_lines(path, _reader(chosen, path), itertools.chain(peeked, lines))
        return
    # No recognisable line: one JSON document (pretty-printed), or not a trace at all.
    text = "".join(raw for _, raw in itertools.chain(peeked, lines))
    if not text.strip():
        return
    try:
        doc = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        if first_decoded is not None:
            yield InputError(
                path, None, f"unknown trace format: the first record is {_describe(first_decoded)}"
            )
        else:
            yield InputError(path, getattr(exc, "lineno", None), f"invalid JSON: {exc}")
        return
    chosen = format if format is not None else detect(doc)
    if chosen is None:
        yield InputError(
            path,
            None,
            f"unknown trace format: the document is {_describe(doc)} "
            f"(known: {', '.join(FORMATS)}; use --format to force one)",
        )
        return
    reader = _reader(chosen, path)
    if isinstance(reader, InputError):
        yield reader
        return
    yield from reader.feed(doc, None)
    yield from reader.finish()


def _read_lines(
    path: str, reader: Reader | InputError, lines: Iterable[tuple[int, str]]
) -> Iterator[Item]:
    if isinstance(reader, InputError):
        yield reader
        return
    for number, raw in lines:
        if not raw.strip():
            continue
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            yield InputError(path, number, f"invalid JSON: {exc}")
            yield from reader.skip(number)  # the line still counts towards run completion
            continue
        yield from reader.feed(obj, number)
    yield from reader.finish()
