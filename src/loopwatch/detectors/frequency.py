"""Frequency: one tool name dominating the recent calls (deer-flow's second layer)."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from types import MappingProxyType

from ..events import TOOL_CALL
from ..findings import Finding
from .base import Context, Detector, severity_for

_NO_OVERRIDES: Mapping[str, tuple[int, int | None]] = MappingProxyType({})


class Frequency(Detector):
    """One tool called ``warn_at`` times (or more) within the last ``window`` calls.

    A crude signal by design: it ignores arguments and results, so it fires on
    agents that legitimately use one tool for everything (a coding agent whose only
    tool is ``bash``), on pagination and on polling. ``per_tool`` overrides the
    thresholds for one tool (``{"get_job_status": (40, None)}``) and ``exempt``
    switches it off for some tools. Not in the default set: on the corpus it
    warned on most mini-swe-agent runs, solved ones included, while adding no loop
    the call-level detectors miss (see benchmarks/quality.py).
    """

    name = "frequency"
    default_on = False
    kinds = frozenset({TOOL_CALL})

    def __init__(
        self,
        window: int = 30,
        warn_at: int = 20,
        stop_at: int | None = None,
        per_tool: Mapping[str, tuple[int, int | None]] = _NO_OVERRIDES,
        exempt: Collection[str] = frozenset(),
    ) -> None:
        self.window = min(window, 32)  # the shared call window holds 32 calls
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.per_tool = dict(per_tool)
        self.exempt = frozenset(exempt)

    def observe(self, ctx: Context) -> Finding | None:
        name = ctx.call.name if ctx.call else ""
        if name in self.exempt:
            return None
        recent = ctx.turn_calls[-self.window :]
        count = sum(1 for c in recent if c.name == name)
        warn_at, stop_at = self.per_tool.get(name, (self.warn_at, self.stop_at))
        severity = severity_for(count, warn_at, stop_at)
        if severity is None:
            return None
        steps = tuple(c.step for c in recent if c.name == name)
        return Finding(
            self.name,
            severity,
            ctx.step,
            steps,
            f"{name} was called {count} times in the last {len(recent)} tool calls. "
            "Check whether these calls are still bringing new information.",
            name,
        )
