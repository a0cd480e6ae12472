"""Ping-pong: two or more agents passing the same request back and forth."""

from __future__ import annotations

import re
from typing import Any, Final, final

from ..embeddings import Comparer, Embedder, EmbeddingCache, resolve_embedder
from ..events import MODEL, SPAN
from ..findings import Finding, Severity
from ..redact import redact
from ..state import DetectorState, Record, dump_map, load_map
from ..text import (
    HEAD_RUNG,
    fingerprint,
    head_marks,
    request_overlap,
    request_words,
    shared_head,
    word_mark,
)
from .base import Context, Detector, preview, severity_for, trim

__all__ = ["PingPong"]

_PAIRS_MAX: Final = 8  # agent pairs tracked per run (LRU)
_RECENT: Final = 4  # messages per pair a new one is compared with
_SPANS_MAX: Final = 64  # span id -> agent name, to resolve handoffs in span trees
_STEPS_MAX: Final = 10
_TEXT_CHARS: Final = 400  # a request shows in its first sentences; bounds state
_AGENT_SPANS: Final = frozenset({"agent", "handoff", "subagent", "sub_agent", "crew", "task"})
# An opening a message shares with its sender's last one is a preamble (dropped before
# comparing) when it fills at least half of what is compared: shorter, it is the request
# itself sent again with something added ("Please unzip the file ... and list the
# contents"), as Magentic-One's orchestrator does in the corpus's labelled loops. What
# follows the preamble must hold this many content words, or the whole message is compared.
_PREAMBLE_CHARS: Final = _TEXT_CHARS // 2
_BODY_WORDS: Final = 3
# A message longer than this carries a payload past its request (code, a document, a
# report): see PingPong and Event.payload_key.
_PAYLOAD_AFTER: Final = 2 * _TEXT_CHARS
# Marks kept of the numbers a message names (_NUMBERS).
_SPECIFICS_MAX: Final = 16


@final
class Message(Record):
    """A message between two agents, kept to compare the next ones with."""

    __slots__ = ("again", "fp", "payload", "sender", "specs", "text", "words")

    def __init__(
        self,
        sender: str,
        fp: str,
        text: str,
        words: dict[str, int],
        payload: str = "",
        specs: list[int] | None = None,
        again: bool = False,
    ) -> None:
        self.sender = sender
        self.fp = fp  # fingerprint of the text
        # fingerprint of the whole message when it carries a payload past its request
        # (_PAYLOAD_AFTER), else ""
        self.payload = payload
        self.text = text  # clipped and redacted; "" unless embeddings compare messages
        self.words = words  # content words (dict keys: a set that serialises; long ones
        # by their fingerprint: text.word_at_rest)
        # marks of the numbers it names (_specifics): a message that names one the
        # other did not (another price, quantity, step) says something new
        self.specs = specs if specs is not None else []
        self.again = again  # it restated one of the pair's messages before it


@final
class Exchange(Record):
    """What passed between one pair of agents since the run last learned something."""

    __slots__ = ("mark", "n", "recent", "steps", "who")

    def __init__(self, mark: int) -> None:
        self.mark = mark  # the run's novelty mark when the exchange (re)started
        self.n = 0  # restated messages in a row
        self.who: list[str] = []  # senders of the restatements
        self.recent: list[Message] = []  # the last few messages (at most 4)
        self.steps: list[int] = []  # evidence

    def dump(self) -> Any:
        return [self.mark, self.n, self.who, [m.dump() for m in self.recent], self.steps]

    @classmethod
    def load(cls, data: Any) -> Exchange:
        mark, n, who, recent, steps = data
        ex = cls(mark)
        ex.n, ex.who, ex.steps = n, who, steps
        ex.recent = [Message.load(m) for m in recent]
        return ex


@final
class PingPongState(DetectorState):
    """Exchanges by agent pair, who addressed whom, agent spans by id, and how each
    agent's last message opened."""

    __slots__ = ("asked", "heads", "last", "pairs", "spans")

    def __init__(self) -> None:
        self.last: str | None = None  # the last sender
        self.pairs: dict[str, Exchange] = {}  # "a<>b" -> exchange (LRU, at most 8)
        self.asked: dict[str, str] = {}  # agent -> who last addressed it
        self.spans: dict[str, str] = {}  # span id -> agent name
        # agent -> [the length of its preamble, *text.head_marks of its last message]
        # (LRU, at most 8)
        self.heads: dict[str, list[int]] = {}

    def dump(self) -> Any:
        return [self.last, dump_map(self.pairs), self.asked, self.spans, self.heads]

    @classmethod
    def load(cls, data: Any) -> PingPongState:
        st = cls()
        st.last, pairs, st.asked, st.spans, st.heads = data
        st.pairs = load_map(Exchange, pairs)
        return st


