"""Which format is this file? Decided from its content, then read with that format's reader.

Structure first: a file whose first non-blank line is not a complete JSON value
but opens an object or array may be one JSON document (a pretty-printed export);
it is parsed whole, and read line by line if that fails. Anything else is JSON
Lines. Format second: each decoded record is offered to each format's
``looks_like`` in a fixed order (most specific first) until one recognises a
record; the records before it wait (a bounded number) and go to that reader too.
Why content and not extensions: exports are ``.json``, ``.jsonl``, ``.ndjson``,
``.gz`` or ``-`` alike.

Nothing readable is lost to what surrounds it: any amount of garbage or foreign
records before, between or after the runs is reported (``path:line: reason``,
once per line) and reading goes on; a forced ``format`` is never second-guessed.
Lines are read as bytes and decoded here, so invalid UTF-8 is reported rather
than silently replaced.
"""

from __future__ import annotations

import io
import itertools
import json
import re
import zlib
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final

import orjson

from . import (
    claude_code,
    coding_cli,
    copilot_cli,
    langfuse,
    langsmith,
    openai_agents,
    opencode,
    otlp,
    qwen_code,
)
from ._common import Item, Reader
from .base import InputError, TraceRun, open_binary
from .jsonl import Understanding, parse_run

__all__ = [
    "FORMATS",
    "NativeReader",
    "decode_json",
    "detect",
    "native_ranges",
    "read_native_range",
    "read_path",
]


