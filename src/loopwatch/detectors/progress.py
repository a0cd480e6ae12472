"""No progress: tool results that stop bringing new information, whatever the calls."""

from __future__ import annotations

from typing import final

from ..events import TOOL_RESULT, USER
from ..findings import Finding
from ..state import DetectorState
from ..text import contentless, negative
from .base import Context, Detector, asks_anew, severity_for, trim

_STEPS_MAX = 10


@final
class NoProgressState(DetectorState):
    """The current streak of stale results."""

    __slots__ = ("count", "start", "steps")

    def __init__(self) -> None:
        self.count = 0  # stale results in a row
        self.start = 0  # event index of the streak's first stale result
        self.steps: list[int] = []  # evidence: the last few stale results


class NoProgress(Detector):
    """Consecutive tool results that bring nothing new, even when the calls differ.

    A result is *stale* when it is an error seen before, when a call made before
    returns a result seen before or an empty one, or when a new call returns a
    substantial result identical to an earlier one (the arguments made no
    difference: reworded searches landing on the same page). A new result, a new
    error, or a new call acknowledged with a bare "ok" (something was changed) is
    progress and resets the count. So is a new call that asks about something
    specific the first call with that result did not (another id, file, domain:
    "not found" for each of six customer ids is six answers), read as ``futility``
    reads it (:func:`~.base.asks_anew`); no corpus verdict changes by it. A result
    the trace does not hold (a screenshot) is neither.

    Deliberately ignores: the same short acknowledgement from different calls
    (``write_file`` -> ``ok`` for many files, a silent shell edit), and errors that
    differ (the error detector counts a tool failing again and again).

    Defaults warn at 5 and stop at 10 stale results in a row. Measured on the
    corpus: with acknowledgements of new calls counted as stale, a solved
    mini-swe-agent run (edit, rebuild, check, repeated with new edits) reached 10.
    """

    name = "no_progress"
    kinds = frozenset({TOOL_RESULT, USER})

    def __init__(self, warn_at: int = 5, stop_at: int | None = 10) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), NoProgressState)
        ev = ctx.event
        if ev.kind == USER:
            st.count = 0  # a user turn is new input; its results are judged afresh
            st.steps = []
            return None
        if ctx.call is not None and ctx.call.poll:
            return None  # the same status while waiting: WaitBudget judges it
        if not ev.text_known:
            return None  # a result the trace does not hold (a screenshot): neither stale nor new
        novel_call = ctx.call.novel if ctx.call else True
        repeated = not ctx.novel  # the engine's answer: seen among the last 64 results
        if ev.error:
            stale = repeated
        elif novel_call:
            # a new call's bare "ok" is an edit that went through; a new wording of a
            # search that finds nothing again is not, a lookup of another id, file or
            # domain that finds nothing is an answer about that one
            stale = (
                repeated
                and (not contentless(ev.text) or negative(ev.text))
                and not (ctx.call is not None and asks_anew(ctx, ctx.call))
            )
        else:
            stale = repeated or not ev.text.strip()
        if not stale:
            st.count = 0
            st.steps = []
            return None
        st.count += 1
        count = st.count
        if count == 1:
            st.start = ctx.step
        st.steps.append(ctx.step)
        trim(st.steps, _STEPS_MAX)
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        tool = ev.name or (ctx.call.name if ctx.call else "the tool")
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(st.steps),
            f"The last {count} tool results (latest from {tool}) brought no new information: "
            "empty, repeated or the same error. Step back and change strategy, or finish "
            "with what you have.",
            f"streak@{st.start}",
        )
