"""Restated reply: an agent telling the user the same thing, turn after turn."""

from __future__ import annotations

import re
from typing import Any, Final, final

from ..events import MODEL, TOOL_CALL, TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..fingerprints import lower_text
from ..redact import redact
from ..state import DetectorState
from ..text import phrase_lower, split_words, word_mark
from .base import Context, Detector, preview, severity_for, trim

__all__ = ["RestatedReply"]

_REPLIES_MAX: Final = 3  # earlier replies a new one is compared with
_WORDS_MAX: Final = 80  # words kept per reply: a restated request or refusal shows early
_STEPS_MAX: Final = 8
_REPLY_CHARS: Final = 600  # of a reply, kept until the user's turn (80 words fit)
# Words that carry no request: function words, and the pleasantries every support
# reply is wrapped in ("if you have any other questions, feel free to reach out"),
# which would otherwise make any two replies share a long run of words.
_FILLER: Final = frozenset(
    [
        "a", "an", "the", "in", "of", "for", "on", "to", "at", "by", "with", "and", "or", "is",
        "are", "be", "been", "was", "were", "it", "this", "that", "these", "those", "i", "you",
        "we", "he", "she", "they", "me", "my", "your", "our", "us", "please", "could", "would",
        "can", "will", "shall", "should", "may", "might", "do", "does", "did", "so", "if", "as",
        "but", "not", "no", "yes", "any", "all", "some", "have", "has", "had", "from", "about",
        "into", "than", "then", "there", "here", "what", "which", "who", "whom", "when",
        "where", "why", "how", "just", "also", "very", "really", "only", "more", "most", "such",
        "own", "same", "too", "further", "once", "again", "let", "ll", "re", "ve", "don", "s",
        "t", "m", "d", "am", "its", "know", "help", "assist", "assistance", "assisting",
        "question", "questions", "feel", "free", "reach", "out", "happy", "glad", "anything",
        "else", "need", "like", "today", "day", "great", "welcome", "sure", "understand",
        "concern", "concerns", "apologize", "sorry", "inconvenience", "thank", "thanks",
        "appreciate", "patience", "ready", "whenever", "time", "take", "proceed", "able",
        "hello", "hi",
    ]
)  # fmt: skip
_HASH_MASK: Final = 0xFFFFF  # 20 bits per word: a run of 4 colliding by chance is ~1e-24
# A sentence of a reply that asks the user for something: a question, or a request.
_SENTENCES: Final = re.compile(r"[.!?]\s+|\n")
_ASKS: Final = re.compile(
    r"\b(?:please (?:provide|share|send|confirm|let me know|tell me|check|look|find|locate)"
    r"|i (?:will |still )?need (?:your|the))\b"
)
# The words of asking itself, which two different requests share ("could you provide
# the dates?", "could you provide the cabin class?"): what is asked for is the rest.
_ASKING: Final = frozenset(
    [
        "provide", "share", "send", "confirm", "tell", "give", "want", "specify", "clarify",
        "verify", "check", "kindly", "mind", "lets", "details", "detail", "information",
        "info", "okay", "ok", "other",
    ]
)  # fmt: skip
# Words by which a request points back at the sentence before it ("Without the
# reservation number I cannot go on. Can you provide it?").
_BACK: Final = frozenset(["it", "that", "this", "them", "these", "those", "one"])
_ASKED_MAX: Final = 24  # words of what a reply asks for, kept until the next reply
# A user turn saying they do not have what was asked for, or will look for it later.
_DEFERS: Final = re.compile(
    r"\b(?:(?:don'?t|do not|didn'?t|did not|haven'?t|have not) (?:have|know|remember|see"
    r"|find)|(?:can'?t|cannot|couldn'?t|could not|unable to) (?:find|locate|remember|recall"
    r"|access)|not (?:handy|with me|on me)|(?:let me|i'?ll|i will|i need to|i'?m going to)"
    r" (?:check|look|search|dig|find|get back)|(?:still|while i'?m|while i am) (?:looking"
    r"|searching|checking)|get back to you)\b"
)


