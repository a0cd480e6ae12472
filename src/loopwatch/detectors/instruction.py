"""Repeated instruction: an orchestrator sending an agent the same instruction while
the agent's work brings back nothing new."""

from __future__ import annotations

from typing import Any, Final, final

from ..events import (
    MODEL,
    TOOL_RESULT,
    USER,
)
from ..findings import Finding, Severity
from ..state import DetectorState, Record, dump_map, load_map
from ..text import fingerprint, request_overlap, request_words
from .base import (
    Context,
    Detector,
    Showing,
    dump_pages,
    load_pages,
    preview,
    severity_for,
    show_page,
    trim,
)

__all__ = ["RepeatedInstruction"]

_THREADS_MAX: Final = 8  # sender -> recipient threads tracked per run (LRU)
_RECENT: Final = 4  # instructions of a thread a new one is compared with
_STEPS_MAX: Final = 8
_TEXT_CHARS: Final = 400  # an instruction shows in its first sentences; bounds state


@final
class Thread(Record):
    """What one agent has been telling another since the agent last brought news."""

    __slots__ = ("count", "mark", "recent", "reply", "steps")

    def __init__(self, mark: int) -> None:
        self.mark = mark  # the detector's news count at the thread's last instruction
        self.count = 0  # instructions in a row restating an earlier one, nothing new between
        self.recent: list[dict[str, int]] = []  # content words of the last instructions
        self.reply: str | None = None  # fingerprint of the recipient's last message
        self.steps: list[int] = []  # evidence: the restating instructions


@final
class InstructionState(DetectorState):
    """Threads by "sender>recipient", the last page seen at each address, and how many
    things the run learned (results, pages, user input, replies) since it started."""

    __slots__ = ("news", "pages", "threads")

    def __init__(self) -> None:
        self.news = 0
        self.threads: dict[str, Thread] = {}  # LRU, at most 8
        self.pages: dict[str, list[Showing]] = {}  # see base.show_page

    def dump(self) -> Any:
        return [self.news, dump_pages(self.pages), dump_map(self.threads)]

    @classmethod
    def load(cls, data: Any) -> InstructionState:
        st = cls()
        st.news, pages, threads = data
        st.pages = load_pages(pages)
        st.threads = load_map(Thread, threads)
        return st


class RepeatedInstruction(Detector):
    """An orchestrator sending an agent the same instruction again and again while the
    agent's work brings back nothing new.

    The multi-agent loop PingPong cannot see: only one side talks. An orchestrator
    (Magentic-One's) tells its web surfer "scan through the video and find the
    timestamps", the surfer scrolls, pauses, clicks, the pages it gets back are the
    ones it had already seen, and the orchestrator sends the same instruction again.

    An *instruction* is a ``model`` event from an ``agent`` addressed (``to``) to
    another agent, not the user. It restates one of the thread's last 4 when, after
    dropping filler words, the two share at least ``overlap`` of the larger one's
    content words (PingPong's measure and default). The count grows by one per
    restating instruction and restarts when anything new came back since the last
    one: a tool result not seen recently, a page not shown before (a result with an
    address near its start: the same address showing a page whose word set overlaps
    the last showing's by 0.75 or more is the same page, whatever the scroll
    position or the OCR says), a user turn, or a new message from the recipient
    (addressed back to the sender or not).
    A new call alone is not news: clicking somewhere else and landing on a page
    already seen teaches nothing.

    Deliberately ignores: an orchestrator walking a list ("check the hours of A, B,
    C", then "of B, C"), whose every step brings a new page; an instruction sent
    twice (the second may be a clarification).

    Defaults: ``overlap`` 0.6, stop at the 3rd instruction (the 2nd restatement)
    with nothing new since the first, warn at the same point (there is no earlier
    point a warning is reliable: warning at the 2nd instruction warns 9 of the 28
    Magentic-One runs labelled not-a-loop). Measured with ``benchmarks/quality.py``
    on the corpus's Magentic-One runs (21 loops, 28 labelled not-a-loop): 4 more
    loops stopped, no run labelled not-a-loop stopped. Without the address (every
    page compared with every earlier one) 3 of the 28 are stopped: search-result
    pages of different restaurants share most of their words.
    """

    name = "repeated_instruction"
    kinds = frozenset({MODEL, TOOL_RESULT, USER})

    def __init__(self, overlap: float = 0.6, warn_at: int = 3, stop_at: int | None = 3) -> None:
        if not 0 < overlap <= 1:
            raise ValueError(f"overlap must be in (0, 1], not {overlap!r}")
        self.overlap = overlap
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), InstructionState)
        ev = ctx.event
        kind = ev.kind
        if kind == MODEL:
            # an instructed agent's message is its reply, addressed back or not (a
            # worker answering its manager with ``to`` set is news for the manager's
            # thread, then an instruction of its own)
            if ev.agent and st.threads:
                self._reply(st, ev.agent, ev.text if ev.text_known else None)
            if ev.agent and ev.to and ev.to != ev.agent and ev.to.lower() != "user":
                return self._instruction(ctx, st, ev.agent, ev.to)
            return None
        if not st.threads:
            return None  # no instruction yet: nothing to judge, no page to keep
        if kind == USER or self._new_result(ctx, st):
            st.news += 1
        return None

    @staticmethod
    def _new_result(ctx: Context, st: InstructionState) -> bool:
        """Whether a tool result brings something new: not seen recently (the run's
        shared fingerprints), and, for a page, not a page its address already showed."""
        if not ctx.novel:
            return False
        page = show_page(st.pages, ctx)
        return page is None or page.count == 1

    @staticmethod
    def _reply(st: InstructionState, agent: str, text: str | None) -> None:
        """A message from an agent that has been instructed: news when it says
        something it had not just said (or what it said was not recorded)."""
        fp = fingerprint(text.strip()) if text is not None else None
        suffix = ">" + agent
        new = False
        for pair, thread in st.threads.items():
            if pair.endswith(suffix):
                new = new or fp is None or fp != thread.reply
                thread.reply = fp
        if new:
            st.news += 1

    def _instruction(
        self, ctx: Context, st: InstructionState, sender: str, recipient: str
    ) -> Finding | None:
        ev = ctx.event
        if not ev.text_known:
            return None
        text = ev.text.strip()[:_TEXT_CHARS]
        if not text:
            return None
        pair = f"{sender}>{recipient}"
        threads = st.threads
        thread = threads.pop(pair, None)
        if thread is None:
            thread = Thread(st.news)
        words = request_words(text)
        restates = any(request_overlap(old, words) >= self.overlap for old in thread.recent)
        if restates and thread.mark == st.news:
            thread.count += 1
            thread.steps.append(ctx.step)
            trim(thread.steps, _STEPS_MAX)
        else:
            thread.count = 0
            thread.steps = [ctx.step]
        thread.mark = st.news
        thread.recent.append(words)
        trim(thread.recent, _RECENT)
        threads[pair] = thread
        if len(threads) > _THREADS_MAX:
            del threads[next(iter(threads))]
        count = thread.count + 1  # instructions, the first included
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        action = (
            f"Give {recipient} a different instruction, or decide with what you have."
            if severity is Severity.WARN
            else f"Stop re-sending it: {recipient}'s work is not bringing anything new."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(thread.steps),
            f"{sender} has sent {recipient} the same instruction {count} times while "
            f"nothing new came back (latest: {preview(text, 60)!r}). {action}",
            f"{pair}@{thread.steps[0]}",
        )
