"""Loop checks for test suites, with no test framework imported.

* :func:`assert_no_loops`: fail a test when recorded runs (a trace file, run dicts,
  :class:`~loopwatch.TraceRun` objects) looped, with a report a person can act on.
* :class:`RecordedGuard` and :class:`LoopRecord`: a guard that keeps its warn, skip and
  stop verdicts, per run, so that a test can be failed with the evidence once the
  agent is done. The pytest plugin (``--loopwatch``, the ``loopwatch`` fixture) gives
  each test one; any other harness can do the same with
  :func:`~loopwatch.integrations.use_guard`.

Both judge a run as ``loopwatch scan`` does (``stop`` when the guard blocked a step:
stopped the run or skipped a call; ``warn`` when it only warned), with one difference:
a stop-severity finding makes the run ``stop`` whatever ``on_loop`` did with it, so a
test suite configured with ``on_loop = "warn"`` (to let agents run on) still fails a
test whose agent a detector was sure had looped.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from .config import Config
from .detectors import Detector
from .findings import Action, Finding, Severity, Verdict
from .guard import Guard
from .scan import Report, Scanner
from .traces import InputError, TraceRun, read_runs
from .traces.jsonl import parse_run

__all__ = [
    "FAIL_ON_CHOICES",
    "LoopRecord",
    "LoopedRun",
    "RecordedGuard",
    "assert_no_loops",
    "reaches",
    "verdict_of",
]

# What fails a test: a run that reached ``warn`` or ``stop``; ``never`` only reports.
FAIL_ON_CHOICES: Final = ("warn", "stop", "never")
_RANK: Final = {"ok": 0, "warn": 1, "stop": 2, "never": 3}
_FINDINGS_SHOWN: Final = 3  # per run, in a report: the top one and two more
_STEPS_SHOWN: Final = 12
_RUNS_SHOWN: Final = 10


def reaches(verdict: str, fail_on: str) -> bool:
    """Whether a run's verdict (``ok``, ``warn``, ``stop``) fails under ``fail_on``."""
    return _RANK[verdict] >= _RANK[fail_on]


def check_fail_on(fail_on: object, where: str = "fail_on") -> str:
    """``fail_on`` itself, or a ValueError naming what is accepted."""
    if fail_on not in FAIL_ON_CHOICES:
        raise ValueError(f"{where} must be one of {', '.join(FAIL_ON_CHOICES)}, not {fail_on!r}")
    return str(fail_on)


# -- recorded traces --------------------------------------------------------------------
def assert_no_loops(
    path_or_runs: str | os.PathLike[str] | Mapping[str, Any] | TraceRun | Iterable[Any],
    fail_on: str = "stop",
    *,
    config: Config | None = None,
    detectors: Iterable[Detector] | None = None,
    format: str | None = None,
) -> list[Report]:
    """Scan recorded runs and raise :class:`AssertionError` if any of them looped.

    ``path_or_runs``: a trace file or folder (any format ``loopwatch scan`` reads), one
    run dict (FORMAT.md) or :class:`~loopwatch.TraceRun`, or a list of them.
    ``fail_on``: ``"stop"`` (default: a run the guard would have stopped) or ``"warn"``
    (any warning). ``config`` defaults to the ``loopwatch.toml`` found from the working
    directory; ``detectors`` replaces the detector set, as in ``Guard(detectors=...)``.

    The message lists each looping run: its id (and ``path:line``), verdict, first warn
    and first stop steps, and its top findings with their evidence steps. Input that
    cannot be read (a missing file, a line that is not a run, no runs at all) raises
    :class:`ValueError` naming ``path:line``, since a check that read nothing would pass
    whatever the agent did. Returns the reports, for further assertions.
    """
    if fail_on not in ("warn", "stop"):
        raise ValueError(f"fail_on must be 'warn' or 'stop', not {fail_on!r}")
    runs, source = _runs_of(path_or_runs, format)
    scanner = Scanner(config, detectors)
    reports = [scanner.scan(run.to_dict()) for run in runs]
    looped = [
        (run, r) for run, r in zip(runs, reports, strict=True) if reaches(verdict_of(r), fail_on)
    ]
    if looped:
        lines = [
            f"loopwatch: {len(looped)} of {_plural(len(reports), 'run')} in {source} "
            f"looped (fail_on={fail_on!r}):"
        ]
        for run, report in looped[:_RUNS_SHOWN]:
            where = f"{run.path}:{run.line}" if run.path and run.line is not None else ""
            lines += describe_run(
                report.run_id,
                verdict_of(report),
                report.first_warn,
                report.first_stop,
                _top_first(report),
                where=where,
            )
        if len(looped) > _RUNS_SHOWN:
            lines.append(f"... and {len(looped) - _RUNS_SHOWN} more")
        raise AssertionError("\n".join(lines))
    return reports


