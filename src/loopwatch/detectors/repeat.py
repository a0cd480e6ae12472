"""Repeated call: the same tool call, again and again, learning nothing new."""

from __future__ import annotations

from typing import Any, final

from ..events import TOOL_CALL, TOOL_RESULT
from ..findings import Finding, Severity
from ..fingerprints import (
    reports_failure,
    sketch_similarity,
)
from ..state import CallRecord, KeyedState, StateError, Written
from ..text import contentless
from .base import Context, Detector, call_before, severity_for, trim

_KEYS_MAX = 32  # distinct calls tracked per run (LRU): no more than the call window holds
_STEPS_MAX = 8  # evidence steps kept per call


# Two results of the same call whose word sets overlap this much say the same thing
# (screenshots of an unchanged page OCR'd differently: 0.79-0.86 in the corpus);
# results of fewer than 20 distinct words must match exactly (a status line that
# changes one number is news).
_NEAR = 0.75
# A page (a result of 800+ characters with an address near its start: browser tools
# echo the URL) is sketched from the first result on, because a page re-read differs
# most in its text (OCR'd screenshots of 850+ characters in the corpus); any other
# result only once its call repeats. A sketch costs 10-40 us: sketching every long
# first result added 2.4 us to bench_recorded's median event, pages alone are 1.5%
# of the corpus's events (and 3 in 4 of its browser results).
_EAGER_SKETCH_CHARS = 800
_ADDRESS_WITHIN = 400


@final
class Streak(Written):
    """One call's current streak of calls that brought nothing new (written field by
    field: one is made for every new call, see state.Written)."""

    __slots__ = (
        "count", "epoch", "exact", "key", "result", "results", "sketch", "steps",
    )  # fmt: skip

    def __init__(self, epoch: int, result: str | None, step: int, key: str) -> None:
        self.count = 1  # calls in the streak
        self.epoch = epoch  # the run's progress marker when the streak was last extended
        self.result: str | None = result  # the last result key seen for this call
        self.results = 0  # results observed in the streak (all the same)
        self.steps = [step]  # evidence: event indices of the calls and results
        self.exact = True  # every call in the streak had exactly the same arguments
        self.key = key  # the exact call key of the streak's first call
        self.sketch: list[int] | None = None  # sketch of the last result, once it repeats

    # Field by field, in slot order (as Record.dump): up to 32 per run, see CallRecord.
    def dump(self) -> Any:
        return [
            self.count, self.epoch, self.exact, self.key, self.result, self.results,
            self.sketch, self.steps,
        ]  # fmt: skip

    @classmethod
    def load(cls, data: Any) -> Streak:
        if not isinstance(data, list) or len(data) != 8:
            raise StateError("Streak: expected 8 fields")
        count, epoch, exact, key, result, results, sketch, steps = data
        streak = Streak(epoch, result, 0, key)
        streak.count, streak.exact, streak.results = count, exact, results
        streak.sketch, streak.steps = sketch, steps
        return streak


@final
class RepeatState(KeyedState[Streak]):
    """Streaks by normalised call key (LRU, at most 32: the call window's size)."""

    __slots__ = ()
    record = Streak


def _run_again_at_once(ctx: Context, rec: CallRecord) -> bool:
    """Whether the call just before this one had exactly its arguments."""
    before = call_before(ctx, rec)
    return before is not None and before.key == rec.key


