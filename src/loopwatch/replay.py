"""The scan's per-event loop: a recorded run's events through the engine and the policy,
with the iteration metrics and the merged findings of its report.

Why a module of its own: this loop runs once per event of every scanned run, and
``scan.py`` is not compiled (it holds the process pools, the report dataclass and the
file handling, none of it per event). Interpreted, the loop and the metrics read the
attributes of each compiled :class:`~loopwatch.events.Event` by name; compiled with the
engine they call (a module of ``_build.COMPILED``), a scan of short events runs about a
tenth faster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

from .engine import Engine
from .events import MODEL, TOOL_CALL, Event, fold_case_space
from .findings import Finding, Severity
from .policy import Policy
from .state import RunState

__all__ = ["Merger", "Metrics", "Replay", "replay"]

_BAD_OUTCOMES: Final = frozenset({"failed", "cancelled"})


class Metrics:
    """Needlr-style iteration metrics, accumulated in the same single pass."""

    __slots__ = (
        "degenerate",
        "empty",
        "iterations",
        "last_text",
        "last_was_final",
        "pending_empty",
        "prev_key",
        "run",
        "useful",
    )  # fmt: skip

    def __init__(self) -> None:
        self.iterations = 0
        self.useful = 0  # iterations with text or tool calls
        self.empty = 0  # iterations with neither
        self.pending_empty = False  # current iteration has no text yet and no call
        self.prev_key: str | None = None
        self.degenerate = False
        self.last_was_final = False

    def add(self, ev: Event) -> None:
        if ev.kind == MODEL:
            if self.pending_empty:
                self.empty += 1
            self.iterations += 1
            if not ev.text_known:
                # not recorded: neither empty nor a repeat of the previous output
                self.useful += 1
                self.prev_key = None
                self.pending_empty = False
                self.last_was_final = True
                return
            has_text = bool(ev.text.strip())
            if has_text:
                self.useful += 1
                text = ev.text
                prev = self.prev_key
                if (
                    not self.degenerate
                    and prev is not None
                    and (text == prev or fold_case_space(text) == fold_case_space(prev))
                ):
                    self.degenerate = True
                self.prev_key = text
            self.pending_empty = not has_text
            self.last_was_final = has_text
        elif ev.kind == TOOL_CALL:
            if self.pending_empty:
                self.pending_empty = False
                self.useful += 1
            self.last_was_final = False
            self.prev_key = None

    def result(self, max_iterations: int | None, outcome: str | None = None) -> dict[str, Any]:
        empty = self.empty + (1 if self.pending_empty else 0)
        hit = max_iterations is not None and self.iterations >= max_iterations
        # A run that ended on an answer but is recorded as failed or cancelled did not
        # terminate coherently; without a recorded outcome, the last output decides.
        ended_badly = outcome in _BAD_OUTCOMES
        return {
            "iteration_count": self.iterations,
            "empty_outputs": empty,
            "terminated_coherently": self.last_was_final and not hit and not ended_badly,
            "efficiency_ratio": round(self.useful / self.iterations, 4) if self.iterations else 1.0,
            "degenerate_loop": self.degenerate,
            "max_iterations_hit": hit,
            "outcome": outcome,
        }


class Merger:
    """Folds repeated findings into one per (detector, pattern, severity), in order of
    first appearance, counting them and keeping the step of the last one."""

    __slots__ = ("findings", "index", "occurrences")

    def __init__(self) -> None:
        self.findings: list[Finding] = []
        self.occurrences: list[list[int]] = []  # [count, last step], aligned with findings
        self.index: dict[tuple[str, str, Severity], int] = {}

    def add(self, found: Iterable[Finding]) -> None:
        for f in found:
            key = (f.detector, f.pattern, f.severity)
            at = self.index.get(key)
            if at is None:
                self.index[key] = len(self.findings)
                self.findings.append(f)
                self.occurrences.append([1, f.step])
            else:
                seen = self.occurrences[at]
                seen[0] += 1
                seen[1] = f.step


class Replay:
    """What :func:`replay` found in a run: its metrics, its merged findings, the steps
    of its first warning and first stop (None: none), and its number of events."""

    __slots__ = ("events", "first_stop", "first_warn", "merged", "metrics")

    def __init__(self) -> None:
        self.metrics = Metrics()
        self.merged = Merger()
        self.first_warn: int | None = None
        self.first_stop: int | None = None
        self.events = 0


def replay(engine: Engine, policy: Policy, state: RunState, events: Iterable[Any]) -> Replay:
    """Feed a run's events (FORMAT.md dicts or :class:`Event`; anything else is an event
    of no known kind) to ``engine`` and ``policy`` on ``state``, as a guard replaying the
    run would, in order."""
    out = Replay()
    metrics = out.metrics
    merged = out.merged
    # the engine's method, looked up once: Engine is a plain Python class (an instance
    # may replace its step), so each ``engine.step(...)`` was a lookup by name on the
    # instance and its class, about 500 instructions an event
    step_of = engine.step
    n = 0
    for raw in events:
        if type(raw) is dict:  # what a trace reader gives, without the ABC check below
            ev = Event.from_dict(raw)
        elif isinstance(raw, Event):
            ev = raw
        elif isinstance(raw, Mapping):
            ev = Event.from_dict(raw)
        else:
            ev = Event.from_dict({})
        step = n
        n += 1
        metrics.add(ev)
        found = step_of(state, ev)
        if not found:
            continue
        verdict = policy.decide(step, ev.kind, found, state)
        merged.add(verdict.findings)
        if out.first_warn is None:
            out.first_warn = step
        if out.first_stop is None and policy.blocks(verdict):
            out.first_stop = step
    out.events = n
    return out