def _runs_of(given: Any, format: str | None) -> tuple[list[TraceRun], str]:
    """The runs to check and how to name where they came from; ValueError or TypeError
    for input that is not runs."""
    if isinstance(given, (str, os.PathLike)):
        path = os.fspath(given)
        runs: list[TraceRun] = []
        errors: list[str] = []
        for item in read_runs(path, format):
            if isinstance(item, InputError):
                errors.append(str(item))
            else:
                runs.append(item)
        if errors:
            more = f"\n... and {len(errors) - 5} more" if len(errors) > 5 else ""
            shown = "\n".join(errors[:5]) + more
            raise ValueError(f"loopwatch: cannot check {path}: unreadable input:\n{shown}")
        if not runs:
            raise ValueError(f"loopwatch: no runs in {path}: nothing to check")
        return runs, path
    if isinstance(given, (Mapping, TraceRun)):
        given = [given]
    elif isinstance(given, (bytes, bytearray)) or not isinstance(given, Iterable):
        raise TypeError(
            "assert_no_loops needs a trace file path, a run dict, a TraceRun or a list of "
            f"runs, not {type(given).__name__}"
        )
    runs = []
    for index, item in enumerate(given):
        if isinstance(item, TraceRun):
            runs.append(item)
            continue
        parsed = parse_run(item) if isinstance(item, Mapping) else None
        if not isinstance(parsed, TraceRun):
            reason = (
                parsed.reason
                if isinstance(parsed, InputError)
                else f"expected a run dict or a TraceRun, got {type(item).__name__}"
            )
            raise ValueError(f"loopwatch: runs[{index}]: {reason}")
        runs.append(parsed)
    if not runs:
        raise ValueError("loopwatch: no runs given: nothing to check")
    return runs, "the runs given"


def verdict_of(report: Report) -> str:
    """The report's verdict, ``stop`` also when a detector was sure but ``on_loop``
    only warned (see the module's docstring)."""
    if report.verdict != "stop" and any(f.severity is Severity.STOP for f in report.findings):
        return "stop"
    return report.verdict


def _top_first(report: Report) -> list[Finding]:
    top = report.top_finding
    if top is None:
        return []
    return [top, *(f for f in report.findings if f is not top)]


# -- the evidence, as text ----------------------------------------------------------------
def describe_run(
    run_id: str,
    verdict: str,
    first_warn: int | None,
    first_stop: int | None,
    findings: Sequence[Finding],
    where: str = "",
) -> list[str]:
    """A looping run in a few lines: its id, verdict and first warn/stop steps, then
    its findings (top first) with the steps they rest on."""
    steps = []
    if first_warn is not None:
        steps.append(f"first warn at step {first_warn}")
    if first_stop is not None:
        steps.append(f"first stop at step {first_stop}")
    head = f"  run {run_id!r}" + (f" ({where})" if where else "") + f": {verdict}"
    lines = [head + (f", {', '.join(steps)}" if steps else "")]
    for finding in findings[:_FINDINGS_SHOWN]:
        lines.append(f"    {describe_finding(finding)}")
    if len(findings) > _FINDINGS_SHOWN:
        lines.append(f"    ... and {_plural(len(findings) - _FINDINGS_SHOWN, 'more finding')}")
    return lines


def describe_finding(finding: Finding) -> str:
    """``detector (severity) at step N, evidence steps a, b, c: message``."""
    shown = ", ".join(str(s) for s in finding.steps[:_STEPS_SHOWN])
    if len(finding.steps) > _STEPS_SHOWN:
        shown += f", ... ({len(finding.steps)} steps)"
    evidence = f", evidence steps {shown}" if shown else ""
    where = f"{finding.detector} ({finding.severity}) at step {finding.step}{evidence}"
    return f"{where}: {finding.message}"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


