"""Offline scan: a recorded run in, a Report out (score, findings, iteration metrics).

The scan feeds the run's events, one by one, to the same :class:`Engine` and
:class:`Policy` the runtime guard uses, on a fresh state. Its ``first_warn`` and
``first_stop`` are therefore exactly where a guard replaying the run would have
warned and stopped.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import sys
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Final, NamedTuple, Protocol

import orjson

from .config import Config
from .detectors import Detector
from .engine import Engine, new_state
from .findings import Finding, Severity
from .policy import Policy
from .replay import replay
from .traces import no_trace_files, read_file, read_runs, trace_files
from .traces.base import InputError, TraceRun
from .traces.columnar import is_columnar
from .traces.jsonl import Understanding
from .traces.sniff import native_ranges, read_native_range

__all__ = ["Report", "ScanFailure", "Scanner", "scan", "scan_one", "scan_stream", "score_of"]

# Score per detector: 1.0 when silent; a warning alone costs a little (suspicious,
# not proven); a stop costs most of it, and each further stop a little more.
_WARN_SCORE = 0.8
_STOP_SCORE = 0.4
_EXTRA_STOP = 0.05
_FLOOR = 0.05
# The run's score is in the band of its verdict (see score_of).
_WARN_BAND: Final = (0.5, _WARN_SCORE)


@dataclass
class Report:
    """The scan of one run: FORMAT.md's output object plus a per-detector breakdown.

    ``findings`` holds one finding per (detector, pattern, severity), the first time
    it was reported, in that order; ``occurrences`` (aligned with it) says how many
    times the guard would have reported it and at which step last. A guard repeats
    a stop at every later event of a looping run, so listing each repetition would
    make the report grow with the run (a million identical calls, a million
    findings) instead of with the number of distinct loops in it.
    """

    run_id: str
    verdict: str
    score: float
    first_warn: int | None
    first_stop: int | None
    findings: list[Finding]
    metrics: dict[str, Any]
    breakdown: dict[str, float] = field(default_factory=dict)
    events: int = 0
    occurrences: list[tuple[int, int]] = field(default_factory=list)  # (count, last step)

    def to_dict(self) -> dict[str, Any]:
        """The FORMAT.md ``loopwatch scan --json`` object for this run; each finding
        also says ``count`` (times reported) and ``last_step`` (the last of them)."""
        occurrences = self.occurrences or [(1, f.step) for f in self.findings]
        return {
            "run_id": self.run_id,
            "verdict": self.verdict,
            "score": self.score,
            "first_warn": self.first_warn,
            "first_stop": self.first_stop,
            "findings": [
                {**f.to_dict(), "count": count, "last_step": last}
                for f, (count, last) in zip(self.findings, occurrences, strict=True)
            ],
            "metrics": self.metrics,
        }

    @property
    def top_finding(self) -> Finding | None:
        """The first stop finding, else the first warning."""
        for f in self.findings:
            if f.severity is Severity.STOP:
                return f
        return self.findings[0] if self.findings else None


_OUTCOME_WORDS: Final = {
    "succeeded": "succeeded", "success": "succeeded", "ok": "succeeded",
    "completed": "succeeded", "failed": "failed", "failure": "failed", "error": "failed",
    "cancelled": "cancelled", "canceled": "cancelled", "interrupted": "cancelled",
}  # fmt: skip


def run_outcome(run: Mapping[str, Any]) -> str | None:
    """The run's recorded outcome (FORMAT.md ``outcome``: succeeded, failed or
    cancelled), from the run object or its ``meta``; None when not recorded."""
    value = run.get("outcome")
    if value is None:
        meta = run.get("meta")
        value = meta.get("outcome") if isinstance(meta, Mapping) else None
    if not isinstance(value, str):
        return None
    return _OUTCOME_WORDS.get(value.strip().lower())


class _StoppedClock:
    """The scan's clock for events that carry no time: the moment the scanner was
    made, for good. A recorded run without times took no time, however long this
    machine takes to read it, so a report is the same on every scan (the wait budget
    would otherwise count a stalled scan as time waited). It is still the wall clock's
    time, as the guard's, so a run that carries times on some events only compares
    them with the same kind of number as a live guard does."""

    __slots__ = ("now",)

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


class Scanner:
    """Scans runs with one configuration; reuse it for many runs."""

    def __init__(
        self, config: Config | None = None, detectors: Iterable[Detector] | None = None
    ) -> None:
        self.config = config if config is not None else _discovered_config()
        self.engine = Engine(
            self.config.detectors(_StoppedClock()) if detectors is None else detectors,
            self.config.exempt_tools,
            self.config.redact_patterns,
        )
        self.policy = Policy(
            self.config.on_loop,  # type: ignore[arg-type]
            tell_first=self.config.tell_first,
            redact=self.engine.redact,
        )

    def scan(self, run: Mapping[str, Any] | Iterable[Any], run_id: str | None = None) -> Report:
        """Scan one run: a FORMAT.md run object, a :class:`~loopwatch.TraceRun` from
        :func:`~loopwatch.read_runs`, or an iterable of events (FORMAT.md dicts or
        :class:`Event`)."""
        outcome = None
        if isinstance(run, TraceRun):
            run = run.to_dict()
        if isinstance(run, Mapping):
            run_id = str(run.get("run_id", run_id or ""))
            events: Iterable[Any] = run.get("events", _NO_EVENTS)
            if events is _NO_EVENTS or not isinstance(events, (list, tuple)):
                raise _not_a_run(run)
            outcome = run_outcome(run)
        elif isinstance(run, (str, bytes, os.PathLike, InputError)) or not isinstance(
            run, Iterable
        ):
            raise _not_a_run(run)
        else:
            events = run
        done = replay(self.engine, self.policy, new_state(), events)
        merged, first_warn, first_stop = done.merged, done.first_warn, done.first_stop
        findings, occurrences = merged.findings, merged.occurrences
        breakdown = _breakdown(findings, occurrences)
        if first_stop is not None:
            verdict_name = "stop"
        elif first_warn is not None:
            verdict_name = "warn"
        else:
            verdict_name = "ok"
        return Report(
            run_id=run_id or "",
            verdict=verdict_name,
            score=score_of(verdict_name, breakdown),
            first_warn=first_warn,
            first_stop=first_stop,
            findings=findings,
            metrics=done.metrics.result(self.config.max_iterations, outcome),
            breakdown=breakdown,
            events=done.events,
            occurrences=[(c, last) for c, last in occurrences],
        )


_NO_EVENTS: Final[list[Any]] = []
_TAKES = (
    "scan() takes one run: a run dict {'run_id': ..., 'events': [...]} (FORMAT.md), "
    "a TraceRun from loopwatch.read_runs, or a list of events"
)


def _not_a_run(run: object) -> TypeError:
    """The TypeError for what :meth:`Scanner.scan` cannot take, saying what it takes and,
    for a path, how to scan a file's runs (a str is iterable: it used to scan as a run
    of one unknown event per character, ``ok``)."""
    if isinstance(run, (str, bytes, os.PathLike)):
        path = os.fsdecode(run) if not isinstance(run, str) else run
        return TypeError(
            f"{_TAKES}, not a path ({path!r}). For the runs of a trace file: "
            f"`for run in loopwatch.read_runs({path!r}): loopwatch.scan(run)` "
            f"(read_runs also yields an InputError for each part it cannot read), or "
            f"`loopwatch scan {path}` on the command line."
        )
    if isinstance(run, InputError):
        return TypeError(
            f"{_TAKES}, not an InputError ({run}): read_runs yields one for each part of "
            "the input it could not read; print or skip it"
        )
    if isinstance(run, Mapping):
        keys = ", ".join(sorted(map(str, run))[:8]) or "none"
        events = run.get("events", _NO_EVENTS)
        has = "no 'events'" if events is _NO_EVENTS else f"'events' of type {type(events).__name__}"
        return TypeError(f"{_TAKES}; this mapping has {has} (its keys: {keys})")
    return TypeError(f"{_TAKES}, not {type(run).__name__}")


def _breakdown(
    findings: list[Finding], occurrences: Iterable[Sequence[int]] | None = None
) -> dict[str, float]:
    """Per-detector sub-scores (1.0 clean ... near 0 severe), multiplied into the score.

    Every reported stop counts, repetitions included (``occurrences`` gives their
    number per merged finding), so merging findings does not change the score.
    """
    counts = (o[0] for o in occurrences) if occurrences is not None else (1 for _ in findings)
    stops: dict[str, int] = {}
    warned: set[str] = set()
    for f, count in zip(findings, counts, strict=True):
        if f.severity is Severity.STOP:
            stops[f.detector] = stops.get(f.detector, 0) + count
        else:
            warned.add(f.detector)
    out = {d: max(_FLOOR, _STOP_SCORE - _EXTRA_STOP * (n - 1)) for d, n in stops.items()}
    for d in warned:
        out.setdefault(d, _WARN_SCORE)
    return out


def score_of(verdict: str, breakdown: Mapping[str, float]) -> float:
    """A run's score: one number that sorts runs by how badly they loop, within the
    band of their verdict, so that any stopped run scores below any warned run, which
    scores below any clean run.

    * ``ok``: 1.0.
    * ``warn``: in (0.5, 0.8]: 0.8 for one detector's warning, lower with more
      detectors (and with stop-level findings under ``on_loop = "warn"``).
    * ``stop``: in [0, 0.4]: 0.4 for one detector's stop, lower with each further stop
      reported and each other detector that fired.

    Inside a band the order comes from ``breakdown`` (a sub-score per detector that
    fired: 0.8 for warnings only, 0.4 for a stop and 0.05 less per further stop, at
    least 0.05), multiplied together. Rounded to 4 decimals.
    """
    if verdict == "ok":
        return 1.0
    product = 1.0
    for value in breakdown.values():
        product *= value
    if verdict == "warn":
        low, high = _WARN_BAND
        return round(low + (high - low) * min(product, _WARN_SCORE) / _WARN_SCORE, 4)
    return round(min(product, _STOP_SCORE), 4)


@lru_cache(maxsize=8)
def _config_for(cwd: str) -> Config:
    return Config.load(start=cwd)


def _discovered_config() -> Config:
    return _config_for(os.getcwd())


def scan(
    run: Mapping[str, Any] | Iterable[Any],
    config: Config | None = None,
    detectors: Iterable[Detector] | None = None,
) -> Report:
    """Scan one recorded run, as a fresh guard replaying it would see it.

    ``run`` is a FORMAT.md run dict (``{"run_id": ..., "events": [...]}``), a
    :class:`~loopwatch.TraceRun` from :func:`~loopwatch.read_runs`, or a list of events;
    anything else (a path included) raises :class:`TypeError` saying so. For the runs
    of a trace file: ``for run in read_runs("traces.jsonl"): scan(run)``.
    ``config`` defaults to the ``loopwatch.toml`` found from the working directory;
    ``detectors`` replaces the configured detector set, as in ``Guard(detectors=...)``.
    """
    return Scanner(config, detectors).scan(run)


# -- many runs, in order, on several processes ---------------------------------------
_CHUNK_EVENTS: Final = 20_000  # events per unit of work sent to a worker process
# On a distributed engine a task also crosses the network and the scheduler: smaller
# tasks balance better over more workers and stay under Dask's 10 MB graph warning.
_ENGINE_CHUNK_EVENTS: Final = 5_000
_worker_scanner: Scanner | None = None


class ScanFailure(InputError):
    """A run that was read but could not be scanned: a loopwatch bug, reported like
    unreadable input (``path:line: reason``) so that one run cannot end the scan."""

    __slots__ = ()


def _init_worker(config: Config) -> None:
    global _worker_scanner
    _worker_scanner = Scanner(config)


def scan_one(scanner: Scanner, run: TraceRun) -> Report | ScanFailure:
    """Scan one run; an exception becomes a ScanFailure for that run alone."""
    try:
        return scanner.scan(run.to_dict())
    except Exception as exc:  # a bug must cost one run, not the rest of the input
        return _failure(run, f"{type(exc).__name__}: {exc}")


def _failure(run: TraceRun, why: str) -> ScanFailure:
    return ScanFailure(
        run.path,
        run.line,
        f"run {run.run_id!r} could not be scanned ({why}); "
        "this is a loopwatch bug, please report it",
    )


def _scan_chunk(runs: list[bytes]) -> list[Report | str]:
    """Worker side: runs arrive as JSON bytes (compact, and unlike pickle of nested
    dicts, bounded in recursion); a run that fails comes back as its error text."""
    scanner = _worker_scanner
    assert scanner is not None
    out: list[Report | str] = []
    for raw in runs:
        try:
            out.append(scanner.scan(orjson.loads(raw)))
        except Exception as exc:
            out.append(f"{type(exc).__name__}: {exc}")
    return out


def _chunks(
    items: Iterator[TraceRun | InputError], events: int = _CHUNK_EVENTS
) -> Iterator[list[TraceRun | InputError]]:
    """Group runs (and errors, kept in place) into chunks of about ``events`` events."""
    chunk: list[TraceRun | InputError] = []
    size = 0
    for item in items:
        chunk.append(item)
        if isinstance(item, TraceRun):
            size += len(item.events) + 1
        if size >= events:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


def _scan_chunk_with(config: Config, runs: list[bytes]) -> list[Report | str]:
    """Worker side on a distributed engine: the configuration travels with the task
    (workers are shared and long-lived, so nothing is installed in them)."""
    global _worker_scanner
    _worker_scanner = Scanner(config)
    return _scan_chunk(runs)


class Executor(Protocol):
    """What a parallel scan needs of an engine: ``submit(fn, *args)`` returning an
    object whose ``result()`` waits for the answer. ``concurrent.futures`` executors
    and a Dask ``distributed.Client`` both are one."""

    def submit(self, fn: Callable[..., Any], /, *args: Any) -> Any: ...


class _FailedTask:
    """A unit of work the engine refused (a process pool broken by a dead worker): its
    result raises, so :func:`_drain` scans the unit in this process instead."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def result(self) -> Any:
        raise self.error


