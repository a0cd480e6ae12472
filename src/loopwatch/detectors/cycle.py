"""Cycle: a sequence of calls that keeps coming back, like search -> fetch -> search."""

from __future__ import annotations

from ..events import TOOL_CALL
from ..findings import Finding, Severity
from ..state import CallRecord
from .base import Context, Detector, severity_for


class Cycle(Detector):
    """A sequence of 2..``max_period`` calls repeating as a whole.

    Compares each position with the same position one period earlier, on the
    normalised call key and the result key (``level="call"``, the default): the
    cycle must bring back the same calls *and* the same results, so a research
    loop whose queries or pages change, or an edit/test cycle whose test results
    move, is not a cycle. A call whose result is not yet known matches on its key.

    :class:`NameCycle` compares tool names only (deer-flow's tool-name cycle layer).
    It fires on legitimate research and edit/test cycles, so it is not in the
    default set; add ``NameCycle()`` (``[name_cycle] enabled = true``) if you want
    it as a soft signal.

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
        if level == "name" and type(self) is Cycle:
            raise ValueError("use NameCycle() for the name-level cycle")
        if max_period < 2:
            raise ValueError("Cycle max_period must be at least 2")
        self.max_period = max_period
        self.warn_repeats = warn_repeats
        self.stop_repeats = stop_repeats
        self.level = level

    def observe(self, ctx: Context) -> Finding | None:
        if ctx.call is not None and ctx.call.novel and self.level == "call":
            return None  # a call not in the window cannot close a cycle
        if ctx.call is not None and ctx.call.poll:
            return None  # waiting (sleep, then check) goes round by design: WaitBudget
        calls = ctx.turn_calls
        n = len(calls)
        by_name = self.level == "name"
        keys = [c.name for c in calls] if by_name else [c.norm for c in calls]
        # Length of the run of identical consecutive keys ending here: if the whole
        # match is a single call repeated, it is RepeatedCall's business.
        same = 1
        last = keys[-1]
        while same < n and keys[-1 - same] == last:
            same += 1
        for period in range(2, self.max_period + 1):
            if n < 2 * period:
                break
            run = _match_run(calls, keys, period, by_name)
            repeats = (run + period) // period
            if repeats < 2 or same >= run + period:
                continue
            severity = severity_for(repeats, self.warn_repeats, self.stop_repeats)
            if severity is None:
                continue
            cyc = calls[n - period :]
            names = " -> ".join(c.name for c in cyc)
            steps = tuple(c.step for c in calls[n - min(n, run + period) :])
            what = "the same tools" if by_name else "the same calls and results"
            action = (
                "Break the cycle: use what you have learned or try something different."
                if severity is Severity.WARN
                else "Stop: this cycle is not producing anything new."
            )
            pattern = "|".join(sorted(keys[n - period :]))
            return Finding(
                self.name,
                severity,
                ctx.step,
                steps,
                f"{names} repeated {repeats} times with {what} each round. {action}",
                pattern,
            )
        return None


def _match_run(calls: list[CallRecord], keys: list[str], period: int, by_name: bool) -> int:
    """How many positions, counted back from the newest, equal the one a period earlier."""
    n = len(calls)
    run = 0
    for i in range(n - 1, period - 1, -1):
        if keys[i] != keys[i - period]:
            break
        if not by_name and i != n - 1:
            ra, rb = calls[i].result, calls[i - period].result
            if ra is not None and rb is not None and ra != rb:
                break
        run += 1
    return run


class NameCycle(Cycle):
    """A sequence of 2..``max_period`` tool *names* repeating, whatever the arguments
    and results (deer-flow's tool-name cycles). A soft signal, off by default: it
    fires on research and edit/test cycles that make progress, so it only warns
    (at 5 rounds) unless ``stop_repeats`` is set."""

    name = "name_cycle"
    default_on = False

    def __init__(
        self, max_period: int = 6, warn_repeats: int = 5, stop_repeats: int | None = None
    ) -> None:
        super().__init__(max_period, warn_repeats, stop_repeats, level="name")