def _asked_for(text: str) -> list[int]:
    """What a reply asks the user for, as word fingerprints: the content words of its
    questions and requests, and of the sentence before each ("Without the reservation
    number I cannot go on. Can you provide it?"); none when it asks nothing."""
    if "?" not in text:
        low = lower_text(text)
        if "please" not in low and "need " not in low:
            return []  # most replies ask nothing: one pass over the text tells
    asked: set[int] = set()
    sentences = _SENTENCES.split(text)
    for i, sentence in enumerate(sentences):
        if "?" not in sentence and _ASKS.search(lower_text(sentence)) is None:
            continue
        words = split_words(sentence)
        if i and not _BACK.isdisjoint(words):
            words += split_words(sentences[i - 1])
        for word in words:
            if word not in _FILLER and word not in _ASKING and len(word) >= 2:
                asked.add(word_mark(word))
    return sorted(asked)[:_ASKED_MAX]


def _defers(text: str) -> bool:
    """Whether a user turn says they do not have what was asked for (yet)."""
    return _DEFERS.search(phrase_lower(text)) is not None


def _tokens(text: str) -> list[int]:
    """A reply as word fingerprints (compact, and no text kept in a stored state):
    positive for a word that carries content, negative for filler."""
    out: list[int] = []
    for word in split_words(text)[:_WORDS_MAX]:
        h = (word_mark(word) & _HASH_MASK) + 1
        out.append(-h if word in _FILLER else h)
    return out


def _shared_content(a: list[int], b: list[int], min_run: int) -> int:
    """How many content words of ``a`` lie in runs of at least ``min_run`` words that
    ``b`` holds too: what the reply says again, clause by clause."""
    positions: dict[int, list[int]] = {}
    for j, w in enumerate(b):
        positions.setdefault(w, []).append(j)
    covered: set[int] = set()
    previous: dict[int, int] = {}
    for i, w in enumerate(a):
        current: dict[int, int] = {}
        longest = 0
        for j in positions.get(w, ()):
            run = previous.get(j - 1, 0) + 1
            current[j] = run
            if run > longest:
                longest = run
        if longest >= min_run:
            covered.update(range(i - longest + 1, i + 1))
        previous = current
    return sum(1 for i in covered if a[i] > 0)


@final
class ReplyState(DetectorState):
    """The agent's recent replies to the user and how many restated an earlier one."""

    __slots__ = (
        "acted", "asked", "asks", "asks_start", "count", "deferred", "pending", "replies",
        "start", "steps",
    )  # fmt: skip

    def __init__(self) -> None:
        self.acted = False  # the agent made a tool call since the user's last turn
        # The reply awaiting the user's turn, clipped: it is read only if a user turn
        # follows (most model outputs in a run with tools never become replies).
        self.pending: str | None = None
        self.replies: list[list[int]] = []  # earlier replies since the last progress
        self.count = 0  # replies that restated an earlier one since the last progress
        self.start = -1  # event index of the first of them
        self.steps: list[int] = []  # evidence: the restating replies and user turns
        self.asked: list[int] = []  # what the last reply asked the user for (fingerprints)
        self.asks = 0  # replies in a row asking for what the one before asked for
        self.asks_start = -1  # event index of the first of them
        # the user said, since the last progress, they do not have what the agent needs
        # (or will look for it): the agent restating its reply is not holding a line
        # against a user who insists, it is not going on without what it lacks
        self.deferred = False

    def dump(self) -> Any:
        # the reply awaiting the user's turn is the one text this state keeps: redacted
        # when the state is written, not on every model output (most never become a
        # reply); _judge reads it redacted too, so a round trip changes nothing
        pending = None if self.pending is None else redact(self.pending)
        return [
            self.acted,
            self.count,
            pending,
            self.replies,
            self.start,
            self.steps,
            self.asked,
            self.asks,
            self.asks_start,
            self.deferred,
        ]

    @classmethod
    def load(cls, data: Any) -> ReplyState:
        st = cls()
        st.acted, st.count, st.pending, st.replies, st.start, st.steps, *asking = data
        st.asked, st.asks, st.asks_start, st.deferred = asking
        return st

    def restart(self, asking: bool = True) -> None:
        """Start the restatement count afresh, and the asking count too unless
        ``asking`` is False (the user still has not given what was asked for)."""
        self.replies = []
        self.count = 0
        self.deferred = False
        if asking:
            self.steps = []
            self.asked = []
            self.asks = 0


