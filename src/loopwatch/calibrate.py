"""Calibration: choose stop thresholds from runs the user considers healthy.

Given healthy runs and a false-stop budget (the fraction of those runs a guard may
stop), :func:`calibrate` first raises the stop threshold of whichever detector
stops the most healthy runs until the budget is met, then lowers each threshold
again as far as the budget allows, so the detectors stay as sensitive as the user's
own traffic permits. Every candidate is judged by re-scanning the runs with the
real engine: no model of the detectors, no shortcut that could disagree with them.

The rate it reports comes with a Wilson score upper bound: 0 stops in 30 runs
means "probably under 11%", not "0%".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .config import Config
from .findings import Severity
from .scan import Scanner

__all__ = ["Calibration", "calibrate", "wilson_upper"]

# (detector, parameter) that decides when each detector stops, with the lowest value
# calibration may choose (below it a detector would stop on noise) and the highest
# (past it the detector is effectively off, which calibration reports instead).
_STOP_PARAMS: dict[str, tuple[str, int, int]] = {
    "repeated_call": ("stop_at", 3, 50),
    "cycle": ("stop_repeats", 3, 30),
    "error_loop": ("stop_at", 3, 50),
    "no_progress": ("stop_at", 4, 100),
    "stagnation": ("stop_at", 3, 30),
    "chanting": ("stop_at", 6, 200),
    "futility": ("stop_at", 3, 50),
    "restated_reply": ("stop_at", 3, 30),
    "no_effect": ("attempts", 2, 20),
    "wait_budget": ("max_attempts", 5, 1000),
    "recursion": ("stop_at", 2, 20),
    "iteration_cap": ("max_iterations", 10, 100_000),
}
_TOOL_PARAM = ("error_loop", "tool_stop_at", 3, 100)


def wilson_upper(stops: int, runs: int, z: float = 1.96) -> float:
    """Upper end of the 95% Wilson score interval for a rate of ``stops`` in ``runs``."""
    if runs == 0:
        return 1.0
    p = stops / runs
    denom = 1 + z * z / runs
    centre = p + z * z / (2 * runs)
    margin = z * math.sqrt(p * (1 - p) / runs + z * z / (4 * runs * runs))
    return min(1.0, (centre + margin) / denom)


@dataclass
class Calibration:
    """The outcome: the configuration, what changed, and the rates before and after."""

    config: Config
    changes: dict[str, tuple[Any, Any]]  # "detector.param" -> (before, after)
    runs: int
    stops_before: int
    stops_after: int
    disabled: list[str] = field(default_factory=list)

    @property
    def rate_after(self) -> float:
        return self.stops_after / self.runs if self.runs else 0.0

    @property
    def upper_after(self) -> float:
        return wilson_upper(self.stops_after, self.runs)

    def summary(self) -> str:
        lines = [
            f"healthy runs: {self.runs}",
            f"stopped before: {self.stops_before} ({self._pct(self.stops_before)})",
            f"stopped after:  {self.stops_after} ({self._pct(self.stops_after)}; 95% upper "
            f"bound {100 * self.upper_after:.1f}%)",
        ]
        if not self.changes:
            lines.append("no threshold needed to change")
        for key, (old, new) in self.changes.items():
            lines.append(f"  {key}: {old} -> {new}")
        for name in self.disabled:
            lines.append(f"  {name}: could not meet the budget within its range, disabled")
        return "\n".join(lines)

    def _pct(self, n: int) -> str:
        return f"{100 * n / self.runs:.1f}%" if self.runs else "-"

    def to_toml(self) -> str:
        """The chosen configuration as a loopwatch.toml (only what differs from defaults)."""
        out = [
            "# loopwatch.toml written by `loopwatch calibrate`",
            f"# healthy runs: {self.runs}; stopped after calibration: {self.stops_after} "
            f"(95% upper bound {100 * self.upper_after:.1f}%)",
        ]
        if self.config.on_loop != "stop":
            out.append(f'on_loop = "{self.config.on_loop}"')
        for section, values in sorted(self.config.sections.items()):
            out.append("")
            out.append(f"[{section}]")
            for k, v in values.items():
                if isinstance(v, bool):
                    out.append(f"{k} = {'true' if v else 'false'}")
                elif v is None:
                    out.append(f"{k} = 0")
                elif isinstance(v, (int, float)):
                    out.append(f"{k} = {v}")
        return "\n".join(out) + "\n"


def _stopping(
    runs: Sequence[dict[str, Any]], config: Config
) -> tuple[int, dict[tuple[str, str], int]]:
    """How many runs the configuration stops, and which (detector, param) stopped them."""
    scanner = Scanner(config)
    stopped = 0
    blame: dict[tuple[str, str], int] = {}
    for run in runs:
        report = scanner.scan(run)
        if report.first_stop is None:
            continue
        stopped += 1
        for f in report.findings:
            if f.severity is Severity.STOP and f.step == report.first_stop:
                if f.detector == "error_loop" and f.pattern.startswith("tool:"):
                    key = (_TOOL_PARAM[0], _TOOL_PARAM[1])
                elif f.detector in _STOP_PARAMS:
                    key = (f.detector, _STOP_PARAMS[f.detector][0])
                else:
                    continue
                blame[key] = blame.get(key, 0) + 1
                break
    return stopped, blame


def _bounds(detector: str, param: str) -> tuple[int, int]:
    if (detector, param) == (_TOOL_PARAM[0], _TOOL_PARAM[1]):
        return _TOOL_PARAM[2], _TOOL_PARAM[3]
    return _STOP_PARAMS[detector][1], _STOP_PARAMS[detector][2]


def _current(config: Config, detector: str, param: str) -> int | None:
    value = config.to_dict()[detector].get(param)
    return None if value is None else int(value)


def _bump(value: int, up: bool) -> int:
    """Next candidate: steps of one for small counts, about 20% for large ones."""
    step = max(1, value // 5)
    return value + step if up else max(1, value - step)


def calibrate(
    runs: Sequence[dict[str, Any]],
    target_false_stop: float = 0.01,
    base: Config | None = None,
    progress: Callable[[str], None] | None = None,
) -> Calibration:
    """Choose stop thresholds so at most ``target_false_stop`` of ``runs`` are stopped."""
    config = (base or Config()).with_options({})
    say = progress or (lambda _msg: None)
    n = len(runs)
    budget = math.floor(target_false_stop * n + 1e-9)
    before, blame = _stopping(runs, config)
    stopped = before
    changes: dict[str, tuple[Any, Any]] = {}
    disabled: list[str] = []
    original = {(d, p): _current(config, d, p) for d, (p, _, _) in _STOP_PARAMS.items()} | {
        (_TOOL_PARAM[0], _TOOL_PARAM[1]): _current(config, _TOOL_PARAM[0], _TOOL_PARAM[1])
    }

    # 1. Loosen the worst offender until the budget is met.
    while stopped > budget and blame:
        (detector, param), _count = max(blame.items(), key=lambda kv: kv[1])
        value = _current(config, detector, param)
        low, high = _bounds(detector, param)
        new = high + 1 if value is None else _bump(value, up=True)
        if new > high:
            config.update({detector: {"enabled": False}})
            disabled.append(detector)
            say(f"{detector}: disabled")
        else:
            config.update({detector: {param: max(new, low)}})
            say(f"{detector}.{param} -> {new}")
        stopped, blame = _stopping(runs, config)

    # 2. Tighten each threshold again while the budget still holds.
    for (detector, param), first in original.items():
        if detector in disabled or first is None:
            continue
        low, _high = _bounds(detector, param)
        while True:
            value = _current(config, detector, param)
            if value is None or value <= low or value <= first:
                break
            trial = config.with_options({detector: {param: max(low, _bump(value, up=False))}})
            trial_stopped, _ = _stopping(runs, trial)
            if trial_stopped > budget:
                break
            config, stopped = trial, trial_stopped

    for key, first in original.items():
        now = None if key[0] in disabled else _current(config, *key)
        if now != first:
            changes[f"{key[0]}.{key[1]}"] = (first, now if key[0] not in disabled else "off")
    stopped, _ = _stopping(runs, config)
    return Calibration(config, changes, n, before, stopped, disabled)