def _submit(executor: Executor, fn: Callable[..., Any], *args: Any) -> Any:
    try:
        return executor.submit(fn, *args)
    except Exception as exc:  # e.g. BrokenProcessPool: later units are scanned here
        what = f"{type(exc).__name__}: {exc}"
        if what not in _POOL_FAILURES:
            _POOL_FAILURES.add(what)
            log.warning(
                "loopwatch: the scan workers failed (%s); the main process scans the rest", what
            )
        return _FailedTask(exc)


@contextmanager
def _process_pool(jobs: int, config: Config) -> Iterator[ProcessPoolExecutor]:
    """Worker processes initialised with the configuration. A ``concurrent.futures``
    pool rather than ``multiprocessing.Pool``: when a worker dies (killed for memory,
    a crash in native code) or its answer cannot be unpickled, the pending results
    raise instead of never arriving, so the scan finishes its units here instead of
    hanging."""
    ctx = multiprocessing.get_context("spawn" if sys.platform == "darwin" else "fork")
    pool = ProcessPoolExecutor(jobs, mp_context=ctx, initializer=_init_worker, initargs=(config,))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


log = logging.getLogger("loopwatch")
_SCANNED_HERE: set[str] = set()  # files whose ranges a worker failed (warned once each)
_POOL_FAILURES: set[str] = set()  # engine failures already warned about


