"""Iteration cap: a hard limit on model turns."""

from __future__ import annotations

from typing import final

from ..events import MODEL
from ..findings import Finding, Severity
from ..state import DetectorState
from .base import Context, Detector


@final
class CapState(DetectorState):
    """Model turns taken so far."""

    __slots__ = ("turns",)

    def __init__(self) -> None:
        self.turns = 0


class IterationCap(Detector):
    """Stop after ``max_iterations`` model turns; warn at ``warn_ratio`` of the cap.

    Default 250 turns: mini-swe-agent's own step limit, and about twice the longest
    solved run in the corpus (132 model turns, a SWE-bench run). Fuze's 25 would
    have stopped most solved coding runs there. ``None`` disables the cap.
    """

    name = "iteration_cap"
    kinds = frozenset({MODEL})

    def __init__(self, max_iterations: int | None = 250, warn_ratio: float = 0.8) -> None:
        self.max_iterations = max_iterations
        self.warn_ratio = warn_ratio

    def observe(self, ctx: Context) -> Finding | None:
        cap = self.max_iterations
        if cap is None:
            return None
        st = ctx.state.slot(self.slot_name(), CapState)
        st.turns += 1
        turns = st.turns
        warn_at = max(1, int(cap * self.warn_ratio))
        if turns > cap:
            severity = Severity.STOP
            msg = f"This run has taken {turns} model turns, over its limit of {cap}. Stop here."
        elif turns == warn_at and warn_at < cap:
            severity = Severity.WARN
            msg = (
                f"This run has taken {turns} of its {cap} model turns. "
                "Wrap up: give your best answer soon."
            )
        else:
            return None
        # a limit the user set: it stops when reached, whether or not it warned first
        stop = severity is Severity.STOP
        return Finding(self.name, severity, ctx.step, (ctx.step,), msg, "cap", stop)