class PingPong(Detector):
    """Agents handing the same request back and forth: A asks B, B asks A back,
    A asks again, in the same or other words, while nothing new happens.

    Messages are ``model`` events from an ``agent``; the recipient is ``to`` when
    given. Without ``to``, in a run that addresses its messages (Magentic-One's
    orchestrator), a message is a reply to whoever last addressed its sender, or a
    note to nobody (the orchestrator's ledger); in a run that never uses ``to``
    (an AG2 group chat), it is a reply to the agent that spoke last. Handoffs in span
    trees count too: a ``span`` of an agent type opened under another agent's span
    is a message from the parent agent to the child, its ``text`` the request.

    Per pair of agents, each message is compared with the pair's last 4 messages,
    from either side. It *restates* one of them when, after dropping filler words,
    they share at least ``overlap`` of the larger one's content words,
    or, with an embedder (``semantic=True`` for the default local model, or
    ``embedder=``), when their meaning matches (see :mod:`.semantic`). The bounce
    count grows by one per restating message and is reset by a message that says
    something new, or by new information anywhere in the run (a new call, result
    or user input): an exchange that makes progress is work, not ping-pong. A
    finding needs both agents to have restated (the exchange pattern); an agent
    repeating itself alone is Stagnation's (or Semantic's) case.

    A message that runs past twice the part compared carries a payload (code, a
    document, a report): two such messages whose whole texts differ are new work to
    look at, not the same request, however alike their openings (a framework's template
    around each round of code review), nor is one that runs past that part the same as
    one that does not. Measured on 101 public ChatDev logs (a software-company role-play
    the corpus does not have; ``benchmarks/heldout.py``): this detector stopped 71 of
    them in their review rounds, 1 now (a review round whose messages each repeat an
    earlier one word for word); no run of the 8 sources changes.

    A message that names a number the compared one did not (a price, a quantity, a
    step) says something new in the same words, as long as the other side's last
    answer was new too: a negotiation converging on a price and a plan handed out step
    by step are progress, and both were stopped at their 4th message. A manager whose
    every new item comes back with the same error is asking the same thing again.
    Numbers that move by themselves are not news: clock readings (dates, times, epoch
    seconds, "visited 9 seconds ago") and counts of tries ("Attempt 3").
    Measured: no run of the 8 sources or of 91 held-out ChatDev logs changes; counting
    paths and ids too would lose 2 labelled Magentic-One loops.

    Deliberately ignores: one-sided repetition, agent talking to the user, long
    conversations that keep adding content, and restatements separated by new
    tool results.

    Defaults: ``overlap`` 0.6: the conformance A-ping-pong pair "Could you clarify
    which report you need?" / "Please clarify which report you need me to write."
    shares 0.8 of its content words, the messages of a productive manager/worker
    exchange (S-manager-worker-progress) at most 0.12, and the reworded clarify loop
    (S-clarify-ping-pong) 0.11-0.67, which is why rewording needs the semantic
    comparison. Warn at the 2nd bounce, stop at the 3rd: A-ping-pong warns at step
    3 (expected by 5). Measured with ``benchmarks/quality.py`` on the corpus: stopping
    at the 3rd instead of the 6th stops 3 more labelled Magentic-One loops (the
    orchestrator re-sending "unzip the file" to a file surfer that returns the same
    "Download complete" page each time) and no run labelled not-a-loop, no solved
    run and no unlabelled run; stopping at the 4th stops 2 of the 3. Lexical
    PingPong still stops no solved run (tau_bench, 51).
    """

    name = "ping_pong"
    # Messages and handoffs only: "has anything new happened since?" is the run's
    # count of new calls, results and inputs (RunState.news), kept by the engine.
    kinds = frozenset({MODEL, SPAN})

    def __init__(
        self,
        overlap: float = 0.6,
        warn_at: int = 2,
        stop_at: int | None = 3,
        semantic: bool = False,
        embedder: Embedder | EmbeddingCache | None = None,
        similarity: float = 0.72,
    ) -> None:
        if not 0 < overlap <= 1:
            raise ValueError(f"overlap must be in (0, 1], not {overlap!r}")
        self.overlap = overlap
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.semantic = semantic
        self.embedder = embedder
        self.similarity = similarity
        cache = resolve_embedder(embedder) if (semantic or embedder is not None) else None
        self._compare = Comparer(cache, similarity, min_words=3) if cache is not None else None

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), PingPongState)
        sender, recipient, text = self._message(st, ctx)
        if sender is None:
            return None
        st.last = sender
        if recipient is None or recipient == sender or not text:
            return None
        payload = ctx.event.payload_key if len(text) > _PAYLOAD_AFTER else ""
        text, words = _body(st, sender, text)
        pair = "<>".join(sorted((sender, recipient)))
        pairs = st.pairs
        entry = pairs.pop(pair, None)
        mark = ctx.state.news
        if entry is None or entry.mark != mark:
            entry = Exchange(mark)
        fp = fingerprint(text)
        # the text is kept (redacted) only for the embeddings to compare with
        kept = redact(text) if self._compare is not None else ""
        specs = _specifics(text)
        # New numbers are news only while the other side answers with something new: a
        # manager handing out item after item that each come back with the same error
        # is asking the same thing again.
        moving = specs
        for m in reversed(entry.recent):
            if m.sender != sender:  # the other side's last answer
                if m.again:
                    moving = []
                break
        restates = any(self._same(old, fp, kept, words, payload, moving) for old in entry.recent)
        if restates:
            entry.n += 1
            if sender not in entry.who:
                entry.who.append(sender)
            entry.steps.append(ctx.step)
            trim(entry.steps, _STEPS_MAX)
        else:
            entry.n = 0
            entry.who = []
            entry.steps = [ctx.step]
        recent = entry.recent
        recent.append(Message(sender, fp, kept, words, payload, specs, restates))
        trim(recent, _RECENT)
        pairs[pair] = entry
        if len(pairs) > _PAIRS_MAX:
            del pairs[next(iter(pairs))]
        if not restates or len(entry.who) < 2:
            return None
        count = entry.n
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        a, b = pair.split("<>", 1)
        action = (
            "One of you must answer it or decide with what you have, instead of asking back."
            if severity is Severity.WARN
            else "This exchange is not moving forward; stop and decide."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry.steps),
            f"{a} and {b} have passed the same request back and forth {count} times "
            f"(latest from {sender}: {preview(text, 60)!r}). {action}",
            f"{pair}@{entry.steps[0]}",
        )

    def _same(
        self,
        old: Message,
        fp: str,
        text: str,
        words: dict[str, int],
        payload: str,
        specs: list[int],
    ) -> bool:
        if payload != old.payload:
            return False  # the same request with another payload (or none): new work
        if old.fp == fp:
            return True
        if _names_more(specs, old.specs):
            # another price, quantity or step in the same words: a negotiation that
            # moves, a plan handed out step by step
            return False
        if request_overlap(old.words, words) >= self.overlap:
            return True
        if self._compare is None:
            return False
        return self._compare.same((old.fp, old.text), (fp, text))

    @staticmethod
    def _message(st: PingPongState, ctx: Context) -> tuple[str | None, str | None, str]:
        """(sender, recipient, text) of a message or handoff; sender None if neither."""
        ev = ctx.event
        if ev.kind == MODEL:
            sender = ev.agent
            if not sender:
                return None, None, ""
            asked = st.asked
            if ev.to:
                asked.pop(ev.to, None)
                asked[ev.to] = sender  # who last addressed ev.to: its reply goes back there
                if len(asked) > _PAIRS_MAX:
                    del asked[next(iter(asked))]
                return sender, ev.to, ev.text.strip()
            if asked:
                # a run that addresses messages: an unaddressed one is a reply to whoever
                # last addressed this agent, or a note to nobody (a ledger, a thought)
                return sender, asked.get(sender), ev.text.strip()
            return sender, st.last, ev.text.strip()  # group chat: reply to last speaker
        # span: remember agent spans; one opened under another agent's span is a handoff
        spans = st.spans
        if (ev.type or "").lower() not in _AGENT_SPANS or not ev.name:
            return None, None, ""
        if ev.id is not None:
            spans[ev.id] = ev.name
            if len(spans) > _SPANS_MAX:
                del spans[next(iter(spans))]
        caller = spans.get(ev.parent) if ev.parent is not None else None
        caller = caller or ev.agent
        if caller is None:
            return None, None, ""
        return caller, ev.name, ev.text.strip()