class _Range(NamedTuple):
    """A line-aligned byte range of a native JSON Lines file (traces.sniff.native_ranges);
    ``last``: the file's last range, after which the file's events are reported on."""

    path: str
    start: int
    end: int
    line: int
    last: bool = True


def _range_items(
    scanner: Scanner, path: str, start: int, end: int, line: int
) -> list[InputError | Report | Understanding]:
    return [
        item if isinstance(item, (InputError, Understanding)) else scan_one(scanner, item)
        for item in read_native_range(path, start, end, line)
    ]


def _scan_range(
    config: Config | None, path: str, start: int, end: int, line: int
) -> list[InputError | Report | Understanding]:
    """Worker side: read, decode and scan one range of a native file. A worker that
    cannot see the file (a remote cluster without the input's filesystem) fails the
    task, and the main process reads the range itself (``_drain``)."""
    open(path, "rb").close()  # raises here, not as an input error of the range
    scanner = _worker_scanner if config is None else Scanner(config)
    assert scanner is not None
    return _range_items(scanner, path, start, end, line)


# Bytes of a native file per unit of work: about 2,000-10,000 events of real traces.
_RANGE_BYTES: Final = 2 << 20


def _units(
    paths: Iterable[str], format: str | None, events: int
) -> Iterator[list[TraceRun | InputError] | _Range]:
    """The input as units of work, in order: the ranges of each native JSON Lines file
    (read by the workers), and chunks of runs read here from every other file."""
    columnar_runs: set[str] = set()
    for path in paths:
        files = trace_files(path)
        if not files:
            yield [no_trace_files(path)]
        for file in files:
            ranges = None
            if format in (None, "jsonl", "native") and not is_columnar(file):
                ranges = native_ranges(file, _RANGE_BYTES)
            if ranges is None:
                yield from _chunks(read_file(file, format, columnar_runs), events)
            else:
                for i, (start, end, line) in enumerate(ranges, 1):
                    yield _Range(file, start, end, line, i == len(ranges))