# -- a guard that keeps its verdicts -----------------------------------------------------
class LoopedRun:
    """What the guards of one test said about one run: its verdict (``warn`` or
    ``stop``, as the scan would say it), where it first warned and first stopped, and
    each distinct finding, first seen first."""

    __slots__ = ("findings", "first_stop", "first_warn", "run_id", "verdict")

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id
        self.verdict = "ok"
        self.first_warn: int | None = None
        self.first_stop: int | None = None
        self.findings: dict[tuple[str, Severity, str], Finding] = {}

    def add(self, verdict: Verdict) -> None:
        if self.first_warn is None:
            self.first_warn = verdict.step
        sure = any(f.severity is Severity.STOP for f in verdict.findings)
        if sure or verdict.action is Action.STOP or verdict.action is Action.SKIP:
            self.verdict = "stop"
            if self.first_stop is None:
                self.first_stop = verdict.step
        elif self.verdict == "ok":
            self.verdict = "warn"
        for finding in verdict.findings:
            # a guard repeats a stop at every later step: one entry per loop found
            key = (finding.detector, finding.severity, finding.pattern or finding.message)
            if key not in self.findings and len(self.findings) < 100:
                self.findings[key] = finding

    def top_first(self) -> list[Finding]:
        found = list(self.findings.values())
        stops = [f for f in found if f.severity is Severity.STOP]
        top = stops[0] if stops else found[0] if found else None
        return [] if top is None else [top, *(f for f in found if f is not top)]

    def describe(self) -> list[str]:
        return describe_run(
            self.run_id, self.verdict, self.first_warn, self.first_stop, self.top_first()
        )


class LoopRecord:
    """The warn, skip and stop verdicts the guards of one test gave, by run.

    Thread-safe (an agent's tools may run in threads) and bounded (a looping agent
    under ``on_loop="warn"`` can be warned at every step; each run keeps its first
    and worst verdicts and its distinct findings, not every verdict).
    """

    def __init__(self) -> None:
        self._runs: dict[str, LoopedRun] = {}
        self._lock = threading.Lock()

    def add(self, run_id: str, verdict: Verdict) -> None:
        """Keep a verdict (an ``ok`` one is ignored)."""
        if verdict.action is Action.OK:
            return
        with self._lock:
            run = self._runs.get(run_id)
            if run is None:
                if len(self._runs) >= 10_000:
                    return
                run = self._runs[run_id] = LoopedRun(run_id)
            run.add(verdict)

    def runs(self) -> list[LoopedRun]:
        """The runs that were warned or stopped, in the order they first were."""
        with self._lock:
            return list(self._runs.values())

    @property
    def verdict(self) -> str:
        """The worst verdict of any run: ``ok``, ``warn`` or ``stop``."""
        worst = "ok"
        for run in self.runs():
            if _RANK[run.verdict] > _RANK[worst]:
                worst = run.verdict
        return worst

    def detectors(self) -> list[str]:
        """The detectors that fired, in the order they first did."""
        names: dict[str, None] = {}
        for run in self.runs():
            for finding in run.top_first():
                names.setdefault(finding.detector)
        return list(names)

    def report(self, fail_on: str) -> str:
        """The evidence of every run that was warned or stopped, as text."""
        runs = self.runs()
        looped = [r for r in runs if r.verdict != "ok"]
        which = f"run {looped[0].run_id!r}" if len(looped) == 1 else f"{len(looped)} runs"
        verdict = self.verdict
        lines = [f"[loopwatch] the agent looped: {which} reached {verdict} (fail_on={fail_on!r})"]
        for run in looped[:_RUNS_SHOWN]:
            lines += run.describe()
        if len(looped) > _RUNS_SHOWN:
            lines.append(f"  ... and {len(looped) - _RUNS_SHOWN} more runs")
        return "\n".join(lines)


class RecordedGuard(Guard):
    """A :class:`~loopwatch.Guard` that also keeps its warn, skip and stop verdicts in
    :attr:`record` (shared when several guards serve one test). The same answers as
    a plain guard: recording never changes a verdict."""

    def __init__(
        self, config: Config | None = None, *, record: LoopRecord | None = None, **options: Any
    ) -> None:
        super().__init__(config, **options)
        self.record = record if record is not None else LoopRecord()

    def observe(self, run_id: Any, event: Any) -> Verdict:
        """:meth:`Guard.observe`, and keep the verdict if it is not ``ok``."""
        verdict = super().observe(run_id, event)
        if verdict.action is not Action.OK:
            self.record.add(str(run_id), verdict)
        return verdict

    async def aobserve(self, run_id: Any, event: Any) -> Verdict:
        """:meth:`Guard.aobserve`, and keep the verdict if it is not ``ok``."""
        verdict = await super().aobserve(run_id, event)
        if verdict.action is not Action.OK:
            self.record.add(str(run_id), verdict)
        return verdict
