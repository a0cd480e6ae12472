"""Futility: tool steps that achieve nothing new, whatever words the calls use."""

from __future__ import annotations

from typing import final

from ..events import TOOL_CALL, TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..fingerprints import is_noop_command
from ..state import CallRecord, DetectorState
from ..text import contentless, negative, words_alike
from .base import Context, Detector, asks_anew, call_before, severity_for, trim

_STEPS_MAX = 8  # evidence steps kept
_NOOPS_MAX = 8  # no-op calls still waiting for their result
# A person (or a simulated user) repeating a message word for word is stronger
# evidence than a tool returning the same thing: tools are deterministic, people
# repeat themselves when they are not being heard. With this weight the restated-
# request scenario warns at the 2nd repeat and stops at the 4th.
_USER_WEIGHT = 1.5
# A no-op is certain waste, not a weak hint: with this weight the 2nd no-op without
# progress warns and the 3rd stops. Measured on the corpus: median stop lateness on
# the hand-labelled coding runs went from 9 events to 1, with no new stop on a
# solved run or on a run labelled not-a-loop.
_NOOP_WEIGHT = 2.0
# A call that rewords the one just before it (same tool, most content words the same)
# and gets that call's very answer weighs as a no-op: the agent read the answer, changed
# its words, and the tool said the same thing, so the words make no difference (a
# search re-phrased until the step limit, each answer the same). Measured on the 8
# sources: one more labelled loop stopped, no new stop or warning on any other run.
# Left out, because each cost a false alarm when counted: shell commands, and arguments
# over 600 bytes (code, documents), whose words are not read (reproduction scripts
# varied to test a hypothesis print the same line; counting shell commands warned on a
# healthy terminal run and stopped a solved SWE-bench run), and calls whose words mostly differ
# (planning searches for other places landing on the same generic page; synonyms tried
# against an empty index). A batch sent in one turn read no answer in between.
_REWORDED_WEIGHT = 2.0
# "Most words the same": shared content words over the larger call's, as stagnation
# compares an agent's request with its echo. "famous bhavageete by Arun Date" and "...
# in India" share 4 of 5; "kyoto temples day 1" and "kyoto day 2 itinerary" 2 of 5.
_ALIKE = 0.6

# Why each kind of step counts (see the class docstring), and what to do about it.
_NOOP = "commands that do nothing"
_SAME = "outcomes you already had"
_USER = "answers the user already gave"
_ONE = {  # the same, said of one step
    _NOOP: "command that does nothing",
    _SAME: "outcome you already had",
    _USER: "answer the user already gave",
}
_ADVICE = {
    _NOOP: "A command made only of ':' or 'true' does nothing: run the real command.",
    _SAME: "The same results keep coming back: read them and act on them.",
    _USER: "The user keeps giving the same answer: use what you were already told.",
}


@final
class FutilityState(DetectorState):
    """The run's count of futile steps since the last progress, and its evidence."""

    __slots__ = ("count", "noops", "said", "start", "steps", "why")

    def __init__(self) -> None:
        self.count: float = 0.0  # weighted futile steps (halved by each progress)
        self.start = 0  # event index where the current count started
        self.steps: list[int] = []  # evidence: the last few futile steps
        self.why: dict[str, int] = {}  # kind of futility -> steps of that kind
        self.noops: list[int] = []  # steps of no-op calls whose result is pending
        self.said = ""  # fingerprint of the user's last message


def _moved(ctx: Context, rec: CallRecord) -> bool:
    """Whether the same call (normalised key), made before in the window with other
    calls after it, got another result last time: what the agent did in between
    changed the outcome (a fix reverted to compare, then re-applied: the test fails
    after the revert and passes again after). A call repeated back to back whose result
    flips (a toggle) moved nothing by the work in between: there was none."""
    norm = rec.norm
    between = False
    for earlier in reversed(ctx.calls):
        if earlier is rec or earlier.step >= rec.step:
            continue
        if earlier.norm != norm:
            between = True
            continue
        return between and earlier.result is not None and earlier.result != rec.result
    return False