# The numbers a message names (a price, a quantity, a step): what moves in an exchange
# that makes progress in the same words. A number is not part of a word, a path, an id,
# a date or a clock ("gpt4", "/pdf/2007", "msg-1007", "2024-05-03", "10:42"), and has at
# most 7 digits before its separators (longer runs are ids and epoch times). A path or
# an id that changes between two requests is as often the same request fumbled (a path
# with a segment doubled). The pattern opens with its digit (the lookbehind follows it):
# the regular expression engine then skips to digits instead of trying every position.
_NUMBERS: Final = re.compile(r"\d(?<![\w@#/:.-]\d)\d{0,6}(?:[.,]\d+)*(?![\w@#/:-]|[.,]\d)")
# A time told relative to now ("visited 9 seconds ago"): a clock reading, which moves
# while nothing else does (Magentic-One's file surfer says it of a page it shows again).
# Matched right after a number.
_AGO_AFTER: Final = re.compile(
    r"(?:\.\d+)?\s*(?:ms|milliseconds?|s|secs?|seconds?|mins?|minutes?|h|hrs?|hours?"
    r"|days?|weeks?|months?|years?)\s+ago\b",
    re.IGNORECASE,
)
# A count of the tries itself ("Attempt 3:", "retry 2 of 5", "round 4"): a number that
# moves because the same thing is asked again. Searched in the few characters before a
# number.
_COUNTER_BEFORE: Final = re.compile(
    r"\b(?:attempts?|tries|try|retry|retries|round|iteration)\s*#?\s*(?:\d+\s*(?:/|of)\s*)?$",
    re.IGNORECASE,
)
_COUNTER_WORDS: Final = ("attempt", "try", "tries", "round", "iteration")
_BEFORE: Final = 24  # characters before a number that may name it a count of tries


