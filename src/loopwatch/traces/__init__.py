"""Trace readers: turn exported traces into runs of FORMAT.md events.

``read_runs(path)`` streams :class:`TraceRun` objects (and :class:`InputError`
for anything unreadable) from files in any supported format. The format is
sniffed from the content (:mod:`.sniff`); ``format=`` forces one. Supported:
native JSON Lines (``jsonl``), OTLP JSON with the GenAI or OpenInference
conventions (``otlp``), OpenAI Agents SDK exports (``openai_agents``),
LangSmith runs (``langsmith``), Langfuse traces and observations
(``langfuse``), the session logs of coding CLIs (Claude Code ``claude_code``,
Codex ``codex``, Gemini CLI ``gemini_cli``, Qwen Code ``qwen_code``, GitHub Copilot
CLI ``copilot_cli``, OpenCode ``opencode``: its ``opencode export`` JSON, or its
SQLite database, recognised by its magic bytes), deepeval span
trees (``deepeval``, when its reader is installed), and Parquet or Arrow
files with one row per event (:mod:`.columnar`, recognised by their magic bytes).
``.gz`` files are decompressed on the fly, ``-`` is stdin, and a directory stands
for the trace files under it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator

from .base import InputError, TraceRun, open_text
from .columnar import COLUMNAR_SUFFIXES, is_columnar, read_columnar
from .jsonl import parse_run
from .opencode import DB_NAME, is_sqlite, read_database
from .sniff import FORMATS as _TEXT_FORMATS
from .sniff import detect, read_path

FORMATS = (*_TEXT_FORMATS, "columnar")

__all__ = [
    "FORMATS",
    "InputError",
    "TraceRun",
    "detect",
    "no_trace_files",
    "open_text",
    "parse_run",
    "read_file",
    "read_jsonl",
    "read_runs",
    "trace_files",
]


def read_runs(
    paths: str | Iterable[str], format: str | None = None
) -> Iterator[TraceRun | InputError]:
    """Stream runs from one or more paths (``-`` is stdin), in input order.

    ``format`` forces a reader (one of :data:`FORMATS`, or ``"native"``);
    ``None`` sniffs each file's content. Unreadable input becomes an
    :class:`InputError` in the stream and reading goes on.
    """
    if isinstance(paths, str):
        paths = [paths]
    columnar_runs: set[str] = set()  # a run's rows must not continue in a later file
    for path in paths:
        files = trace_files(path)
        if not files:
            yield no_trace_files(path)
        for file in files:
            yield from read_file(file, format, columnar_runs)


def read_file(
    file: str, format: str | None = None, columnar_runs: set[str] | None = None
) -> Iterator[TraceRun | InputError]:
    """The runs of one file (not a directory). ``columnar_runs`` carries the run ids of
    earlier columnar files of the same input (see :func:`.columnar.read_columnar`)."""
    if format == "columnar" or (format is None and is_columnar(file)):
        yield from read_columnar(file, columnar_runs)
    elif format in (None, "opencode") and is_sqlite(file):
        yield from read_database(file)
    else:
        yield from read_path(file, format)


def read_jsonl(path: str) -> Iterator[TraceRun | InputError]:
    """Stream native runs from a file (``-`` for stdin, ``.gz`` transparently); the
    same as ``read_runs(path, format="jsonl")``."""
    yield from read_path(path, "jsonl")


_TRACE_SUFFIXES = (
    ".jsonl",
    ".ndjson",
    ".json",
    ".jsonl.gz",
    ".ndjson.gz",
    ".json.gz",
    *COLUMNAR_SUFFIXES,
)


def no_trace_files(path: str) -> InputError:
    """The error for a directory with no trace file under it: the whole input is lost
    (exit status 2), as for an empty file."""
    kinds = ", ".join(f"*{suffix}" for suffix in _TRACE_SUFFIXES)
    return InputError.whole(path, None, f"no trace files in this directory (looked for {kinds})")


def trace_files(path: str) -> list[str]:
    """A directory stands for the trace files under it (``~/.claude/projects``; an
    OpenCode database counts by its name, ``opencode.db``), sorted;
    an empty list when it holds none (see :func:`no_trace_files`)."""
    if path == "-" or not os.path.isdir(path):
        return [path]
    found = [
        os.path.join(folder, name)
        for folder, _, names in os.walk(path)
        for name in names
        if name.endswith(_TRACE_SUFFIXES) or name == DB_NAME
    ]
    return sorted(found)
