"""Repeated call: the same tool call, again and again, learning nothing new."""

from __future__ import annotations

from typing import Any

from ..events import TOOL_CALL, TOOL_RESULT, sketch_similarity, text_sketch
from ..findings import Finding, Severity
from .base import (
    C_ARGS,
    C_KEY,
    C_NAME,
    C_NORM,
    C_NOVEL,
    C_RESULT,
    C_STEP,
    Context,
    Detector,
    severity_for,
    trim,
)

_KEYS_MAX = 32  # distinct calls tracked per run (LRU): no more than the call window holds
_STEPS_MAX = 8  # evidence steps kept per call


# Two results of the same call whose word sets overlap this much say the same thing
# (screenshots of an unchanged page OCR'd differently: 0.79-0.86 in the corpus);
# results of fewer than 20 distinct words must match exactly (a status line that
# changes one number is news).
_NEAR = 0.75


def _near(a: list[int] | None, b: list[int] | None) -> bool:
    return a is not None and b is not None and sketch_similarity(a, b) >= _NEAR


class RepeatedCall(Detector):
    """The same call (same tool, same or trivially reworded arguments) repeated while
    it keeps returning the same result.

    Counts, per normalised call key, the calls in a row that brought no new
    information. The count restarts when the call returns a result different from
    its previous one (polling a status that changes, a retry that succeeds) or when
    the agent made some other call it had not made recently in between (an edit
    before re-running the tests is progress). A call whose result was never observed
    counts as unchanged: without a result there is no evidence of progress.

    Second pattern, ``window_warn_at``/``window_stop_at``: the same call returning
    the same result that many times within the shared window of 32 calls, whatever
    happened in between: an agent that keeps restarting from the same step (reload
    the data, fail at the next step, reload again). Measured on the corpus: solved
    runs repeat an identical call+result at most 5 times in 32 calls; the bioagent
    runs that loop this way reach 7 and 12. So warn at 6, stop at 7.

    "The same result" is the same text with volatile values masked, or, for results
    of 20 words or more, a word-set overlap of 0.75 or more (a page re-read whose
    rendering differs slightly is not news).

    Deliberately ignores: the same call far apart with new work in between,
    pagination (the page number changes the key), and a single retry.

    Defaults: warn at the 3rd call, stop at the 5th (deer-flow's warn 3 / stop 5
    for identical calls; Gemini CLI stops at 5). On the conformance scenarios the
    earliest legitimate case is a retry (2 calls); on the corpus, solved
    mini-swe-agent runs re-run a script up to N times but with edits in between.
    """

    name = "repeated_call"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT})

    def __init__(
        self,
        warn_at: int = 3,
        stop_at: int | None = 5,
        window_warn_at: int | None = 6,
        window_stop_at: int | None = 7,
    ) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.window_warn_at = window_warn_at
        self.window_stop_at = window_stop_at

    def _restarts(self, ctx: Context, rec: list[Any], result: str) -> Finding | None:
        """The same call and result coming back again and again with other work in
        between: an agent restarting from the same point."""
        norm = rec[C_NORM]
        prior = [c for c in ctx.calls[:-1] if c[C_NORM] == norm and c[C_RESULT] == result]
        count = len(prior) + 1
        severity = severity_for(count, self.window_warn_at, self.window_stop_at)
        if severity is None:
            return None
        return Finding(
            self.name,
            severity,
            ctx.step,
            (*(c[C_STEP] for c in prior), ctx.step),
            f"You called {rec[C_NAME]}({rec[C_ARGS]}) {count} times in your last "
            f"{len(ctx.calls)} tool calls and it returned the same result each time; the "
            "work in between is not changing it. Stop restarting from this step.",
            "window:" + norm,
        )

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
                if result == entry[2] and entry[6] is not None:
                    sketch = entry[6]  # the same text: its sketch is already known
                elif entry[0] >= 2:
                    sketch = text_sketch(ctx.event.text)
                else:
                    sketch = None
                if entry[2] is not None and result != entry[2] and not _near(entry[6], sketch):
                    entry[0] = 1  # new information: this call starts a new streak
                    entry[3] = [rec[0]]
                entry[2] = result
                entry[6] = sketch
                entry[1] = ctx.epoch  # a failed new call takes back its progress mark
                entry[3].append(ctx.step)
                trim(entry[3], _STEPS_MAX)
            return None
        # tool_call: [count, epoch, last result key, evidence steps, all exact?, exact key,
        #             sketch of the last result (only once the call repeats)]
        entry = st.pop(norm, None)
        epoch = ctx.epoch
        if entry is None or entry[1] != epoch:
            last = entry[2] if entry is not None else None  # kept for the window count
            entry = [1, epoch, last, [ctx.step], True, rec[C_KEY], None]
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
            if rec[C_NOVEL] or entry[2] is None:
                return None
            return self._restarts(ctx, rec, entry[2])
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