def _specifics(text: str) -> list[int]:
    """Marks of the numbers a message names (_NUMBERS), sorted, at most 16: kept in run
    state without the text. Clock readings are not among them ("9 seconds ago"), nor
    counts of tries. Most messages name few numbers and hold none of those phrases'
    words: one scan for digits, one lower-casing and a few substring searches."""
    found = list(_NUMBERS.finditer(text))
    if not found:
        return []
    low = text.lower()
    ago = "ago" in low
    counted = False
    for word in _COUNTER_WORDS:  # a loop, not any() over a generator (one per message)
        if word in low:
            counted = True
            break
    marks: set[int] = set()
    for m in found:
        start, end = m.start(), m.end()
        if ago and _AGO_AFTER.match(text, end) is not None:
            continue
        if counted and _COUNTER_BEFORE.search(text, max(0, start - _BEFORE), start):
            continue
        marks.add(word_mark(m.group()))
    return sorted(marks)[:_SPECIFICS_MAX]


def _names_more(specs: list[int], old: list[int]) -> bool:
    """Whether a message names a specific another did not. Of a message naming more
    than 16 only the lowest marks are kept, so a mark above the other's highest kept
    one is not told apart: it counts as named."""
    if not specs:
        return False
    known = set(old)
    top = old[-1] if len(old) >= _SPECIFICS_MAX else None
    return any(m not in known and (top is None or m < top) for m in specs)


def _body(st: PingPongState, sender: str, text: str) -> tuple[str, dict[str, int]]:
    """What of a message is compared, clipped, and its content words: the message
    without the long opening it shares with the sender's last message (to within 32
    characters), its preamble. A message that is, to within those 32 characters, the
    sender's last one again keeps the preamble learned before (a request re-sent is
    compared as itself). The whole message when too little is left to compare. A
    message too short to hold a preamble is marked by none (most messages: no hashing)."""
    heads = st.heads
    marks = head_marks(text) if len(text) >= _PREAMBLE_CHARS else []
    last = heads.pop(sender, None)
    preamble = 0
    if last is not None and marks:
        head = shared_head(last[1:], marks)
        preamble = last[0] if head + HEAD_RUNG > len(text) else head
        if preamble < _PREAMBLE_CHARS:
            preamble = 0
    heads[sender] = [preamble, *marks]
    if len(heads) > _PAIRS_MAX:
        del heads[next(iter(heads))]
    if preamble:
        body = text[preamble : preamble + _TEXT_CHARS]
        words = request_words(body)
        if len(words) >= _BODY_WORDS:
            return body, words
    whole = text[:_TEXT_CHARS]
    return whole, request_words(whole)