def _exact_repeats(ctx: Context, rec: CallRecord) -> tuple[bool, bool]:
    """(Whether another call in the window had exactly these arguments; whether this
    call re-does exactly one earlier call, another call having been acknowledged the
    same bare way in between), in one walk of the window. Exact, not normalised: two
    edits that differ only in escaping or word order change the file differently, so
    the second one's "ok" is still news. Re-done once after other changes (a file
    restored, a cleanup re-run, to re-run a reproduction after a fix), the "ok" is news
    again, since what came in between may have changed what the step changes; a third
    time is repetition (flip-flopping between two edits stays futile)."""
    key = rec.key
    ack = rec.result
    same = False
    earlier = 0
    other = False
    for call in reversed(ctx.calls):
        if call is rec:
            continue
        if call.key == key:
            same = True
            if call.step < rec.step:
                earlier += 1
        elif not earlier and call.step < rec.step and call.result == ack:
            other = True
    return same, earlier == 1 and other


def _reworded_alike(ctx: Context, rec: CallRecord) -> bool:
    """Whether the call just before this one was the same tool asked in other words
    (most content words the same: _ALIKE), was answered before this call was made, and
    with this very answer: the rewording changed nothing (a search re-phrased four
    times, answered each time with the same "Could not find ... Similar: [...]")."""
    earlier = call_before(ctx, rec)
    return (
        earlier is not None
        and earlier.name == rec.name
        and earlier.rstep is not None
        and earlier.rstep < rec.step
        and earlier.result is not None
        and earlier.result == rec.result
        and words_alike(rec.marks, earlier.marks) >= _ALIKE
    )


