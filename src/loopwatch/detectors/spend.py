"""Spend without progress, and hard budget caps (tokens, cost, wall time).

The call-level detectors see a loop in *what* the agent repeats; this module sees
it in *what the run pays for*: model turns keep costing tokens while nothing new
arrives (no call the run has not made recently, no result or user input it has not
seen, no new words in the outputs). That catches loops the other detectors miss
because each step differs a little: a reworded search landing on the same page,
a rephrased plan, a cycle longer than the call window.

Measured on /work/shared/corpus (only mini_swe_agent carries tokens and cost;
177 of its 240 runs were resolved), see :class:`SpendVelocity` for the numbers.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from typing import Final, final

from ..events import KINDS, MODEL, Event
from ..findings import Finding, Severity
from ..state import DetectorState
from ..text import LONG_WORD, split_words, word_at_rest
from .base import Context, Detector, note_novelty, trim

__all__ = [
    "CostBudget",
    "SpendVelocity",
    "TimeBudget",
    "TokenBudget",
]

_VOCAB_MAX: Final = 256  # recent output words remembered per run
_STEPS_MAX: Final = 10
# Only the start of an output is read for new words: bounds cost and state.
_OUTPUT_CHARS: Final = 400
_PAYLOADS_MAX: Final = 8


@final
class SpendState(DetectorState):
    """Spend since the last new information, and the recent output vocabulary."""

    __slots__ = ("cost", "fresh", "mark", "payloads", "quiet", "start", "steps", "tok", "vocab")

    def __init__(self) -> None:
        self.mark = 0  # novelty mark (see note_novelty)
        self.fresh = False  # something new happened since the last spending step
        self.quiet: int | None = None  # spending steps since then (None: none yet)
        self.tok = 0.0  # tokens spent since then
        self.cost = 0.0  # cost since then
        self.start = 0  # event index of the first quiet spending step
        self.steps: list[int] = []  # evidence: the last few quiet spending steps
        self.vocab: dict[str, int] = {}  # recent output words (FIFO, at most 256; long
        # ones by their fingerprint: text.word_at_rest)
        # Event.payload_key of the last few outputs longer than what is read of their
        # words (_OUTPUT_CHARS)
        self.payloads: list[str] = []


@final
class CapTotal(DetectorState):
    """A hard budget's running total."""

    __slots__ = ("t0", "total", "warned")

    def __init__(self) -> None:
        self.total = 0.0  # tokens or cost so far
        self.t0: float | None = None  # the run's first time stamp (time budget)
        self.warned = False  # the warning at warn_ratio was given


def _fmt_spend(tokens: float, cost: float) -> str:
    bits = []
    if tokens:
        bits.append(f"{tokens:,.0f} tokens")
    if cost:
        bits.append(f"${cost:.4f}")
    return " and ".join(bits) or "spend"


def _payload_is_new(st: SpendState, ev: Event) -> bool:
    """Whether an output longer than what is read of its words carries a payload (code,
    a document, a report) none of the last few outputs carried: new content past an
    opening that repeats (a role-play's preamble and template before each new version of
    the code). The same payload again is no news."""
    if len(ev.text) <= _OUTPUT_CHARS:
        return False
    payload = ev.payload_key
    payloads = st.payloads
    if payload in payloads:
        return False
    payloads.append(payload)
    trim(payloads, _PAYLOADS_MAX)
    return True