class NativeReader(Reader):
    """The native format (FORMAT.md) behind the common reader interface.

    Its events are counted as they go by (:class:`.jsonl.Understanding`): at the end
    of the file, one line names the events that were not FORMAT.md events.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.understanding = Understanding(path)

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        if not isinstance(obj, list):
            item = parse_run(obj, self.path, line)
            if isinstance(item, TraceRun):
                self.understanding.add(item.events)
            yield item
            return
        # An array of runs: its runs are read; what is not a run is one error for the
        # line (not one identical line per item: [1, 2, 3] is one mistake).
        failed: list[tuple[int, InputError]] = []
        for index, record in enumerate(obj):
            item = parse_run(record, self.path, line)
            if isinstance(item, InputError):
                failed.append((index, item))
            else:
                self.understanding.add(item.events)
                yield item
        if len(failed) == 1 and len(obj) == 1:
            yield failed[0][1]
        elif failed:
            index, first = failed[0]
            more = (
                f"; {len(failed) - 1} more of them are not runs either" if len(failed) > 1 else ""
            )
            yield InputError(
                self.path,
                line,
                f"item {index} of this array of {len(obj)}: {first.reason}{more}",
            )

    def finish(self) -> Iterator[Item]:
        warning = self.understanding.warning()
        if warning is not None:
            yield warning


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
    "qwen_code": (qwen_code.looks_like, qwen_code.QwenCodeReader),
    "claude_code": (claude_code.looks_like, claude_code.ClaudeCodeReader),
    "codex": (coding_cli.codex_looks_like, coding_cli.CodexReader),
    "gemini_cli": (coding_cli.gemini_looks_like, coding_cli.GeminiSessionReader),
    "copilot_cli": (copilot_cli.looks_like, copilot_cli.CopilotCliReader),
    "opencode": (opencode.looks_like, opencode.OpencodeExportReader),
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
            return InputError.whole(
                path,
                None,
                "the deepeval format is not available in this installation "
                "(loopwatch.traces.deepeval is missing or incomplete)",
            )
        return _DeepevalReader(path, found[1])
    return InputError.whole(path, None, f"unknown format {name!r}; known: {', '.join(FORMATS)}")


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
        yield InputError.whole(
            path, None, f"unknown format {format!r}; known: {', '.join(FORMATS)}"
        )
        return
    try:
        fh = open_binary(path)
    except OSError as exc:
        yield InputError.whole(path, None, f"cannot open: {exc.strerror or exc}")
        return
    reading = _FileReading(path, format)
    with fh:
        try:
            yield from reading.read(fh)
        except (OSError, EOFError, zlib.error) as exc:  # a truncated or corrupt .gz, ...
            yield from reading.abort()
            yield InputError.whole(path, None, f"read failed: {exc}")
        except Exception as exc:  # a reader bug: lose the rest of this file, not the scan
            yield from reading.abort()
            yield InputError.whole(
                path, None, f"read failed ({type(exc).__name__}: {exc}); this is a loopwatch bug"
            )


_BAD: Final = object()  # a line that could not be decoded at all
_PENDING_MAX: Final = 1000  # records held while no format has recognised one
_EARLY_LINES: Final = 8  # complete records that show a "document" is JSON Lines after all
_DOC_LIMIT: Final = 1 << 30  # bytes of a would-be document held before reading it as lines
_BOM: Final = b"\xef\xbb\xbf"


_LONE_SURROGATE: Final = re.compile(
    r"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    r"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}"
)


def _error_line(raw: bytes) -> int | None:
    """The line (1-based, within ``raw``) where orjson stops understanding it."""
    try:
        orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        return int(exc.lineno)
    return None


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def decode_json(raw: bytes) -> tuple[Any, str | None]:
    """Decode one JSON text: ``(value, problem)``.

    ``value`` is :data:`_BAD` when nothing could be decoded; ``problem`` is the
    one sentence to report (or None). Invalid UTF-8 is reported and the text read
    with U+FFFD in its place, so the record is kept. What orjson refuses but the
    JSON grammar allows (integers beyond 64 bits, lone surrogate escapes) is read
    with the standard library.
    """
    try:
        return orjson.loads(raw), None
    except orjson.JSONDecodeError as exc:
        first = exc
    problem = None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as bad:
        text = raw.decode("utf-8", "replace")
        problem = (
            f"invalid UTF-8 (byte 0x{raw[bad.start]:02x} at offset {bad.start}); "
            "read with U+FFFD in its place"
        )
        try:
            return orjson.loads(text), problem
        except orjson.JSONDecodeError as exc:
            first = exc
    try:
        value = json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        pass
    else:
        if _LONE_SURROGATE.search(text):
            # "\ud800" alone is JSON but not text: it could not be printed or hashed
            # as UTF-8 later, so it is read as U+FFFD, and said so.
            value = json.loads(
                _LONE_SURROGATE.sub(r"\\ufffd", text), parse_constant=_reject_constant
            )
            lone = "a lone surrogate escape (\\ud800-\\udfff) read as U+FFFD"
            problem = lone if problem is None else f"{problem}; {lone}"
        return value, problem
    reason = f"invalid JSON: {first}"
    return _BAD, reason if problem is None else f"{problem}, and {reason}"


class _FileReading:
    """The reading of one file: the structure decision, the format decision, the
    reader, and the records waiting for a format."""

    def __init__(self, path: str, format: str | None) -> None:
        self.path = path
        self.format = format
        self.reader: Reader | None = None
        self.pending: deque[tuple[int, Any, str | None]] = deque()
        self.unknown = 0  # records no format recognised
        self.lines = 0  # non-blank lines seen

    # -- structure -----------------------------------------------------------------
    def read(self, fh: Iterable[bytes]) -> Iterator[Item]:
        lines = enumerate(fh, 1)
        for number, raw in lines:
            if number == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM) :]
            if raw.strip():
                first = (number, raw)
                break
        else:  # an empty file (or only blank lines): no trace in it, as README promises
            yield InputError.whole(self.path, None, "empty file: no trace in it")
            return
        head = first[1].lstrip()
        if head[:1] in (b"{", b"[") and decode_json(first[1])[0] is _BAD:
            yield from self._maybe_document(first, lines)
        else:
            yield from self._lines(itertools.chain([first], lines))

    def _maybe_document(
        self, first: tuple[int, bytes], lines: Iterator[tuple[int, bytes]]
    ) -> Iterator[Item]:
        """The first line opens a value it does not close: one pretty-printed JSON
        document, or JSON Lines whose first line is broken. Hold the lines until the
        end (or until enough complete records show it is JSON Lines) and decide."""
        held = [first]
        size = len(first[1])
        records = 0
        for number, raw in lines:
            held.append((number, raw))
            size += len(raw)
            if raw.strip()[:1] in (b"{", b"[") and self._is_record(raw):
                records += 1
            if records >= _EARLY_LINES or size > _DOC_LIMIT:
                yield from self._lines(itertools.chain(held, lines))
                return
        doc, problem = decode_json(b"".join(raw for _, raw in held))
        if doc is not _BAD:
            yield from self._document(doc, problem)
            return
        if records == 0:
            # Not one complete record on any line: a broken document, one error.
            at = _error_line(b"".join(raw for _, raw in held))
            line = None if at is None else held[0][0] + at - 1
            yield InputError.whole(self.path, line, problem or "invalid JSON")
            return
        yield from self._lines(iter(held))

    def _is_record(self, raw: bytes) -> bool:
        obj, _ = decode_json(raw)
        if not isinstance(obj, (dict, list)) or not obj:
            return False
        return self.format is not None or detect(obj) is not None

    def _document(self, doc: Any, problem: str | None) -> Iterator[Item]:
        if problem is not None:
            yield InputError(self.path, None, problem)
        chosen = self.format if self.format is not None else detect(doc)
        if chosen is None:
            yield InputError.whole(
                self.path,
                None,
                f"unknown trace format: the document is {_describe(doc)} "
                f"(known: {', '.join(FORMATS)}; use --format to force one)",
            )
            return
        reader = _reader(chosen, self.path)
        if isinstance(reader, InputError):
            yield reader
            return
        self.reader = reader
        yield from self._feed(doc, None)
        yield from self.finish()

    # -- JSON Lines ----------------------------------------------------------------
    def _lines(self, lines: Iterable[tuple[int, bytes]]) -> Iterator[Item]:
        if self.format is not None:
            reader = _reader(self.format, self.path)
            if isinstance(reader, InputError):
                yield reader
                return
            self.reader = reader
        for number, raw in lines:
            if not raw.strip():
                continue
            self.lines += 1
            obj, problem = decode_json(raw)
            if self.reader is None:
                yield from self._sniff(number, obj, problem)
            else:
                yield from self._take(number, obj, problem)
        yield from self.finish()

    def _take(self, number: int, obj: Any, problem: str | None) -> Iterator[Item]:
        """Give one decoded line to the reader; one error line at most per input line
        (a decoding problem and what the reader says about the record are joined)."""
        reader = self.reader
        assert reader is not None
        if obj is _BAD:
            yield InputError(self.path, number, problem or "invalid JSON")
            yield from self._guarded(reader.skip, number, line=number)
            return
        if problem is None:
            yield from self._feed(obj, number)
            return
        items = list(self._feed(obj, number))
        for i, item in enumerate(items):
            if isinstance(item, InputError) and item.line == number:
                items[i] = InputError(self.path, number, f"{problem}; {item.reason}")
                break
        else:
            items.insert(0, InputError(self.path, number, problem))
        yield from items

    def _sniff(self, number: int, obj: Any, problem: str | None) -> Iterator[Item]:
        """No format yet: this record may decide it. Until one does, records and
        line errors wait in order (a bounded number: the oldest are let go as
        errors), so that a file with no trace in it at all is one error, not one per
        line, and a trace after any amount of garbage is still read."""
        name = None
        if isinstance(obj, (dict, list)) and obj:
            name = detect(obj)
        if name is None:
            if obj is not _BAD:
                self.unknown += 1
            self.pending.append((number, obj, problem))
            while len(self.pending) > _PENDING_MAX:
                yield self._let_go(*self.pending.popleft())
            return
        reader = _reader(name, self.path)
        if isinstance(reader, InputError):  # pragma: no cover - detect found it
            yield reader
            return
        self.reader = reader
        waiting, self.pending = self.pending, deque()
        for held in waiting:
            yield from self._take(*held)
        yield from self._take(number, obj, problem)

    def _let_go(self, line: int, obj: Any, problem: str | None) -> InputError:
        """A held line, released as its error while no format has been recognised."""
        if obj is _BAD:
            return InputError(self.path, line, problem or "invalid JSON")
        reason = (
            f"not a trace record of any known format: {_describe(obj)} "
            f"(known: {', '.join(FORMATS)}; use --format to force one)"
        )
        return InputError(self.path, line, reason if problem is None else f"{problem}; {reason}")

    def _feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        reader = self.reader
        assert reader is not None
        if isinstance(obj, list) and not obj:
            yield InputError(self.path, line, "an empty array: no trace records in it")
            return
        yield from self._guarded(reader.feed, obj, line, line=line)

    def _guarded(
        self, method: Callable[..., Iterator[Item]], *args: Any, line: int | None
    ) -> Iterator[Item]:
        """A reader that trips over one odd record loses that record, not the file."""
        try:
            yield from method(*args)
        except Exception as exc:
            yield InputError(
                self.path,
                line,
                f"record could not be read ({type(exc).__name__}: {exc}); this is a loopwatch bug",
            )

    def finish(self) -> Iterator[Item]:
        """End of input: the reader's buffered runs, or one error saying that no
        line was a trace record of a known format."""
        if self.reader is not None:
            reader, self.reader = self.reader, None
            yield from self._guarded(reader.finish, line=None)
            return
        if not self.lines:
            return
        waiting, self.pending = self.pending, deque()
        records = [(n, o) for n, o, _ in waiting if o is not _BAD]
        if records:
            number, obj = records[0]
            yield InputError.whole(
                self.path,
                None,
                f"unknown trace format: none of its {self.unknown} JSON records is a trace "
                f"record; the first (line {number}) is {_describe(obj)} "
                f"(known: {', '.join(FORMATS)}; use --format to force one)",
            )
        elif waiting:
            number, _, problem = waiting[0]
            yield InputError.whole(
                self.path,
                None,
                f"not a trace file: none of its {self.lines} lines could be read "
                f"(line {number}: {problem})",
            )
        else:
            yield InputError.whole(
                self.path, None, f"no trace records: none of its {self.lines} lines could be read"
            )

    def abort(self) -> Iterator[Item]:
        """Reading stopped mid-file: let the runs already complete in the reader go,
        or report the lines that were waiting for a format (the caller reports the
        file itself)."""
        if self.reader is None:
            waiting, self.pending = self.pending, deque()
            for held in waiting:
                yield self._let_go(*held)
            return
        try:
            yield from self.finish()
        except Exception:  # the reader is what failed; nothing more to save
            return


# -- one native file in pieces, for parallel scans --------------------------------------
def native_ranges(path: str, size: int) -> list[tuple[int, int, int]] | None:
    """Line-aligned byte ranges ``(start, end, first line number)`` of about ``size``
    bytes that together make up a native JSON Lines file, or None when the file cannot
    be read in pieces: stdin, compressed, or not native from its first line (another
    format, a pretty-printed document, garbage first: those are read whole, because
    the format decision needs what comes first).

    Why this exists: a parallel scan whose main process decodes every run and encodes
    it again for a worker spends most of its time there. With ranges the main process
    only finds newlines; each worker reads, decodes and scans its own range, exactly
    as :func:`read_path` would (:func:`read_native_range`).
    """
    if path == "-" or path.endswith(".gz"):
        return None
    try:
        fh = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with fh:
        head = fh.readline()
        number = 1
        while head and not head.strip():  # blank lines before the first record
            head = fh.readline()
            number += 1
        if not head:
            return None
        obj, problem = decode_json(head[len(_BOM) :] if head.startswith(_BOM) else head)
        if problem is not None or not isinstance(obj, dict) or detect(obj) != "jsonl":
            return None
        ranges: list[tuple[int, int, int]] = []
        start, line = 0, 1
        while True:
            fh.seek(start)
            block = fh.read(size)
            if not block:
                break
            if len(block) == size:
                tail = fh.readline()  # finish the line the block ends in
                block += tail
            end = start + len(block)
            ranges.append((start, end, line))
            line += block.count(b"\n")
            start = end
        return ranges


def read_native_range(
    path: str, start: int, end: int, first_line: int
) -> Iterator[Item | Understanding]:
    """The items of one range from :func:`native_ranges`: what :func:`read_path` yields
    for those lines (the file's format was decided native on its first line, so every
    line goes to the native reader, one error line at most per bad line), then the
    range's :class:`.jsonl.Understanding`: the caller adds up a file's ranges and
    reports the file once (``scan.scan_paths``)."""
    reading = _FileReading(path, "jsonl")
    native = NativeReader(path)
    reading.reader = native
    try:
        with open(path, "rb") as fh:
            fh.seek(start)
            data = fh.read(end - start)
    except OSError as exc:
        yield InputError.whole(path, first_line, f"read failed: {exc.strerror or exc}")
        return
    # BytesIO splits lines as a file does (on b"\\n" only), as read_path reads them
    for number, raw in enumerate(io.BytesIO(data), first_line):
        if number == 1 and raw.startswith(_BOM):
            raw = raw[len(_BOM) :]
        if not raw.strip():
            continue
        reading.lines += 1
        yield from reading._take(number, *decode_json(raw))
    yield native.understanding
