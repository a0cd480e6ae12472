"""Trace readers: turn exported traces into runs of FORMAT.md events.

``read_runs(path)`` streams :class:`TraceRun` objects (and :class:`InputError`
for anything unreadable) from a file in any supported format.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from .base import InputError, TraceRun, open_text
from .jsonl import parse_run, read_jsonl

__all__ = ["FORMATS", "InputError", "TraceRun", "open_text", "parse_run", "read_runs"]

FORMATS = ("jsonl",)


def read_runs(
    paths: str | Iterable[str], format: str | None = None
) -> Iterator[TraceRun | InputError]:
    """Stream runs from one or more paths (``-`` is stdin), in input order."""
    if isinstance(paths, str):
        paths = [paths]
    for path in paths:
        if format not in (None, "jsonl", "native"):
            yield InputError(path, None, f"unknown format {format!r}; known: {', '.join(FORMATS)}")
            continue
        yield from read_jsonl(path)
