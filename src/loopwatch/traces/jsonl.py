"""The native format: JSON Lines, one run per line (FORMAT.md section 1)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from .base import InputError, TraceRun

__all__ = ["parse_run", "read_jsonl"]


def parse_run(obj: Any, path: str = "", line: int | None = None) -> TraceRun | InputError:
    """Validate one decoded native run object."""
    if not isinstance(obj, dict):
        return InputError(path, line, f"expected a JSON object (a run), got {type(obj).__name__}")
    run_id = obj.get("run_id")
    if run_id is None or isinstance(run_id, (dict, list, bool)):
        return InputError(path, line, "run has no 'run_id' (a string is required)")
    events = obj.get("events")
    if not isinstance(events, list):
        return InputError(path, line, f"run {run_id!r} has no 'events' list")
    # A non-object event keeps its index as an unknown kind (ignored by detectors).
    events = [e if isinstance(e, dict) else {"kind": "", "value": e} for e in events]
    meta = obj.get("meta")
    extra = {k: v for k, v in obj.items() if k not in ("run_id", "events", "meta")}
    return TraceRun(str(run_id), events, meta if isinstance(meta, dict) else {}, extra, path, line)


def read_jsonl(path: str) -> Iterator[TraceRun | InputError]:
    """Stream native runs from a file (``-`` for stdin, ``.gz`` transparently); the
    same as ``read_runs(path, format="jsonl")``."""
    from .sniff import read_path  # sniff imports this module

    yield from read_path(path, "jsonl")
