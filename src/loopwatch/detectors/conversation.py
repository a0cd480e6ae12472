"""Restated reply: an agent telling the user the same thing, turn after turn."""

from __future__ import annotations

from typing import Any, Final, final

import xxhash

from ..events import MODEL, TOOL_CALL, TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..redact import redact
from ..state import DetectorState
from ..text import split_words
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


def _tokens(text: str) -> list[int]:
    """A reply as word fingerprints (compact, and no text kept in a stored state):
    positive for a word that carries content, negative for filler."""
    out: list[int] = []
    for word in split_words(text)[:_WORDS_MAX]:
        h = (xxhash.xxh32_intdigest(word.encode("utf-8", "surrogatepass")) & _HASH_MASK) + 1
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

    __slots__ = ("acted", "count", "pending", "replies", "start", "steps")

    def __init__(self) -> None:
        self.acted = False  # the agent made a tool call since the user's last turn
        # The reply awaiting the user's turn, clipped: it is read only if a user turn
        # follows (most model outputs in a run with tools never become replies).
        self.pending: str | None = None
        self.replies: list[list[int]] = []  # earlier replies since the last progress
        self.count = 0  # replies that restated an earlier one since the last progress
        self.start = -1  # event index of the first of them
        self.steps: list[int] = []  # evidence: the restating replies and user turns

    def dump(self) -> Any:
        # the reply awaiting the user's turn is the one text this state keeps: redacted
        # when the state is written, not on every model output (most never become a
        # reply); _judge reads it redacted too, so a round trip changes nothing
        pending = None if self.pending is None else redact(self.pending)
        return [self.acted, self.count, pending, self.replies, self.start, self.steps]

    @classmethod
    def load(cls, data: Any) -> ReplyState:
        st = cls()
        st.acted, st.count, st.pending, st.replies, st.start, st.steps = data
        return st

    def restart(self) -> None:
        self.replies = []
        self.count = 0
        self.steps = []


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

    Progress restarts the count: a tool result not seen before (the agent looked
    something up, a change went through), or a user turn that brings something
    specific (an id, a code, a number: RunState.news_step). A user who defers,
    insists or thanks does not.

    Deliberately ignores: messages between agents (``to`` another agent), replies
    followed by a tool call (the agent acted), and repetition that comes with new
    results (confirming a booking again after a change).

    A turn in which the agent made a tool call does not count: looking something up
    or changing something is work, even when the reply that follows sounds like the
    last one (a chat answering each question from the same forecast); the call
    detectors judge that turn.

    Defaults: warn at the 2nd restating reply, stop at the 4th; a restatement shares
    at least 2 content words in runs of 4 words or more. Measured with
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
    the agent answers each time, ending satisfied (labelled not loops).
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
        st = ctx.state.slot(self.name, ReplyState)
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
            if ctx.novel and st.replies:
                st.restart()  # something new came back
            return None
        # a user turn: judge the reply it answers, then see what the user brought
        reply, st.pending = st.pending, None
        acted, st.acted = st.acted, False
        finding = None if reply is None else self._judge(ctx, st, redact(reply), acted)
        if ctx.state.news_step == ctx.step and st.replies:
            st.restart()
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
        if not restates:
            return None
        st.count += 1
        if st.count == 1:
            st.start = ctx.step
        st.steps.append(ctx.step)
        trim(st.steps, _STEPS_MAX)
        severity = severity_for(st.count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        action = (
            "Answer what the user asks, act on what you were told, or offer another way."
            if severity is Severity.WARN
            else "The conversation is going round: stop repeating it; hand over, act, or end it."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(st.steps),
            f"You have told the user the same thing {st.count + 1} times with nothing new "
            f"in between (latest: {preview(text, 80)!r}). {action}",
            f"reply@{st.start}",
        )
