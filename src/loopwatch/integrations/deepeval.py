"""deepeval: ``LoopwatchMetric``, a trace metric scored by loopwatch's detectors.

::

    from deepeval.tracing import observe
    from loopwatch.integrations.deepeval import LoopwatchMetric

    @observe(type="agent", metrics=[LoopwatchMetric()])
    def my_agent(question): ...

The metric reads the nested span dict deepeval gives trace-aware metrics
(``test_case._trace_dict``), turns it into events with
:func:`loopwatch.traces.deepeval.span_to_events` and scans them with the same
detectors as the runtime guard. The metric passes when ``score >= threshold``
(0.5 by default). Unlike deepeval's own ``AgentLoopDetectionMetric``, six
identical calls returning the same result fail at the default threshold: the
guard would have stopped that run at the 5th.

The score is the scan's verdict first, its score second: a clean run scores
1.0, a run the guard would have warned about scores in [0.3, 0.5), one it would
have stopped in [0, 0.3), each band ordered by the scan's own score (1.0 clean
... 0.0 severe). Why not the scan's score as it is: that score multiplies
per-detector sub-scores, so one stop-level finding can still leave it above
deepeval's 0.5 pass line, and a metric that passes a run loopwatch would have
stopped says the opposite of the guard. The bands make ``threshold`` mean what a
deepeval user expects: 0.5 fails anything suspicious, 0.3 fails what the guard
would stop. ``report.score`` keeps the scan's own score (the one ``loopwatch
scan --json`` prints).
"""

from __future__ import annotations

from typing import Any, Final

try:
    from deepeval.metrics import BaseMetric
    from deepeval.metrics.utils import construct_verbose_logs  # both 3.x and 4.x export it here
    from deepeval.test_case import LLMTestCase
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "deepeval", "deepeval") from _exc

from ..config import Config
from ..findings import Finding, Severity
from ..scan import Report, Scanner
from ..traces.deepeval import span_to_events

__all__ = ["LoopwatchMetric", "metric_score"]

_REASONS_MAX = 4


class LoopwatchMetric(BaseMetric):  # type: ignore[no-untyped-call]  # deepeval's hook is untyped
    """Loop detection over a deepeval trace, deterministic and free (no LLM).

    Parameters: ``threshold`` (pass when the score is at least this), ``config`` (a
    :class:`loopwatch.Config`; default: ``loopwatch.toml`` if found, else the
    defaults), and configuration keywords that override it
    (``repeated_call={"stop_at": 8}``...). ``strict_mode`` passes only a clean
    trace (threshold 1.0; any finding scores 0).
    """

    def __init__(
        self,
        threshold: float = 0.5,
        config: Config | None = None,
        *,
        include_reason: bool = True,
        strict_mode: bool = False,
        async_mode: bool = True,
        verbose_mode: bool = False,
        **options: Any,
    ) -> None:
        cfg = config if config is not None else Config.load()
        if options:
            cfg = cfg.with_options(options)
        self.config = cfg
        self.scanner = Scanner(cfg)
        self.threshold = 1.0 if strict_mode else threshold
        self.include_reason = include_reason
        self.strict_mode = strict_mode
        self.async_mode = async_mode
        self.verbose_mode = verbose_mode
        self.requires_trace = True
        self.evaluation_model = None
        self.evaluation_cost = 0.0
        self.report: Report | None = None
        self.score_breakdown: dict[str, float] = {}

    # deepeval calls measure(test_case, _show_indicator=..., _in_component=..., ...).
    def measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        return self._calculate(test_case)

    async def a_measure(self, test_case: LLMTestCase, *args: Any, **kwargs: Any) -> float:
        # A scan is microseconds per event and does no I/O: nothing to await.
        return self._calculate(test_case)

    def is_successful(self) -> bool:
        score, threshold = self.score, self.threshold
        self.success = (
            self.error is None
            and score is not None
            and threshold is not None
            and score >= threshold
        )
        return self.success

    @property
    def __name__(self) -> str:
        return "Loopwatch Loop Detection"

    # -- the work -----------------------------------------------------------------------
    def _calculate(self, test_case: LLMTestCase) -> float:
        self.evaluation_cost = 0.0
        trace = getattr(test_case, "_trace_dict", None)
        if not isinstance(trace, dict):
            # The same answer deepeval's own trace metric gives: no trace, no pass.
            self.report = None
            self.score = 0.0
            self.score_breakdown = {}
            self.reason = (
                "No trace data found. This metric requires trace data from @observe "
                "(test_case._trace_dict)."
            )
            self.success = False
            self.verbose_logs = ""
            return 0.0
        events = span_to_events(trace)
        report = self.scanner.scan(events, run_id=str(trace.get("name") or ""))
        self.report = report
        score = metric_score(report)
        if self.strict_mode and score < 1.0:
            score = 0.0
        self.score = score
        breakdown = {det.name: 1.0 for det in self.scanner.engine.detectors}
        breakdown.update(report.breakdown)
        self.score_breakdown = breakdown
        self.reason = _reason(report) if self.include_reason else None
        self.is_successful()
        self.verbose_logs = construct_verbose_logs(
            self,
            steps=[
                f"Events: {len(events)} from the span tree",
                f"First warning at event {report.first_warn}, first stop at {report.first_stop}",
                f"Findings: {[f.to_dict() for f in report.findings]}",
                f"Metrics: {report.metrics}",
                f"Score: {self.score} (verdict {report.verdict}, scan score "
                f"{report.score}; threshold {self.threshold})",
            ],
        )
        return score


# Score bands by verdict (see the module docstring): [low, high) for warn and stop.
WARN_BAND: Final = (0.3, 0.5)
STOP_BAND: Final = (0.0, 0.3)
_BELOW: Final = 0.001  # keeps a band's top out of the band above


def metric_score(report: Report) -> float:
    """The metric's score for a scan report: 1.0 when the guard would not have warned,
    in ``WARN_BAND`` when it would have warned, in ``STOP_BAND`` when it would have
    stopped; within a band, the scan's score places the run."""
    if report.verdict == "ok" and not report.findings:
        return 1.0
    low, high = STOP_BAND if report.verdict == "stop" else WARN_BAND
    if report.verdict == "ok":  # findings below warn level: just under a clean run
        low, high = WARN_BAND[1], 1.0
    share = min(max(report.score, 0.0), 1.0)
    return round(low + (high - low - _BELOW) * share, 4)


def _reason(report: Report) -> str:
    """The findings that cost the score, by detector, strongest first."""
    if not report.findings:
        return "No loop patterns detected."
    strongest: dict[str, Finding] = {}
    for finding in report.findings:
        known = strongest.get(finding.detector)
        if known is None or (
            finding.severity is Severity.STOP and known.severity is not Severity.STOP
        ):
            strongest[finding.detector] = finding
    ordered = sorted(strongest.values(), key=lambda f: (f.severity is not Severity.STOP, f.step))
    parts = [
        f"{f.detector} ({f.severity.value} at event {f.step}): {f.message}"
        for f in ordered[:_REASONS_MAX]
    ]
    if len(ordered) > _REASONS_MAX:
        parts.append(f"... and {len(ordered) - _REASONS_MAX} more detectors.")
    where = (
        f"A runtime guard would have stopped this run at event {report.first_stop}. "
        if report.first_stop is not None
        else f"A runtime guard would have warned at event {report.first_warn}. "
    )
    return where + " ".join(parts)
