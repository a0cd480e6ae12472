"""Scans for a fleet: the per-run scan as functions a distributed engine maps over
batches, and ``loopwatch scan --engine`` on a cluster.

Why both: a team that already runs Spark, Ray or Dask over its trace lake wants loop
reports as one more step of that pipeline (:func:`scan_table`, :func:`scan_batches`,
:func:`scan_frame`), while a team with files wants the command line to use a cluster
instead of one machine's cores (:func:`open_engine`). Both run the same
:class:`~loopwatch.scan.Scanner` as a local scan, so a report does not depend on
where it was computed.

Input batches hold whole runs, one row per event (FORMAT.md section 3): partition by
``run_id`` before mapping (``repartition``/``shuffle`` on ``run_id`` in Spark, Ray
or Dask). Output: one row per run, with the report's headline columns and the full
``--json`` line in ``report``.

The engines are optional extras, imported only when asked for.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import orjson

from .config import Config
from .extras import missing_extra
from .scan import Executor, Report, Scanner
from .traces.base import InputError
from .traces.columnar import runs_from_table

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

log = logging.getLogger("loopwatch")
__all__ = [
    "ENGINES",
    "REPORT_COLUMNS",
    "Executor",
    "open_engine",
    "scan_batches",
    "scan_frame",
    "scan_table",
]

# The output schema: one row per run.
REPORT_COLUMNS: Final = (
    "run_id",
    "verdict",
    "score",
    "first_warn",
    "first_stop",
    "events",
    "report",
)


def _pyarrow() -> Any:
    try:
        import pyarrow
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "columnar", "pyarrow (Arrow batches)") from exc
    return pyarrow


def _reports(table: Any, config: Config | None) -> list[Report]:
    scanner = Scanner(config if config is not None else Config())
    reports: list[Report] = []
    for item in runs_from_table(table, "<batch>"):
        if isinstance(item, InputError):
            if item.whole_file:
                # In a pipeline a silent empty result would read as clean runs.
                raise ValueError(str(item))
            log.warning("loopwatch: %s", item)
        else:
            reports.append(scanner.scan(item.to_dict()))
    return reports


def _report_table(reports: list[Report]) -> pa.Table:
    pa = _pyarrow()
    rows = [r.to_dict() for r in reports]
    return pa.table(
        {
            "run_id": pa.array([r["run_id"] for r in rows], pa.string()),
            "verdict": pa.array([r["verdict"] for r in rows], pa.string()),
            "score": pa.array([r["score"] for r in rows], pa.float64()),
            "first_warn": pa.array([r["first_warn"] for r in rows], pa.int64()),
            "first_stop": pa.array([r["first_stop"] for r in rows], pa.int64()),
            "events": pa.array([r.events for r in reports], pa.int64()),
            "report": pa.array([orjson.dumps(r).decode() for r in rows], pa.string()),
        }
    )


def scan_table(table: pa.Table | pa.RecordBatch, config: Config | None = None) -> pa.Table:
    """Scan the runs in an Arrow table (one row per event, whole runs) and return one
    row per run, in order of each run's first row.

    A batch that is not a trace (no ``run_id`` or ``kind`` column) raises
    ``ValueError``: in a pipeline, a silent empty result would look like clean runs.
    """
    return _report_table(_reports(table, config))


def scan_batches(
    batches: Iterable[pa.RecordBatch], config: Config | None = None
) -> Iterator[pa.RecordBatch]:
    """For Spark's ``mapInArrow``: the record batches of one partition in, report
    batches out. A run's rows may span several batches of the partition, so the
    partition is gathered before it is scanned."""
    pa = _pyarrow()
    gathered = list(batches)
    if not gathered:
        return
    yield from scan_table(pa.Table.from_batches(gathered), config).to_batches()


def scan_frame(frame: pd.DataFrame, config: Config | None = None) -> pd.DataFrame:
    """For pandas batches (Ray Data ``map_batches(batch_format="pandas")``, Dask
    ``map_partitions``): the same as :func:`scan_table`."""
    pa = _pyarrow()
    result = scan_table(pa.Table.from_pandas(frame, preserve_index=False), config)
    return result.to_pandas()


# -- loopwatch scan --engine ----------------------------------------------------------


_CONNECT_SECONDS: Final = 15  # an unreachable scheduler is an error, not a hang


@contextlib.contextmanager
def _dask(address: str | None, workers: int) -> Iterator[Executor]:
    """A Dask ``distributed`` client: to the scheduler at ``address``, or to a local
    cluster of ``workers`` single-threaded processes (the scan is CPU-bound Python:
    threads would share one interpreter lock)."""
    try:
        from distributed import Client, LocalCluster
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "dask", "dask.distributed (scan --engine dask)") from exc
    if address:
        with Client(address, timeout=_CONNECT_SECONDS) as client:  # type: ignore[no-untyped-call]
            yield client
        return
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=50,  # logging.CRITICAL: the scan's stderr is for input errors
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        yield client


# name -> context manager yielding an executor; ``--engine`` choices
EngineFactory = Callable[[str | None, int], contextlib.AbstractContextManager[Executor]]
ENGINES: Final[dict[str, EngineFactory]] = {"dask": _dask}


def open_engine(
    name: str, address: str | None = None, workers: int = 2
) -> contextlib.AbstractContextManager[Executor]:
    """Connect to (or start) a distributed engine for :func:`~loopwatch.scan.scan_stream`.

    ``address`` joins an existing cluster; without it a local cluster of ``workers``
    processes is started and shut down afterwards.
    """
    factory = ENGINES.get(name)
    if factory is None:
        raise ValueError(f"unknown engine {name!r}; known: {', '.join(ENGINES)}")
    return factory(address, workers)
