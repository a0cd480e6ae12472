"""What every trace reader yields: runs in the native shape, or input errors."""

from __future__ import annotations

import gzip
import io
import sys
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

from ..redact import redact

__all__ = ["ByteLines", "InputError", "TraceRun", "open_binary", "open_text"]


@dataclass(slots=True)
class TraceRun:
    """One run as read from a file, in the FORMAT.md shape (events are dicts)."""

    run_id: str
    events: list[dict[str, Any]]
    meta: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # other top-level fields (labels...)
    path: str = ""
    line: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"run_id": self.run_id}
        if self.meta:
            out["meta"] = self.meta
        out.update(self.extra)
        out["events"] = self.events
        return out


@dataclass(frozen=True, slots=True)
class InputError:
    """Input that could not be read: reported as ``path:line: reason``; the scan goes on.

    ``whole_file`` marks the loss of a whole file (it cannot be opened, decompressed
    or parsed, or holds no trace at all), as opposed to one bad line or record in a
    file otherwise read: the command line exits 2 for the former only.
    """

    path: str
    line: int | None
    reason: str
    whole_file: bool = False

    @classmethod
    def whole(cls, path: str, line: int | None, reason: str) -> InputError:
        """An error that costs the whole file."""
        return cls(path, line, reason, True)

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line is not None else self.path
        return f"{where}: {redact(self.reason)}"  # a reason may quote the input


def open_text(path: str) -> IO[str]:
    """Open a trace file for reading as UTF-8 text: ``-`` is stdin, ``.gz`` is gunzipped."""
    if path == "-":
        return io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace")
    if path.endswith(".gz"):
        return io.TextIOWrapper(gzip.open(path, "rb"), encoding="utf-8", errors="replace")
    return open(path, encoding="utf-8", errors="replace")


class ByteLines:
    """Lines of bytes from a file or stdin, closed (if ours to close) on exit."""

    def __init__(self, lines: Iterable[bytes], close: Callable[[], None] | None = None) -> None:
        self._lines = lines
        self._close = close

    def __iter__(self) -> Iterator[bytes]:
        return iter(self._lines)

    def __enter__(self) -> ByteLines:
        return self

    def __exit__(self, *exc: object) -> None:
        if self._close is not None:
            self._close()


def open_binary(path: str) -> ByteLines:
    """Open a trace file for reading as lines of bytes: ``-`` is stdin, ``.gz`` is
    gunzipped. Bytes, because decoding belongs to the reader: a line of invalid
    UTF-8 is reported where it is, not silently turned into U+FFFD."""
    if path == "-":  # stdin is not ours to close (``-`` may be given twice)
        buffer = getattr(sys.stdin, "buffer", None)
        if buffer is None:  # a StringIO put in its place
            return ByteLines(line.encode("utf-8", "surrogateescape") for line in sys.stdin)
        return ByteLines(buffer)
    if path.endswith(".gz"):
        gz = gzip.open(path, "rb")  # noqa: SIM115 - closed by ByteLines
        return ByteLines(gz, gz.close)
    fh = open(path, "rb")  # noqa: SIM115 - closed by ByteLines
    return ByteLines(fh, fh.close)