class RepeatedCall(Detector):
    """The same call (same tool, same or trivially reworded arguments) repeated while
    it keeps returning the same result.

    Counts, per normalised call key, the calls in a row that brought no new
    information. The count restarts when the call returns a result different from
    its previous one (polling a status that changes, a retry that succeeds) or when
    the agent made some other call it had not made recently in between (an edit
    before re-running the tests is progress). Calls that only think or plan are not
    calls (the engine drops them), a new call that failed or found nothing is not
    progress, and a user turn restarts the count unless the call keeps failing and
    the user brought nothing new ("please try again" does not make it new).

    Second pattern, ``window_warn_at``/``window_stop_at``: the same call returning
    the same result that many times within the shared window of 32 calls, whatever
    happened in between: an agent that keeps restarting from the same step (reload
    the data, fail at the next step, reload again). Measured on the corpus: solved
    runs repeat an identical call+result at most 5 times in 32 calls; the bioagent
    runs that loop this way reach 7 and 12. So warn at 6, stop at 7.

    "The same result" is the same text with volatile values masked (for an error,
    the same error signature), or, for results of 20 words or more, a word-set
    overlap of 0.75 or more (:func:`~loopwatch.fingerprints.page_sketch`: a page re-read
    whose rendering differs slightly is not news). A sketch costs 10-40 us, so it is
    made from the first result on only for pages (800+ characters with an address
    near the start), and otherwise once the call repeats.

    A scroll answered only by its acknowledgement ("Scrolled down the page by one
    page", "Pressed PageDown": short, naming no limit or failure) has no known result
    (the engine reads it so, see ``fingerprints.acknowledges_move``): what came into
    view is not in the trace, so identical scrolls so answered are not "the same
    result"; "Already at the bottom of the page" is. So is a click, key press or typed
    text answered only by what was done ("Clicked element #load-more", "Pressed End":
    ``fingerprints.acknowledges_action``): a "Load more" clicked six times shows six
    pages, not one. "Clicked, but nothing happened" is a result.

    Deliberately ignores: the same call far apart with new work in between,
    pagination (the page number changes the key; so does a calendar day: an agent
    scanning days for a free flight asks a new question each time), and a single retry.

    Defaults: stop at the 3rd call when the two before it returned the same result
    (the call is known futile before it runs); ``warn_at`` 3 is the warning when
    fewer than two results were observed (calls proposed, never run). Two identical
    calls stay a retry (the conformance scenarios forbid a warning there). Measured
    with ``benchmarks/quality.py`` against the former stop at the 5th (deer-flow's
    warn 3 / stop 5): 5 more labelled loops stopped (a customer-service booking
    re-sent between ``think`` calls, three web clicks on a page that does not change,
    a SWE-harness edit), no new stop on a run labelled not-a-loop or on a solved run
    that is not a loop, median lateness on the labelled loops 4 -> 3 events. The
    peers measured on held-out conversations and browser runs
    (shared/notes/peers.md) stop at the 3rd identical call too; the results keep
    the browser runs' pages that do change (scrolling) from counting.

    ``result_warn_at`` 2: a call that worked and returned the same detailed result a
    second time is told then (the next one will return it too), except a shell
    command run again at once, with no other call in between: a coding agent that
    looks again at what it just read or ran, before it acts (a file section re-printed
    after its edit went wrong, a script re-run while it reasons about the output).
    Measured on the 8 sources: 2 of 87 SWE-bench runs labelled not-a-loop and one
    solved run no longer warned, one warned later; no loop stopped less or later.
    Its third run is told, and its fourth stopped, as for any call.
    """

    name = "repeated_call"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT})

    def __init__(
        self,
        warn_at: int = 3,
        stop_at: int | None = 3,
        window_warn_at: int | None = 6,
        window_stop_at: int | None = 7,
        result_warn_at: int | None = 2,
    ) -> None:
        self.result_warn_at = result_warn_at
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.window_warn_at = window_warn_at
        self.window_stop_at = window_stop_at

    def _restarts(self, ctx: Context, rec: CallRecord, result: str) -> Finding | None:
        """The same call and result coming back again and again with other work in
        between: an agent restarting from the same point."""
        norm = rec.norm
        calls = ctx.turn_calls
        prior = [c for c in calls[:-1] if c.norm == norm and c.result == result]
        count = len(prior) + 1
        severity = severity_for(count, self.window_warn_at, self.window_stop_at)
        if severity is None:
            return None
        return Finding(
            self.name,
            severity,
            ctx.step,
            (*(c.step for c in prior), ctx.step),
            f"You called {rec.name}({rec.args}) {count} times in your last "
            f"{len(calls)} tool calls and it returned the same result each time; the "
            "work in between is not changing it. Stop restarting from this step.",
            "window:" + norm,
        )

    def observe(self, ctx: Context) -> Finding | None:
        rec = ctx.call
        if rec is None or rec.poll:
            return None  # checking again on something waited for: WaitBudget judges it
        streaks = ctx.state.slot(self.slot_name(), RepeatState).by_key
        norm = rec.norm
        if ctx.event.kind == TOOL_RESULT:
            entry = streaks.get(norm)
            if entry is None:
                return None
            self._compare(ctx, entry, rec.result)
            entry.epoch = ctx.epoch  # a failed new call takes back its progress mark
            entry.steps.append(ctx.step)
            trim(entry.steps, _STEPS_MAX)
            told = self.result_warn_at
            if told is not None and entry.count == told and entry.results >= told:
                ev = ctx.event
                if (
                    not ev.error
                    and not contentless(ev.text)
                    and not reports_failure(ev.text)
                    # a shell command run again at once, no call in between: told at the
                    # 3rd run (see the docstring)
                    and not (rec.shell and _run_again_at_once(ctx, rec))
                ):
                    # a call that worked and returned the same thing again: the next
                    # one will too (a failure may be a hiccup: it waits for stop_at)
                    return self._finding(ctx, rec, entry, Severity.WARN)
            return None
        entry = streaks.get(norm)  # get and del: native, where pop() is a method call
        if entry is not None:
            del streaks[norm]
        epoch = ctx.epoch
        if entry is None or not self._continues(ctx, entry, epoch):
            last = entry.result if entry is not None else None  # kept for the window count
            entry = Streak(epoch, last, ctx.step, rec.key)
        else:
            entry.count += 1
            entry.steps.append(ctx.step)
            trim(entry.steps, _STEPS_MAX)
            if entry.key != rec.key:
                entry.exact = False
        streaks[norm] = entry  # re-insert: most recently used last
        if len(streaks) > _KEYS_MAX:
            del streaks[next(iter(streaks))]
        count = entry.count
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is not None and entry.results >= min(count - 1, 2):
            return self._finding(ctx, rec, entry, severity)
        # Fewer than two results of the streak seen (calls proposed and never run, a
        # screenshot agent whose screens are not in the trace, a result not yet back):
        # identical calls prove nothing by themselves, their outcome is unknown. (Two
        # same results are the evidence: a later call skipped by the guard, which has no
        # result, does not take it back.)
        if rec.novel or entry.result is None:
            return None
        return self._restarts(ctx, rec, entry.result)

    @staticmethod
    def _continues(ctx: Context, entry: Streak, epoch: int) -> bool:
        """Whether this call extends the streak: no new call made good progress since
        (the run's progress marker is unchanged), and no user turn came in between,
        unless the call keeps failing and the user brought nothing new (a user who
        says "please try again" does not make the same failing call new)."""
        if entry.epoch != epoch:
            return False
        state = ctx.state
        last = entry.steps[-1]
        if state.user_step < last:
            return True
        result = entry.result
        return result is not None and result.startswith("E") and state.news_step < last

    @staticmethod
    def _compare(ctx: Context, entry: Streak, result: str | None) -> None:
        """Fold this result into the streak: it goes on if the result is the same as
        the call's previous one, and restarts here if the result brings something new.

        "The same" is the same key, or for results of 20 words or more a word-set
        overlap of ``_NEAR`` (a page re-read whose rendering differs slightly)."""
        previous = entry.result
        entry.result = result
        if entry.count < 2:
            # the streak's first result
            entry.results = 1
            # a page's sketch is kept from the first result on, so that the second
            # can be compared (see _EAGER_SKETCH_CHARS)
            text = ctx.event.text
            entry.sketch = (
                ctx.event.sketch
                if len(text) >= _EAGER_SKETCH_CHARS and "://" in text[:_ADDRESS_WITHIN]
                else None
            )
            return
        entry.results += 1
        if previous is None or result is None:
            return  # nothing to compare: no evidence of progress either
        if result == previous and entry.sketch is not None:
            return
        sketch = ctx.event.sketch
        previous_sketch, entry.sketch = entry.sketch, sketch
        if result == previous:
            return
        if (
            # a scroll (CallRecord.moves): a screen that partly moved is another screen
            # of the page, never the same one by a near-duplicate sketch
            (ctx.call is not None and ctx.call.moves)
            or previous_sketch is None
            or sketch is None
            or sketch_similarity(previous_sketch, sketch) < _NEAR
        ):
            entry.count = 1  # new information: this call starts a new streak
            entry.results = 1
            entry.steps = [ctx.call.step if ctx.call is not None else ctx.step]

    def _finding(self, ctx: Context, rec: CallRecord, entry: Streak, severity: Severity) -> Finding:
        count = entry.count
        same = "the same arguments" if entry.exact else "the same (reworded) arguments"
        if entry.result is not None and entry.result.startswith("E"):
            result = "the same error each time"
        else:
            result = "the same result each time"
        action = (
            "Use the result you already have, or try a different approach."
            if severity is Severity.WARN
            else "Stop repeating this call: use the result you have or change approach."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry.steps),
            f"You called {rec.name}({rec.args}) with {same} {count} times "
            f"and got {result}. {action}",
            rec.norm,
        )