def scan_paths(
    paths: Iterable[str],
    config: Config,
    jobs: int = 1,
    executor: Executor | None = None,
    format: str | None = None,
) -> Iterator[InputError | Report]:
    """Scan trace files in input order, on ``jobs`` processes or on ``executor`` (a
    distributed engine's client): what ``loopwatch scan`` prints.

    The same items as ``scan_stream(read_runs(paths, format), ...)``, but native JSON
    Lines files are read by the workers, a range each, so that the main process only
    finds line boundaries and puts results in order.
    """
    paths = list(paths)
    if executor is None and jobs <= 1:
        yield from scan_stream(read_runs(paths, format), config)
        return
    scanner = Scanner(config)
    if executor is not None:
        units = _units(paths, format, _ENGINE_CHUNK_EVENTS)
        yield from _scan_on(executor, scanner, units, config, max(jobs, 1))
        return
    with _process_pool(jobs, config) as pool:
        units = _units(paths, format, _CHUNK_EVENTS)
        yield from _scan_on(pool, scanner, units, None, jobs)


def scan_stream(
    items: Iterator[TraceRun | InputError],
    config: Config,
    jobs: int = 1,
    executor: Executor | None = None,
) -> Iterator[InputError | Report]:
    """Scan runs in input order, on ``jobs`` processes (or on ``executor``, a
    distributed engine's client), with bounded memory.

    Yields each input error where it occurred and, for each run, a Report or a
    :class:`ScanFailure` (never an exception: one run cannot lose the others). At
    most ``2 * jobs`` chunks are in flight, so memory does not grow with the input.
    A run that cannot travel to a worker as JSON (nesting past orjson's limit) is
    scanned in this process instead, and so is a chunk whose worker failed.
    """
    scanner = Scanner(config)
    if executor is not None:
        units = _chunks(items, _ENGINE_CHUNK_EVENTS)
        yield from _scan_on(executor, scanner, units, config, max(jobs, 1))
        return
    if jobs <= 1:
        for item in items:
            yield item if isinstance(item, InputError) else scan_one(scanner, item)
        return
    with _process_pool(jobs, config) as pool:
        yield from _scan_on(pool, scanner, _chunks(items), None, jobs)