class RestatedReply(Detector):
    """An agent answering the user with the same request, refusal or explanation
    turn after turn, while nothing new happens.

    A conversation loops in words, not calls: a support agent asks for the
    reservation number the user has said they do not have; a refusal is restated each
    time the user insists; a farewell is followed by a return and another farewell.
    Each reply (the agent's last text before a user turn, with no tool call after it)
    is compared with the agent's last 3 replies: it *restates* one when the two share
    a run of at least ``min_run`` words holding at least ``min_content`` words that
    are not filler (function words and the pleasantries support replies are wrapped
    in). Paraphrase keeps such runs ("I am unable to add travel insurance to your
    existing reservation"); two replies that only share "if you have any other
    questions, feel free to reach out" do not restate each other.

    Asking again is counted apart, with the same thresholds: a reply that asks the
    user (a question, "please provide ...", "please check your email for ...", "I still
    need the ...") for what the reply before asked for, in
    new words ("your reservation ID", "the booking reference", "your confirmation
    number"): a content word of the two requests in common, the words of asking
    ("provide", "confirm", "details") left out so that a form filled one question at
    a time ("the date?", "the cabin class?", "how many passengers?") is not asking
    again.

    Progress restarts the count: a tool result not seen before (the agent looked
    something up, a change went through), or a user turn that brings something
    specific (an id, a code, a number: RunState.news_step). A user who defers,
    insists or thanks does not; nor, for asking again, does a user who brings other
    details but says they do not have what was asked for ("I don't have it handy; the
    flight was from ATL", "let me check my email"): asked a 5th time for it, with
    nothing the user gave put to use, the agent is stopped. A reply can restate the
    last one and ask again at once: both counts go on.

    A stop needs a user who said they cannot give what would move things on ("I don't
    have it", "I'll look for it", "get back to you"; since the last progress): the agent
    restating its reply is then not going on without what it lacks. Against a user who
    only insists (asks again for what was refused), restating is holding a line: the
    user is the one going round, and the agent is told once (the warning), not stopped.
    Measured on public tau2-bench trajectories (677 conversations of six agent systems
    the corpus does not have: airline, retail, medical triage; benchmarks/heldout.py):
    the stop had ended 3 solved conversations (3 agents refusing a refund or an
    exception, reward 1) and 2 others (a correct "one passenger" restated to a user sure
    of three; a hold message after a transfer); with this rule 2 of 517 solved runs are
    stopped (an agent calling the transfer tool 4 times). On the corpus: 3 tau-bench
    runs labelled loops (an insurance and a refund refusal restated to a user who
    insists; all three solved) are warned instead of stopped (tau-bench 5/12 stopped),
    no other run changes.

    A deferral is read as the user wrote it: "I don’t have it" (a typographic
    apostrophe, as phones and many simulated users write; 475 of the 677 tau2-bench
    conversations have such user turns) is "I don't have it". It holds until the next
    progress: a lookup that finds something new (the agent found the booking by the
    user id) ends it, with or without replies to restate. Measured: on tau2-bench no
    stop more (reading the apostrophe alone would have stopped one conversation: a
    correct "one passenger" restated after the agent had found the booking the user
    could not name); on the corpus one warning more on a run labelled not-a-loop, an
    agent asking 4 times for a reservation id the user said they would look up later,
    with the user id it never used in hand: the warning's advice ("go on with what the
    user did give") is what that agent needed.

    Deliberately ignores: messages between agents (``to`` another agent), replies
    followed by a tool call (the agent acted), and repetition that comes with new
    results (confirming a booking again after a change).

    A turn in which the agent made a tool call does not count: looking something up
    or changing something is work, even when the reply that follows sounds like the
    last one (a chat answering each question from the same forecast); the call
    detectors judge that turn.

    Defaults: warn at the 3rd restating reply, stop at the 4th; a restatement shares
    at least 2 content words in runs of 4 words or more. Measured (before the rule on
    insisting users above) with
    ``benchmarks/quality.py`` on the corpus's customer-service runs (tau-bench, 103
    hand-labelled conversations: 8 of the 12 loops are talk without calls):

    ========================  ============  =====================  ===============
    setting                   loops stopped  not-a-loop stopped    solved stopped
    ========================  ============  =====================  ===============
    stop at the 3rd           6 of 8 talk   4 of 90                6 of 51
    stop at the 4th (default) 6 of 8 talk   0 of 90                4 (all loops)
    stop at the 5th           2 of 8 talk   0 of 90                1 (a loop)
    runs of 3 words           6 of 8 talk   1 of 90                5
    runs of 5 words           4 of 8 talk   0 of 90                3
    ========================  ============  =====================  ===============

    The runs stopped at the 3rd and not the 4th are customers re-asking a question
    the agent answers each time, ending satisfied (labelled not loops). Warning at the
    2nd restatement warns 11 of the 90 not-a-loop conversations (5 at the 3rd) and
    stops no loop more.

    Asking again, measured the same way: in the 90 not-a-loop conversations an agent
    asks again at most twice in a row (5 runs; 30 once), so the warning (the 3rd time)
    and the stop (the 4th) reach none of them; of the 12 loops, one asks again 3 times
    (stopped as a restatement already). No other source of the corpus has a reply
    that asks again: their agents talk to tools or to other agents. Keeping the count
    across a user turn that defers while it brings other details, and counting a reply
    that restates and asks again in both counts: one more labelled loop stopped (an
    agent asking for a reservation number five times while the user, still looking
    for it, adds route, date and budget) and one more warned; no other change on the 8
    sources (no new warning or stop on a run labelled not-a-loop or solved). Either
    change alone stops nothing more. A request counts the sentence before it only when
    it points back at it ("can you provide *it*?"): "if you have any other questions,
    please let me know" asks for nothing, whatever the answer before it said.
    """

    name = "restated_reply"
    kinds = frozenset({MODEL, TOOL_CALL, TOOL_RESULT, USER})

    def __init__(
        self,
        warn_at: int = 3,
        stop_at: int | None = 4,
        min_run: int = 4,
        min_content: int = 2,
    ) -> None:
        if min_run < 2 or min_content < 1:
            raise ValueError("min_run must be at least 2 and min_content at least 1")
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.min_run = min_run
        self.min_content = min_content

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), ReplyState)
        ev = ctx.event
        kind = ev.kind
        if kind == MODEL:
            if ev.to is not None and ev.to.lower() != "user":
                return None  # a message to another agent, not a reply
            if ev.text_known and ev.text and not ev.text.isspace():
                # kept in the run state until the user's turn (redacted at rest: dump)
                st.pending = ev.text[:_REPLY_CHARS]
            return None
        if kind == TOOL_CALL:
            st.pending = None  # the agent acted: its text before the call is no reply
            st.acted = True
            return None
        if kind == TOOL_RESULT:
            if ctx.novel:  # something new came back
                if st.replies:
                    st.restart()
                # what the user could not give was found another way: a deferral is
                # read "since the last progress", with or without replies to restate
                st.deferred = False
            return None
        # a user turn: judge the reply it answers, then see what the user brought
        reply, st.pending = st.pending, None
        acted, st.acted = st.acted, False
        # read only in a conversation that has replies to restate or a request to repeat
        defers = bool(st.replies or st.asked or reply is not None) and _defers(ev.text)
        st.deferred = st.deferred or defers
        finding = None if reply is None else self._judge(ctx, st, redact(reply), acted)
        if ctx.state.news_step == ctx.step and (st.replies or st.asked):
            # A user who brings something else but says they do not have what was asked
            # for ("I don't have it handy, but the flight was from ATL"): asking for it
            # again is still asking again.
            st.restart(asking=not (st.asked and defers))
            st.deferred = defers
        return finding

    def _judge(self, ctx: Context, st: ReplyState, text: str, acted: bool) -> Finding | None:
        reply = _tokens(text)
        # A turn in which the agent looked something up or changed something is work,
        # even when the reply that follows sounds like the last one (a chat that
        # answers each question from the same forecast); the call detectors judge it.
        restates = not acted and any(
            _shared_content(reply, old, self.min_run) >= self.min_content for old in st.replies
        )
        st.replies.append(reply)
        trim(st.replies, _REPLIES_MAX)
        # A reply may restate the last one and ask again for the same thing: both
        # counts go on, and the stronger finding of the two is the answer.
        asking = self._asks_again(ctx, st, text, acted)
        if not restates:
            return asking
        st.count += 1
        if st.count == 1:
            st.start = ctx.step
        restating = self._finding(
            ctx,
            st,
            st.count,
            text,
            "You have told the user the same thing {n} times with nothing new in between "
            "(latest: {latest!r}).",
            (
                "Answer what the user asks, act on what you were told, or offer another way.",
                "The conversation is going round: stop repeating it; hand over, act, or end it.",
            ),
            f"reply@{st.start}",
            stops=st.deferred,
        )
        if asking is not None and (restating is None or asking.severity is Severity.STOP):
            return asking
        return restating

    def _asks_again(self, ctx: Context, st: ReplyState, text: str, acted: bool) -> Finding | None:
        """A reply asking the user, in new words, for what the reply before asked for
        (a content word of its questions in common), the user having brought nothing
        new in between: the same thresholds as a restatement, counted apart."""
        asked = _asked_for(text)  # a reply after a lookup may be asked again too
        again = not acted and bool(asked) and not set(asked).isdisjoint(st.asked)
        st.asked = asked
        if not again:
            st.asks = 0
            return None
        st.asks += 1
        if st.asks == 1:
            st.asks_start = ctx.step
        return self._finding(
            ctx,
            st,
            st.asks,
            text,
            "You have asked the user for the same thing {n} times and they have not given "
            "it (latest: {latest!r}).",
            (
                "Go on with what the user did give, or offer another way.",
                "The user is not giving it: stop asking; go on without it, hand over, or end it.",
            ),
            f"ask@{st.asks_start}",
        )

    def _finding(
        self,
        ctx: Context,
        st: ReplyState,
        count: int,
        text: str,
        said: str,
        actions: tuple[str, str],
        pattern: str,
        stops: bool = True,
    ) -> Finding | None:
        """Note the user turn as evidence; the finding ``count`` calls for, if any.
        ``said`` is formatted (``n``: the times said, ``latest``: the reply's preview)
        only when there is a finding: most counted replies call for none. ``actions``:
        what to do instead, when warned and when stopped."""
        if not st.steps or st.steps[-1] != ctx.step:
            st.steps.append(ctx.step)
            trim(st.steps, _STEPS_MAX)
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        if severity is Severity.STOP and not stops:
            severity = Severity.WARN  # told once (warnings are given once per pattern)
        action = actions[0] if severity is Severity.WARN else actions[1]
        message = said.format(n=count + 1, latest=preview(text, 80)) + " " + action
        return Finding(self.name, severity, ctx.step, tuple(st.steps), message, pattern)
