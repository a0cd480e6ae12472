"""Repeated call: the same tool call, again and again, learning nothing new."""

from __future__ import annotations

from typing import Any

from ..events import TOOL_CALL, TOOL_RESULT
from ..findings import Finding, Severity
from .base import C_ARGS, C_KEY, C_NAME, C_NORM, C_RESULT, Context, Detector, severity_for, trim

_KEYS_MAX = 64  # distinct calls tracked per run (LRU); the call window is 32
_STEPS_MAX = 8  # evidence steps kept per call


class RepeatedCall(Detector):
    """The same call (same tool, same or trivially reworded arguments) repeated while
    it keeps returning the same result.

    Counts, per normalised call key, the calls in a row that brought no new
    information. The count restarts when the call returns a result different from
    its previous one (polling a status that changes, a retry that succeeds) or when
    the agent made some other call it had not made recently in between (an edit
    before re-running the tests is progress). A call whose result was never observed
    counts as unchanged: without a result there is no evidence of progress.

    Deliberately ignores: the same call far apart with new work in between,
    pagination (the page number changes the key), and a single retry.

    Defaults: warn at the 3rd call, stop at the 5th (deer-flow's warn 3 / stop 5
    for identical calls; Gemini CLI stops at 5). On the conformance scenarios the
    earliest legitimate case is a retry (2 calls); on the corpus, solved
    mini-swe-agent runs re-run a script up to N times but with edits in between.
    """

    name = "repeated_call"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT})

    def __init__(self, warn_at: int = 3, stop_at: int | None = 5) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        rec = ctx.call
        if rec is None:
            return None
        st: dict[str, list[Any]] = self.my_state(ctx)
        norm = rec[C_NORM]
        if ctx.event.kind == TOOL_RESULT:
            entry = st.get(norm)
            if entry is not None:
                result = rec[C_RESULT]
                if entry[2] is not None and result != entry[2]:
                    entry[0] = 1  # new information: this call starts a new streak
                    entry[3] = [rec[0]]
                entry[2] = result
                entry[3].append(ctx.step)
                trim(entry[3], _STEPS_MAX)
            return None
        # tool_call: [count, epoch, last result key, evidence steps, all exact?, key]
        entry = st.pop(norm, None)
        epoch = ctx.epoch
        if entry is None or entry[1] != epoch:
            entry = [1, epoch, None, [ctx.step], True, rec[C_KEY]]
        else:
            entry[0] += 1
            entry[3].append(ctx.step)
            trim(entry[3], _STEPS_MAX)
            if entry[5] != rec[C_KEY]:
                entry[4] = False
        st[norm] = entry  # re-insert: most recently used last
        if len(st) > _KEYS_MAX:
            del st[next(iter(st))]
        count = entry[0]
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        same = "the same arguments" if entry[4] else "the same (reworded) arguments"
        result = "the same result each time" if entry[2] is not None else "no new result"
        action = (
            "Use the result you already have, or try a different approach."
            if severity is Severity.WARN
            else "Stop repeating this call: use the result you have or change approach."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry[3]),
            f"You called {rec[C_NAME]}({rec[C_ARGS]}) with {same} {count} times "
            f"and got {result}. {action}",
            norm,
        )