def _scan_on(
    executor: Executor,
    scanner: Scanner,
    units: Iterable[list[TraceRun | InputError] | _Range],
    config: Config | None,
    jobs: int,
) -> Iterator[InputError | Report]:
    """Ship units of work to ``executor`` and yield the results in input order: a
    chunk of runs read here, or a range of a native file that the worker reads
    itself. ``config`` travels with each task unless the workers were initialised
    with it. At most ``2 * jobs`` units are in flight."""
    pending: deque[tuple[list[TraceRun | InputError] | _Range, list[bool], Any]] = deque()
    files: dict[str, Understanding] = {}  # what the ranges of a file said, so far
    for unit in units:
        if isinstance(unit, _Range):
            task = _submit(executor, _scan_range, config, *unit[:4])
            pending.append((unit, [], task))
        else:
            payload: list[bytes] = []
            shipped: list[bool] = []  # per run of the chunk: sent to a worker?
            for item in unit:
                if isinstance(item, TraceRun):
                    try:
                        payload.append(orjson.dumps(item.to_dict()))
                        shipped.append(True)
                    except TypeError:  # too deep for orjson (or not JSON at all)
                        shipped.append(False)
            task = (
                _submit(executor, _scan_chunk, payload)
                if config is None
                else _submit(executor, _scan_chunk_with, config, payload)
            )
            pending.append((unit, shipped, task))
        while len(pending) > 2 * jobs:
            yield from _drain(scanner, *pending.popleft(), files)
    while pending:
        yield from _drain(scanner, *pending.popleft(), files)


def _drain(
    scanner: Scanner,
    chunk: list[TraceRun | InputError] | _Range,
    shipped: list[bool],
    result: Any,
    files: dict[str, Understanding],
) -> Iterator[InputError | Report]:
    if isinstance(chunk, _Range):
        try:
            done: list[InputError | Report | Understanding] = result.result()
        except Exception as exc:  # the worker failed, or cannot see the file: read it here
            if chunk.path not in _SCANNED_HERE:
                _SCANNED_HERE.add(chunk.path)
                log.warning(
                    "loopwatch: a worker could not scan %s (%s: %s); the main process "
                    "reads it instead, which is slower: give the workers the same files",
                    chunk.path,
                    type(exc).__name__,
                    exc,
                )
            done = _range_items(scanner, *chunk[:4])
        for part in done:
            if isinstance(part, Understanding):  # one line per file, after its last range
                files.setdefault(chunk.path, Understanding(chunk.path)).merge(part)
            else:
                yield part
        if chunk.last:
            warning = files.pop(chunk.path, Understanding(chunk.path)).warning()
            if warning is not None:
                yield warning
        return
    try:
        reports: Iterator[Report | str] | None = iter(result.result())
    except Exception:  # the worker or the pipe failed: scan the chunk here instead
        reports = None
    runs = iter(shipped)
    for item in chunk:
        if isinstance(item, InputError):
            yield item
            continue
        if next(runs) and reports is not None:
            got = next(reports)
            yield got if isinstance(got, Report) else _failure(item, got)
        else:
            yield scan_one(scanner, item)