class SpendVelocity(Detector):
    """Spend that keeps accruing while nothing new comes of it.

    Counts *spending steps* (events with ``tokens`` or ``cost`` > 0, in practice
    model turns) in a row that brought no novelty. A step is novel when, since the
    previous spending step, the run made a call not in its recent window, got a
    tool result or user input it had not seen, or when the step's own output adds
    enough new words (at least ``min_new_words`` and ``min_output_novelty`` of its
    distinct words not among the run's last 256 output words), or, for an output longer
    than the 400 characters whose words are read, when what follows them (its payload:
    code, a document) is none of the last 8 payloads: a role-play's programmer opens
    every message with its preamble and goes on with new code (101 public ChatDev logs,
    ``benchmarks/heldout.py``: once ping-pong and stagnation read past their openings,
    this detector stopped 89 of them without the payload, none with it; no run of the 8
    sources changes). Like Fuze's
    ``progress_window``: a streak of ``warn_after`` quiet spending steps warns and
    ``stop_after`` stops, provided the streak spent at least ``min_tokens`` tokens
    or ``min_cost`` (the ``cost_velocity_window`` idea: spend, not just turns).

    Deliberately ignores: runs that record no spend (nothing to measure; the
    iteration cap and the other detectors cover them), expensive turns that bring
    something new (a long productive run with high spend is not a loop), and how
    expensive a single turn is (see :class:`TokenBudget` / :class:`CostBudget`).

    Defaults, measured on the corpus' mini_swe_agent runs (the only ones with spend;
    one bash call per turn, step limit 250): the longest quiet streak is 4 spending
    steps in the 177 resolved runs (one run; 168 have at most 2) and 2 in the 63
    unresolved ones; the spend loop in tests/data/semantic_scenarios.jsonl has 5
    quiet steps by step 24. ``warn_after`` 5 therefore warns on no solved run and
    ``stop_after`` 8 leaves twice the longest solved streak before stopping.
    """

    name = "spend_velocity"
    kinds = KINDS

    def __init__(
        self,
        warn_after: int = 5,
        stop_after: int | None = 8,
        min_tokens: float = 0.0,
        min_cost: float = 0.0,
        min_output_novelty: float = 0.2,
        min_new_words: int = 3,
    ) -> None:
        if warn_after < 1:
            raise ValueError("warn_after must be at least 1")
        if stop_after is not None and stop_after < warn_after:
            raise ValueError("stop_after must be at least warn_after (or None)")
        self.warn_after = warn_after
        self.stop_after = stop_after
        self.min_tokens = min_tokens
        self.min_cost = min_cost
        self.min_output_novelty = min_output_novelty
        self.min_new_words = min_new_words

    def _output_is_new(self, st: SpendState, text: str) -> bool:
        # str methods, not a regex: this runs on every model turn of a run with spend.
        # Short words are common, so they sit in the vocabulary and never count as new.
        words = split_words(text[:_OUTPUT_CHARS])
        if not words:
            return False
        vocab = st.vocab
        # In the text's order: the FIFO below evicts the oldest words, so the order of
        # first appearance decides what is remembered. A word met again in this text
        # is already in the vocabulary, so each distinct word counts once (without
        # building a dict of the distinct words first: that cost 3 us per output).
        # First in, first out: a word seen long ago may count as new again (lenient).
        fresh = 0
        for w in words:
            if len(w) >= LONG_WORD:  # kept by its fingerprint: it may be a secret
                w = word_at_rest(w)
            if w not in vocab:
                vocab[w] = 1
                fresh += 1
        excess = len(vocab) - _VOCAB_MAX
        if excess > 0:
            for w in list(itertools.islice(vocab, excess)):
                del vocab[w]
        if fresh < self.min_new_words:
            return False
        ratio = self.min_output_novelty
        # The words are at least as many as the distinct ones: when the new words
        # reach the ratio of all of them, the set (2 us) is not needed.
        if fresh >= ratio * len(words):
            return True
        return fresh >= ratio * len(set(words))

    def observe(self, ctx: Context) -> Finding | None:
        ev = ctx.event
        slots = ctx.state.slots
        name = self.slot_name()
        if name not in slots and not (ev.tokens > 0 or ev.cost > 0):
            # Nothing to measure until the run records spend; most events of most
            # runs stop here, before any novelty bookkeeping (hot path).
            return None
        st = ctx.state.slot(name, SpendState)
        if note_novelty(st, ctx):
            st.fresh = True
        # an output the trace did not record may have been new: never count it as
        # spend without novelty
        own_news = ev.kind == MODEL and (not ev.text_known or self._output_is_new(st, ev.text))
        if ev.kind == MODEL and ev.text_known and _payload_is_new(st, ev):
            own_news = True
        if not (ev.tokens > 0 or ev.cost > 0):
            if own_news:
                st.fresh = True
            return None
        fresh, st.fresh = st.fresh, False
        if fresh or own_news or st.quiet is None:
            # new information since the last spending step (or the first one): reset
            st.quiet = 0
            st.tok = 0.0
            st.cost = 0.0
            st.steps = []
            return None
        quiet = st.quiet = st.quiet + 1
        st.tok += ev.tokens
        st.cost += ev.cost
        steps = st.steps
        if quiet == 1:
            st.start = ctx.step
        steps.append(ctx.step)
        trim(steps, _STEPS_MAX)
        if st.tok < self.min_tokens and st.cost < self.min_cost:
            return None
        if st.tok <= 0 and st.cost <= 0:
            return None
        if self.stop_after is not None and quiet >= self.stop_after:
            severity = Severity.STOP
        elif quiet >= self.warn_after:
            severity = Severity.WARN
        else:
            return None
        spent = _fmt_spend(st.tok, st.cost)
        action = (
            "Change approach, or finish with what you have."
            if severity is Severity.WARN
            else "Stop here and give your best answer."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(steps),
            f"The last {quiet} model turns spent {spent} and brought nothing new: no new "
            f"calls, no new results, no new content. {action}",
            f"quiet@{st.start}",
        )


