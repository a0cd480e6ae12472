"""Columnar traces: Parquet and Arrow IPC files, one row per event (FORMAT.md section 3).

Why a columnar reader: teams that evaluate every production run keep traces in a
data lake, as Parquet partitioned by date or run, and read them with Spark, Ray or
Dask. Those engines hand loopwatch Arrow tables; this module turns a table into the
same runs the JSON Lines reader yields, so the scan of a run is the same whatever
file it came from.

The schema: ``run_id`` and ``kind`` are required; ``step`` orders a run's events
(row order when absent); every other FORMAT.md event field is an optional column
of the same name. A null is an absent field, never an empty one (absent is not
equal). ``args`` and ``meta`` may be JSON text or nested Arrow values; ``outcome``
and ``meta`` are run-level (the first non-null value of the run is taken).

A run's rows must all be in one file (partition by ``run_id``): a run id that comes
back in a later file is reported as an input error for that file's rows, instead of
being silently scanned as a second, shorter run.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Final

import orjson

from ..extras import missing_extra
from .base import InputError, TraceRun

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = [
    "COLUMNAR_SUFFIXES",
    "is_columnar",
    "read_columnar",
    "runs_from_table",
    "runs_to_table",
]

COLUMNAR_SUFFIXES: Final = (".parquet", ".pq", ".arrow", ".feather", ".ipc")
_PARQUET_MAGIC: Final = b"PAR1"
_ARROW_MAGIC: Final = b"ARROW1"
# Bytes read to tell a columnar file from text (see is_columnar).
_SNIFF_BYTES: Final = 4096
_RUN_LEVEL: Final = ("outcome", "meta")  # columns that describe the run, not the event
_JSON_COLUMNS: Final = ("args", "meta")  # JSON text is decoded; nested values kept
_ORDER: Final = "step"


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "columnar", "pyarrow (Parquet and Arrow traces)") from exc
    return pyarrow


def is_columnar(path: str) -> bool:
    """Whether a file is Parquet or Arrow IPC, by its magic bytes (or its suffix when
    it cannot be opened: the reader then reports why).

    Both formats write their magic at the start and at the end. A file with only the
    leading one is JSON Lines when a JSON object starts a line in its first 4 KiB (a
    first line that happens to read ``PAR1...`` or ``ARROW1...`` is a bad line to
    report, not a reason to lose every run after it), and otherwise a truncated
    columnar file, which the reader reports as unreadable.
    """
    if path == "-":
        return False
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
            if not (head[:4] == _PARQUET_MAGIC or head[:6] == _ARROW_MAGIC):
                return False
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - 6))
            tail = fh.read(6)
    except OSError:
        return path.endswith(COLUMNAR_SUFFIXES)
    magic = _PARQUET_MAGIC if head[:4] == _PARQUET_MAGIC else _ARROW_MAGIC
    if size > len(magic) and tail.endswith(magic):
        return True
    return b"\n{" not in head


def _read_table(path: str) -> pa.Table:
    pa = _pyarrow()
    with open(path, "rb") as fh:
        head = fh.read(4)
    if head == _PARQUET_MAGIC:
        return pa.parquet.read_table(path)
    with pa.memory_map(path) as source:
        return pa.ipc.open_file(source).read_all()


def read_columnar(path: str, seen: set[str] | None = None) -> Iterator[TraceRun | InputError]:
    """Stream the runs of one Parquet or Arrow file, in order of first appearance.

    ``seen`` holds the run ids of earlier files of the same input: a run continued
    here from another file is reported, not scanned twice as two halves.
    """
    try:
        table = _read_table(path)
    except ModuleNotFoundError as exc:  # the message names the extra to install
        yield InputError.whole(path, None, str(exc))
        return
    except Exception as exc:  # unreadable, truncated, not really Parquet
        yield InputError.whole(path, None, f"cannot read as Parquet/Arrow: {exc}")
        return
    yield from runs_from_table(table, path, seen)


def _decode(value: Any) -> Any:
    if isinstance(value, (str, bytes)):
        try:
            return orjson.loads(value)
        except orjson.JSONDecodeError:
            return value  # a tool whose arguments are plain text
    return value


def runs_from_table(
    table: pa.Table | pa.RecordBatch, path: str = "<table>", seen: set[str] | None = None
) -> Iterator[TraceRun | InputError]:
    """The runs in an Arrow table or record batch with one row per event.

    Runs come in order of their first row; a run's events are ordered by ``step``
    (stable, so rows with equal steps keep their order). The table must hold whole
    runs: this is what a scan partitioned by ``run_id`` hands each worker.
    """
    names = list(table.schema.names)
    for required in ("run_id", "kind"):
        if required not in names:
            yield InputError.whole(
                path,
                None,
                f"no {required!r} column (columns: {', '.join(names) or 'none'}); "
                "a columnar trace has one row per event with 'run_id' and 'kind' columns "
                "(FORMAT.md section 3)",
            )
            return
    columns = {name: table.column(name).to_pylist() for name in names}
    run_ids = columns.pop("run_id")
    order = columns.pop(_ORDER, None)
    run_level = {name: columns.pop(name) for name in _RUN_LEVEL if name in columns}
    rows: dict[str, list[int]] = {}
    bad_ids = 0
    for row, rid in enumerate(run_ids):
        if rid is None:
            bad_ids += 1
            continue
        rows.setdefault(str(rid), []).append(row)
    if bad_ids:
        yield InputError(path, None, f"{bad_ids} row(s) with a null 'run_id' were skipped")
    fields = list(columns.items())
    for rid, indices in rows.items():
        if seen is not None:
            if rid in seen:
                yield InputError(
                    path,
                    None,
                    f"run {rid!r} continues here from an earlier file: its {len(indices)} "
                    "rows were skipped (keep a run's rows in one file: partition by run_id)",
                )
                continue
            seen.add(rid)
        if order is not None:
            indices.sort(key=lambda i: (order[i] is None, order[i] or 0))
        events = [_event(fields, i) for i in indices]
        meta: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for name, values in run_level.items():
            value = next((values[i] for i in indices if values[i] is not None), None)
            if value is None:
                continue
            if name == "meta":
                decoded = _decode(value)
                if isinstance(decoded, Mapping):
                    meta = dict(decoded)
            else:
                extra[name] = value
        yield TraceRun(rid, events, meta, extra, path, None)


def _event(fields: list[tuple[str, list[Any]]], row: int) -> dict[str, Any]:
    event: dict[str, Any] = {}
    for name, values in fields:
        value = values[row]
        if value is None:
            continue  # absent, not empty
        event[name] = _decode(value) if name in _JSON_COLUMNS else value
    return event


# Event fields with a fixed column type (FORMAT.md section 3).
_TEXT_FIELDS: Final = ("kind", "name", "text", "id", "parent", "type", "agent", "to")


def _number(value: Any) -> int | float | None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    return value if ok else None


def runs_to_table(runs: Iterable[Mapping[str, Any] | TraceRun]) -> pa.Table:
    """Native runs as an Arrow table, one row per event: the inverse of
    :func:`runs_from_table` for the FORMAT.md fields, for writing JSON Lines traces
    to Parquet (``pyarrow.parquet.write_table(runs_to_table(runs), path)``)."""
    pa = _pyarrow()
    cols: dict[str, list[Any]] = {"run_id": [], "step": []}
    for name in (*_TEXT_FIELDS, "args", "error", "tokens", "cost", "unknown", *_RUN_LEVEL):
        cols[name] = []
    for run in runs:
        data = run.to_dict() if isinstance(run, TraceRun) else run
        rid = str(data.get("run_id", ""))
        meta = data.get("meta")
        outcome = data.get("outcome")
        for step, ev in enumerate(data.get("events") or ()):
            if not isinstance(ev, Mapping):
                ev = {"kind": ""}
            cols["run_id"].append(rid)
            cols["step"].append(step)
            for name in _TEXT_FIELDS:
                value = ev.get(name)
                cols[name].append(None if value is None else str(value))
            cols["args"].append(orjson.dumps(ev["args"]).decode() if "args" in ev else None)
            error = ev.get("error")
            cols["error"].append(error if isinstance(error, bool) else None)
            cols["tokens"].append(_number(ev.get("tokens")))
            cols["cost"].append(_number(ev.get("cost")))
            unknown = ev.get("unknown")
            cols["unknown"].append(list(map(str, unknown)) if isinstance(unknown, list) else None)
            cols["outcome"].append(str(outcome) if outcome is not None and step == 0 else None)
            cols["meta"].append(orjson.dumps(meta).decode() if meta and step == 0 else None)
    whole = all(isinstance(v, int) for v in cols["tokens"] if v is not None)
    types: dict[str, Any] = {
        "run_id": pa.string(),
        "step": pa.int64(),
        "error": pa.bool_(),
        "tokens": pa.int64() if whole else pa.float64(),
        "cost": pa.float64(),
        "unknown": pa.list_(pa.string()),
    }
    return pa.table(
        {name: pa.array(values, type=types.get(name, pa.string())) for name, values in cols.items()}
    )
