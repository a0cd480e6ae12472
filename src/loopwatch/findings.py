"""What detectors report (Finding) and what the guard answers (Verdict)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

__all__ = ["Action", "Finding", "Severity", "Verdict"]


class Severity(str, Enum):
    """How sure a detector is that the run loops: ``warn`` (suspicious) or ``stop``."""

    WARN = "warn"
    STOP = "stop"

    def __str__(self) -> str:
        return self.value


class Action(str, Enum):
    """What the guard tells the agent loop to do with this step."""

    OK = "ok"
    WARN = "warn"  # inject the message into the model's next request
    SKIP = "skip"  # do not execute this tool call; return the message as its result
    STOP = "stop"  # end the run

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, slots=True)
class Finding:
    """One detector's evidence that the run is looping.

    ``step`` is the event index at which the detector fired; ``steps`` are the
    event indices the evidence rests on; ``pattern`` identifies the repeated
    thing (a call key, an error key...) so a warning is issued once per pattern.

    ``decisive``: a stop that needs no warning first (:class:`~loopwatch.policy.Policy`
    escalates every other stop: told first, stopped when the agent persists). The
    evidence is overwhelming on its own (one output chanting a sentence ten times), or
    it is a limit the user set (a budget).
    """

    detector: str
    severity: Severity
    step: int
    steps: tuple[int, ...]
    message: str
    pattern: str = ""
    decisive: bool = False

    def __init__(
        self,
        detector: str,
        severity: Severity,
        step: int,
        steps: tuple[int, ...],
        message: str,
        pattern: str = "",
        decisive: bool = False,
    ) -> None:
        # What @dataclass would write for a frozen class (it keeps an __init__ the class
        # has), written here so that the compiled build compiles it: the generated one
        # is interpreted, about 10k instructions a finding, and a looping run makes one
        # at most steps.
        setter = object.__setattr__
        setter(self, "detector", detector)
        setter(self, "severity", severity)
        setter(self, "step", step)
        setter(self, "steps", steps)
        setter(self, "message", message)
        setter(self, "pattern", pattern)
        setter(self, "decisive", decisive)

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through the constructor: reports carrying findings are pickled
        # between processes (scan --jobs, dask), and the compiled build's default
        # would set the fields of a frozen instance one by one, which it refuses.
        return (
            Finding,
            (
                self.detector,
                self.severity,
                self.step,
                self.steps,
                self.message,
                self.pattern,
                self.decisive,
            ),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "detector": self.detector,
            "severity": self.severity.value,
            "step": self.step,
            "steps": list(self.steps),
            "message": self.message,
        }


class Verdict:
    """The guard's answer for one observed event.

    ``message`` is the text to show the model (warn), to return as the tool's
    result (skip), or to explain the stop. ``state_available`` is False when the
    store could not be reached and the guard let the step through unexamined.
    ``extra`` holds what a particular answer adds (an error, a state reset).

    A plain slotted class rather than a frozen dataclass: one is built for every
    observed event, and a frozen dataclass's ``__init__`` (six ``object.__setattr__``
    calls and a default factory) cost 0.8 us of a step; this one costs 0.2 us. Treat
    it as read-only.
    """

    __slots__ = ("_extra", "action", "findings", "message", "state_available", "step")

    def __init__(
        self,
        action: Action,
        step: int,
        findings: tuple[Finding, ...] = (),
        message: str | None = None,
        state_available: bool = True,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.action = action
        self.step = step
        self.findings = findings
        self.message = message
        self.state_available = state_available
        self._extra = extra

    @property
    def extra(self) -> dict[str, Any]:
        """What this answer adds (empty for most): made on first use, because most
        verdicts are never asked and a dict per observed event costs 50 ns."""
        extra = self._extra
        if extra is None:
            extra = self._extra = {}
        return extra

    def __reduce__(self) -> tuple[Any, ...]:
        # Rebuilt through the constructor in both builds (a compiled class is not
        # made without its arguments).
        return (
            Verdict,
            (
                self.action,
                self.step,
                self.findings,
                self.message,
                self.state_available,
                self._extra,
            ),
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Verdict) and _verdict_fields(self) == _verdict_fields(other)

    __hash__ = None  # type: ignore[assignment]  # mutable ``extra``, as the dataclass was

    def __repr__(self) -> str:
        return (
            f"Verdict(action={self.action!r}, step={self.step!r}, findings={self.findings!r}, "
            f"message={self.message!r}, state_available={self.state_available!r}, "
            f"extra={self.extra!r})"
        )

    @property
    def ok(self) -> bool:
        return self.action is Action.OK

    @property
    def should_stop(self) -> bool:
        return self.action is Action.STOP

    @property
    def should_skip(self) -> bool:
        return self.action is Action.SKIP


def _verdict_fields(v: Verdict) -> tuple[Any, ...]:
    return (v.action, v.step, v.findings, v.message, v.state_available, v.extra)