class _Cap(Detector):
    """A running total against a hard limit: warn at ``warn_ratio`` of it, stop past it."""

    unit: str = ""

    def __init__(self, limit: float | None, warn_ratio: float, what: str) -> None:
        if limit is None or limit <= 0:
            raise ValueError(f"{self.name} needs a positive {what} (got {limit!r})")
        if not 0 < warn_ratio <= 1:
            raise ValueError(f"warn_ratio must be in (0, 1], not {warn_ratio!r}")
        self._limit = float(limit)
        self._warn_ratio = warn_ratio

    def _amount(self, ctx: Context, st: CapTotal) -> float | None:
        raise NotImplementedError  # pragma: no cover - abstract

    def _render(self, amount: float) -> str:
        raise NotImplementedError  # pragma: no cover - abstract

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), CapTotal)
        amount = self._amount(ctx, st)
        if amount is None:
            return None
        limit = self._limit
        if amount > limit:
            severity = Severity.STOP
            msg = (
                f"This run has used {self._render(amount)}, over its budget of "
                f"{self._render(limit)}. Stop here."
            )
        elif amount >= limit * self._warn_ratio and not st.warned:
            st.warned = True
            severity = Severity.WARN
            msg = (
                f"This run has used {self._render(amount)} of its {self._render(limit)} "
                "budget. Wrap up: give your best answer soon."
            )
        else:
            return None
        # a limit the user set: it stops when reached, whether or not it warned first
        stop = severity is Severity.STOP
        return Finding(self.name, severity, ctx.step, (ctx.step,), msg, "cap", stop)


class TokenBudget(_Cap):
    """Hard cap on the tokens a run may spend (the sum of ``tokens`` on its events).

    Warns once at ``warn_ratio`` of the cap and stops on every spending event past
    it. Off by default: the right cap depends on the model and task (resolved
    mini_swe_agent runs in the corpus spent up to ~2.9M tokens in total).
    """

    name = "token_budget"
    default_on = False
    kinds = KINDS

    def __init__(self, max_tokens: float | None = None, warn_ratio: float = 0.8) -> None:
        super().__init__(max_tokens, warn_ratio, "max_tokens")
        self.max_tokens = max_tokens
        self.warn_ratio = warn_ratio

    def _amount(self, ctx: Context, st: CapTotal) -> float | None:
        if ctx.event.tokens <= 0:
            return None
        st.total += ctx.event.tokens
        return st.total

    def _render(self, amount: float) -> str:
        return f"{amount:,.0f} tokens"


class CostBudget(_Cap):
    """Hard cap on what a run may cost (the sum of ``cost`` on its events, in the
    trace's currency). Warns once at ``warn_ratio``, stops past the cap. Off by
    default, for the same reason as :class:`TokenBudget`."""

    name = "cost_budget"
    default_on = False
    kinds = KINDS

    def __init__(self, max_cost: float | None = None, warn_ratio: float = 0.8) -> None:
        super().__init__(max_cost, warn_ratio, "max_cost")
        self.max_cost = max_cost
        self.warn_ratio = warn_ratio

    def _amount(self, ctx: Context, st: CapTotal) -> float | None:
        if ctx.event.cost <= 0:
            return None
        st.total += ctx.event.cost
        return st.total

    def _render(self, amount: float) -> str:
        return f"${amount:.4f}"


class TimeBudget(_Cap):
    """Hard cap on a run's wall time, from its first event to the current one.

    Time comes from the events' ``ts`` (or ``timestamp`` / ``time``) field when they
    carry one (seconds since the epoch or ISO-8601), so a scan of a recorded trace
    measures the run's real duration; otherwise from ``clock`` (default ``time.time``, wall
    clock so that workers sharing a store agree) when the event is observed, which
    only means something for a live guard: a scan gives it a clock that does not
    move (a run without timestamps took no time), so it never reaches the cap there.
    Off by default.
    """

    name = "time_budget"
    default_on = False
    kinds = KINDS

    def __init__(
        self,
        max_seconds: float | None = None,
        warn_ratio: float = 0.8,
        clock: Callable[[], float] | None = None,
    ) -> None:
        super().__init__(max_seconds, warn_ratio, "max_seconds")
        self.max_seconds = max_seconds
        self.warn_ratio = warn_ratio
        # None, not time.time, as the default: `loopwatch config` prints the defaults
        self._clock = clock if clock is not None else time.time

    def _amount(self, ctx: Context, st: CapTotal) -> float | None:
        now = ctx.event.time
        if now is None:
            now = self._clock()
        if st.t0 is None:
            st.t0 = now
            return 0.0
        return max(0.0, now - st.t0)

    def _render(self, amount: float) -> str:
        return f"{amount:,.0f} s"
