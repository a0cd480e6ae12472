"""Cycle: a sequence of calls that keeps coming back, like search -> fetch -> search."""

from __future__ import annotations

from typing import Any

from ..events import TOOL_CALL
from ..findings import Finding, Severity
from .base import C_NAME, C_NORM, C_NOVEL, C_RESULT, C_STEP, Context, Detector, severity_for


class Cycle(Detector):
    """A sequence of 2..``max_period`` calls repeating as a whole.

    Compares each position with the same position one period earlier, on the
    normalised call key and the result key (``level="call"``, the default): the
    cycle must bring back the same calls *and* the same results, so a research
    loop whose queries or pages change, or an edit/test cycle whose test results
    move, is not a cycle. A call whose result is not yet known matches on its key.

    ``level="name"`` compares tool names only (deer-flow's tool-name cycle layer).
    It fires on legitimate research and edit/test cycles, so it is not in the
    default set; add ``Cycle(level="name", warn_repeats=5, stop_repeats=None)`` if
    you want it as a soft signal.

    A cycle of period 1 is the same call repeated: :class:`RepeatedCall` reports it.

    Defaults: warn when the cycle has come round 3 times, stop at 4 (deer-flow's
    cycle warn 3 / stop 4); ``max_period`` 6 covers every cycle seen in the corpus
    runs labelled as loops.
    """

    name = "cycle"
    kinds = frozenset({TOOL_CALL})

    def __init__(
        self,
        max_period: int = 6,
        warn_repeats: int = 3,
        stop_repeats: int | None = 4,
        level: str = "call",
    ) -> None:
        if level not in ("call", "name"):
            raise ValueError(f"Cycle level must be 'call' or 'name', not {level!r}")
        if max_period < 2:
            raise ValueError("Cycle max_period must be at least 2")
        self.max_period = max_period
        self.warn_repeats = warn_repeats
        self.stop_repeats = stop_repeats
        self.level = level
        if level == "name":
            self.name = "name_cycle"  # type: ignore[misc]

    def observe(self, ctx: Context) -> Finding | None:
        if ctx.call is not None and ctx.call[C_NOVEL] and self.level == "call":
            return None  # a call not in the window cannot close a cycle
        calls = ctx.calls
        n = len(calls)
        by_name = self.level == "name"
        kpos = C_NAME if by_name else C_NORM
        # Length of the run of identical consecutive keys ending here: if the whole
        # match is a single call repeated, it is RepeatedCall's business.
        same = 1
        last = calls[-1][kpos]
        while same < n and calls[-1 - same][kpos] == last:
            same += 1
        for period in range(2, self.max_period + 1):
            if n < 2 * period:
                break
            run = _match_run(calls, period, kpos, by_name)
            repeats = (run + period) // period
            if repeats < 2 or same >= run + period:
                continue
            severity = severity_for(repeats, self.warn_repeats, self.stop_repeats)
            if severity is None:
                continue
            cyc = calls[n - period :]
            names = " -> ".join(c[C_NAME] for c in cyc)
            steps = tuple(c[C_STEP] for c in calls[n - min(n, run + period) :])
            what = "the same tools" if by_name else "the same calls and results"
            action = (
                "Break the cycle: use what you have learned or try something different."
                if severity is Severity.WARN
                else "Stop: this cycle is not producing anything new."
            )
            pattern = "|".join(sorted(c[kpos] for c in cyc))
            return Finding(
                self.name,
                severity,
                ctx.step,
                steps,
                f"{names} repeated {repeats} times with {what} each round. {action}",
                pattern,
            )
        return None


def _match_run(calls: list[list[Any]], period: int, kpos: int, by_name: bool) -> int:
    """How many positions, counted back from the newest, equal the one a period earlier."""
    n = len(calls)
    run = 0
    for i in range(n - 1, period - 1, -1):
        a = calls[i]
        b = calls[i - period]
        if a[kpos] != b[kpos]:
            break
        if not by_name and i != n - 1:
            ra, rb = a[C_RESULT], b[C_RESULT]
            if ra is not None and rb is not None and ra != rb:
                break
        run += 1
    return run