class Futility(Detector):
    """Repeated intent: the agent keeps acting, and nothing it does changes the outcome.

    The lexical detectors need the same call or the same text. Real loops vary the
    words: a failing command re-run with another flag, quoting, path or timeout; the
    same edit re-applied with different whitespace; files re-read in a new order;
    commands that do nothing at all. What stays the same is the *outcome*. This
    detector keeps one run-level count of futile steps since the last real progress:

    * a shell no-op (``:``, ``true``, a blank command or a bare comment): it cannot
      do anything, whatever its result;
    * a result (or error) whose *outcome signature* was already seen in the run: the
      text with timings, decimals, numbers of 3+ digits, letter-digit tokens (temp
      paths, hashes) and 1-2 letter words masked, so the same error in new words
      (new pid, new duration, a clipped last word) is the same outcome;
    * an empty result or bare acknowledgement from a call made before, and a lookup
      that found nothing ("No results found.", ``[]``) again, whatever its wording;
    * a user message the same as the user's previous one (the user answering the
      same thing again: the agent keeps asking for what it was given).

    Progress halves the count (see ``_progress``): a successful result with a new
    outcome, a new call acknowledged with a bare "ok" (an edit or a write changed
    something), or new user input. An error with a new outcome neither counts nor resets: it is new
    information, but not success (trying variants that all fail differently).

    A result seen before is excused when the same call got another result last time
    and other calls came in between (:func:`_moved`): the work in between changed the
    outcome, as when a fix is reverted to compare and re-applied (the test fails, then
    passes again; the file read shows each version again). Measured on the 8 sources:
    3 warnings fewer on solved SWE-bench runs not labelled loops (a fix reverted and
    re-applied, builds re-run after each change), 3 warnings or stops 2-3 events later,
    no loop stopped less; a toggle flipped back to back is still futile, and so is
    flip-flopping between two fixes (the re-applied edits are the same calls).

    A bare "ok" from a call made exactly once before is excused when another call was
    acknowledged the same way in between (:func:`_exact_repeats`): a reproduction re-run
    after a fix restores its files and re-runs its cleanup with the very calls it used
    the first time. Measured on the 8 sources: 4 warnings fewer on solved SWE-bench runs
    (one of them labelled not-a-loop), one run warned 3 events later; no loop stopped
    less, no stop moved. The third time is counted again, so flip-flopping between two edits
    and re-writing one file back to back stay futile (tests).

    Evidence accumulates across these kinds, so a run mixing no-ops, re-reads and the
    same error in new words is caught as one loop rather than three short ones.

    Defaults: warn at 3, stop at 5 (a no-op weighs 2, a repeated user answer 1.5).
    Measured with ``benchmarks/quality.py`` on the corpus: stop at 4 stops 8 of 231
    solved runs (thrashing episodes that recovered), 5 stops 4, of which 2 are
    labelled loops; 6 loses labelled loops and adds lateness without sparing a
    solved run. Warn at 2 warns on 39% of the runs labelled not-a-loop.
    """

    name = "futility"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT, USER})

    def __init__(self, warn_at: int = 3, stop_at: int | None = 5) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), FutilityState)
        ev = ctx.event
        kind = ev.kind
        if kind == TOOL_CALL:
            command = ev.command
            if command is not None and is_noop_command(command):
                st.noops.append(ctx.step)
                trim(st.noops, _NOOPS_MAX)
            return None
        # "Seen before" is the engine's answer (ctx.novel): the result's key among the
        # run's last 64 results and user inputs. An error's key is its signature, so
        # the same failure in new words is seen before; a success's key is its text
        # with volatile values masked.
        seen = not ctx.novel
        if kind == USER:
            # The user saying again exactly what they said last time: they are not
            # being heard. The same question asked again later in a chat, after
            # other questions, is a new turn like any other.
            said, st.said = st.said, ev.text_key
            if said != st.said:
                return self._progress(st)
            return self._futile(ctx, st, _USER, "the user", _USER_WEIGHT)
        rec = ctx.call
        if rec is not None and rec.poll:
            return None  # the same status while waiting is neither futile nor progress
        if rec is not None and rec.step in st.noops:
            st.noops.remove(rec.step)
            return self._futile(ctx, st, _NOOP, rec.name, _NOOP_WEIGHT)
        tool = ev.name or (rec.name if rec is not None else "the tool")
        if ev.error:
            return self._futile(ctx, st, _SAME, tool) if seen else None
        if not seen:
            return self._progress(st)
        # "No results found." from a new wording of the same search is not progress.
        if contentless(ev.text) and not negative(ev.text):
            if rec is None:
                return self._progress(st)
            repeated, redone_once = _exact_repeats(ctx, rec)
            if not repeated:
                return self._progress(st)  # a bare "ok" from a new call: an edit went through
            if redone_once:
                return None  # a step re-done once after other changes: neither
        if rec is not None and rec.novel and asks_anew(ctx, rec):
            return None  # another question whose answer overlaps: the plan moves on
        if rec is not None and not rec.novel and _moved(ctx, rec):
            return None  # an outcome seen before, but not last time: it moves
        if rec is not None and rec.novel and _reworded_alike(ctx, rec):
            return self._futile(ctx, st, _SAME, tool, _REWORDED_WEIGHT)
        return self._futile(ctx, st, _SAME, tool)

    @staticmethod
    def _progress(st: FutilityState) -> None:
        """Progress halves the count (below 2 it clears): one new result after a
        stretch of futile steps is weaker evidence than the stretch, so the evidence
        decays instead of vanishing. Measured against a full reset: labelled coding
        loops stopped 25/30 -> 28/30, p90 lateness 19 -> 15 events; the one extra
        solved run stopped is itself labelled a loop."""
        st.count = st.count / 2 if st.count >= 2 else 0.0
        if st.count:
            return
        st.steps = []
        st.why = {}

    def _futile(
        self, ctx: Context, st: FutilityState, why: str, who: str, weight: float = 1.0
    ) -> Finding | None:
        before = st.count
        if ctx.event.error and ctx.batched:
            # A parallel batch from one turn hitting the same broken tool is one
            # failed attempt (a loop=false corpus run fails six globs at once).
            weight = 0.0
        count = st.count = before + weight
        steps = st.steps
        if not steps:
            st.start = ctx.step
        steps.append(ctx.step)
        trim(steps, _STEPS_MAX)
        reasons = st.why
        reasons[why] = reasons.get(why, 0) + 1
        severity = severity_for(count, self.warn_at, self.stop_at, before)
        if severity is None:
            return None
        total = sum(reasons.values())
        kinds = ", ".join(
            f"{n} {_ONE[w] if n == 1 else w}"
            for w, n in sorted(reasons.items(), key=lambda x: -x[1])
        )
        top = max(reasons, key=reasons.__getitem__)
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(steps),
            f"Your last {total} steps achieved nothing new ({kinds}; latest from {who}). "
            f"{_ADVICE[top]}"
            + (
                " Change approach before the next step."
                if severity is Severity.WARN
                else " Stop repeating it: change approach or finish with what you have."
            ),
            f"futile@{st.start}",
        )
