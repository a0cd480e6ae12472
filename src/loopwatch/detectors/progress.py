"""No progress: tool results that stop bringing new information, whatever the calls."""

from __future__ import annotations

from typing import Any

from ..events import TOOL_RESULT
from ..findings import Finding
from .base import C_NAME, C_NOVEL, Context, Detector, severity_for, trim

_SEEN_MAX = 64  # result keys remembered per run
_STEPS_MAX = 10
# A repeated result shorter than this from a *new* call is an acknowledgement
# ("ok", "written", "[]"): write_file -> "ok" for different files is progress.
_ACK_CHARS = 40


class NoProgress(Detector):
    """Consecutive tool results that bring nothing new, even when the calls differ.

    A result counts as *stale* when it is an error seen before, when it repeats an
    earlier result (or is empty) for a call made before, or when a new call returns
    a long result identical to an earlier one (the arguments made no difference:
    reworded searches landing on the same page). Any other result is progress and
    resets the count.

    Deliberately ignores: the same short acknowledgement from different calls
    (``write_file`` -> ``ok`` for many files), empty output from new commands (a
    shell edit prints nothing), and errors that differ.

    Defaults warn at 5 and stop at 10 stale results in a row: lower than that,
    the corpus' coding runs (re-reading files between edits) tripped it.
    """

    name = "no_progress"
    kinds = frozenset({TOOL_RESULT})

    def __init__(self, warn_at: int = 5, stop_at: int | None = 10) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st: dict[str, Any] = self.my_state(ctx)
        seen: dict[str, int] = st.setdefault("seen", {})
        ev = ctx.event
        key = ev.result_key
        novel_call = bool(ctx.call[C_NOVEL]) if ctx.call else True
        repeated = key in seen
        text = ev.text.strip()
        if ev.error:
            stale = repeated
        elif novel_call:
            stale = repeated and len(text) >= _ACK_CHARS
        else:
            stale = repeated or not text
        seen.pop(key, None)
        seen[key] = ctx.step
        if len(seen) > _SEEN_MAX:
            del seen[next(iter(seen))]
        if not stale:
            st["count"] = 0
            st["steps"] = []
            return None
        count = st["count"] = st.get("count", 0) + 1
        if count == 1:
            st["start"] = ctx.step
        steps: list[int] = st.setdefault("steps", [])
        steps.append(ctx.step)
        trim(steps, _STEPS_MAX)
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        tool = ev.name or (ctx.call[C_NAME] if ctx.call else "the tool")
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(steps),
            f"The last {count} tool results (latest from {tool}) brought no new information: "
            "empty, repeated or the same error. Step back and change strategy, or finish "
            "with what you have.",
            f"streak@{st['start']}",
        )
