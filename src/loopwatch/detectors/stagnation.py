"""Stagnation: model outputs that restate each other, or say nothing, turn after turn."""

from __future__ import annotations

import re
from typing import Any, Final, final

from ..events import MODEL, TOOL_CALL, USER, fold_case_space
from ..findings import Finding, Severity
from ..state import KeyedState, StateError, Written, dump_map, load_map
from ..text import fingerprint, jaccard, plain_words, request_overlap, request_words
from .base import Context, Detector, preview, severity_for, trim

_AGENTS_MAX: Final = 16
_STEPS_MAX: Final = 8
# Only the first characters of an output are compared: a restatement shows from its
# start, and this bounds the cost per event and the state kept per agent.
_COMPARE_CHARS: Final = 1500
# Another agent's output that shares this much of its content words with an agent's
# last output (in its first characters) answers it in kind: a request bounced back is
# no news (PingPong's measure and threshold).
_ECHO_OVERLAP: Final = 0.6
_ECHO_CHARS: Final = 400
# Digits dropped from a user's message before it is compared with the one before.
_DIGITS: Final = b"0123456789"
_DIGIT: Final = re.compile(r"[0-9]")  # the same digits as _DIGITS, in any text


def _shared_head(a: str, b: str) -> int:
    """How many characters two texts share from their start."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _same(a: str, b: str) -> bool:
    """Equal once case and spacing are folded."""
    return a == b or fold_case_space(a) == fold_case_space(b)


@final
class Restatement(Written):
    """One agent's last output and how many outputs in a row restated it (written field
    by field: one is made for most model outputs, see state.Written)."""

    __slots__ = ("count", "payload", "steps", "text", "unasked")

    def __init__(self, text: str, step: int, payload: str = "") -> None:
        self.count = 1  # outputs in a row saying the same thing
        self.text = text  # the last of them, clipped
        self.steps = [step]  # evidence: their event indices (the last few)
        # Event.payload_key of the last of them: "" unless it ran past the characters
        # compared
        self.payload = payload
        # of the outputs counted after the first, those that answer no new message of
        # the user's (none came between, or it said again what the one before said)
        self.unasked = 0

    def dump(self) -> Any:  # in slot order, as Record.dump
        return [self.count, self.payload, self.steps, self.text, self.unasked]

    @classmethod
    def load(cls, data: Any) -> Restatement:
        if not isinstance(data, list) or len(data) != 5:
            raise StateError("Restatement: expected 5 fields")
        count, payload, steps, text, unasked = data
        entry = Restatement(text, 0, payload)
        entry.count, entry.steps, entry.unasked = count, steps, unasked
        return entry


@final
class StagnationState(KeyedState[Restatement]):
    """The last output of each agent since the last tool call (LRU, at most 16), and
    whether the user's last message said again what the one before it said."""

    __slots__ = ("user_again", "user_key")

    def __init__(self) -> None:
        super().__init__()
        # fingerprint of the user's last message, digits dropped (a harness saying
        # "found 2 actions" and then "found 3 actions" says the same); "" when there
        # was none, or the trace did not record it
        self.user_key = ""
        self.user_again = False  # the user's last message repeated the one before it

    def dump(self) -> Any:
        return [dump_map(self.by_key), self.user_key, self.user_again]

    @classmethod
    def load(cls, data: Any) -> StagnationState:
        if not isinstance(data, list) or len(data) != 3 or not isinstance(data[1], str):
            raise StateError("StagnationState: expected 3 fields")
        st = cls()
        st.by_key = load_map(Restatement, data[0])
        st.user_key, st.user_again = data[1], bool(data[2])
        return st


class Stagnation(Detector):
    """Consecutive model outputs of one agent that restate each other, or are empty.

    "Consecutive" means no tool call in between: when the agent acts between two
    outputs, the call-level detectors judge whether the action is a loop, and a
    thought restated before each new action is normal (clean runs do it). Outputs
    are compared per agent (the ``agent`` field), so two agents bouncing the same
    request back and forth are caught as each repeating itself. Another agent saying
    something new in between (not bouncing the request back) is news, as a tool call
    is: a manager handing out one item after another from a template, each answered by
    a worker's new reply, is not stuck. No run of the corpus changes by it.

    A user's message in between makes a reply in other words new: a support agent
    holding a correct refusal, in slightly other words each time, against a user who
    asks again in new words is not stagnating (the user is the one going round;
    ``restated_reply`` judges replies to a user, and tells the agent). Only the very
    same output (case and spacing folded) goes on counting across such a message, or
    an output near the last one when the user's message says again what the one
    before it said (its digits dropped: a harness rejecting the same mistake, "found
    2 actions", "found 3 actions"). Measured: no run of the 8 sources changes (their
    restated replies are judged by restated_reply first); on 677 public tau2-bench
    conversations one warning comes 3 events later. It removes the warning at the 2nd
    and the stop at the 4th reply of a refusal restated in words (a test); a harness's
    rejections written as user turns are counted from the second rejection on, two
    events later than before. (It replaces a rule that let a reply count when it took
    up none of the user's words: a refusal answers a plea in new words without taking
    them up.)

    The very same reply to each new plea is told (the warning) but not stopped: a stop
    needs one restatement that answers no new message of the user's (none came
    between, or it said again what the one before said), as restated_reply stops no
    agent holding a line against a user who only insists. Measured: no run of the 8
    sources changes; on the held-out tau2-bench conversations one stop becomes a
    warning (a framework answering "Recursion limit of 25 reached" five times to a
    simulated user asking it to try again, in new words each time; the agent answered
    properly at the 6th; reward 0); a template refusal repeated word for word to a user
    who pleads in new words is no longer stopped at the 4th reply (tests).

    Long outputs are read past the part compared: two that differ there (their whole
    texts differ, or one runs past it and the other does not: a role-play's rounds of
    code after the same preamble and template) are new work, not a restatement; and two
    that open with the same long preamble, one going on to say much and the other hardly
    anything, do not restate each other. Measured on 101 public ChatDev logs (a
    software-company role-play the corpus does not have, every message opening with the
    role's fixed preamble; ``benchmarks/heldout.py``): stagnation stopped 16 of them, and
    40 once ping-pong no longer stopped them first; with these rules 2 (the same message
    4 times over, word for word); no run of the 8 sources changes.

    Similarity is the Jaccard index of the two outputs' word sets, which is blind to
    word and clause order (a plan restated with its clauses shuffled scores 0.93 on
    the scenarios) and at least as strict a test of overlap as deepeval's bigram
    Jaccard. Outputs with fewer than ``min_words`` distinct words must match exactly
    (case and spacing folded). Empty outputs count as repeating each other.

    Defaults: ``similarity`` 0.8 (restated plans score 0.93; outputs that share a
    preamble but say different things at most 0.58 on the scenarios); warn at the
    2nd restating output (Needlr's "degenerate loop": 2 identical outputs in a row),
    stop at the 4th.
    """

    name = "stagnation"
    kinds = frozenset({MODEL, TOOL_CALL, USER})

    def __init__(
        self,
        similarity: float = 0.8,
        min_words: int = 10,
        warn_at: int = 2,
        stop_at: int | None = 4,
    ) -> None:
        self.similarity = similarity
        self.min_words = min_words
        self.warn_at = warn_at
        self.stop_at = stop_at

    def _similar(self, a: str, b: str) -> bool:
        """Word-set Jaccard >= ``similarity``; cheap length test first (Jaccard J
        needs the shorter text to be at least about J times the longer one). Two
        outputs that open (or close) with the same long text and differ in the rest
        are compared by the rest: a role-play agent that starts every message with
        its fixed preamble restates nothing when what follows is new, nor when one
        message goes on past the preamble and the other hardly does."""
        short, long = sorted((len(a), len(b)))
        if short < 2 * self.min_words or short < long * self.similarity * 0.75:
            return False
        head = _shared_head(a, b)
        if head * 4 >= short:
            tail = _shared_head(a[head:][::-1], b[head:][::-1])
            rest_a, rest_b = a[head : len(a) - tail], b[head : len(b) - tail]
            ra, rb = plain_words(rest_a), plain_words(rest_b)
            long_a, long_b = len(ra) >= self.min_words, len(rb) >= self.min_words
            if long_a and long_b:
                return jaccard(ra, rb) >= self.similarity
            if long_a or long_b:
                return False  # after the same opening, one says much the other does not
        wa, wb = plain_words(a), plain_words(b)
        if len(wa) < self.min_words or len(wb) < self.min_words:
            return False
        return jaccard(wa, wb) >= self.similarity

    def _heard(self, agents: dict[str, Restatement], text: str) -> None:
        """An agent saying something new that restates none of the other agents' last
        outputs is news for them: their next output answers it, and is not "in a row"
        with their last (a manager handing out one item after another from a template,
        each answered by a worker's new reply). An agent that only bounces another's
        request back restates it, and the bounce goes on counting."""
        words: dict[str, int] | None = None  # the text's request words, made once
        for other, entry in list(agents.items()):
            said = entry.text
            if _same(text, said) or self._similar(text, said):
                continue  # it restates the other's output
            if words is None:
                words = request_words(text[:_ECHO_CHARS])
            # a request too short for the test above, bounced back in most of its words
            if request_overlap(words, request_words(said[:_ECHO_CHARS])) < _ECHO_OVERLAP:
                del agents[other]

    @staticmethod
    def _heard_user(st: StagnationState, ctx: Context) -> None:
        """Note whether the user's message says again what the last one said; a
        message the trace did not record may have said anything, so it ends every
        agent's outputs in a row."""
        ev = ctx.event
        if ev.text_known:
            # numbers dropped: a harness says "found 2 actions", then "found 3 actions"
            # (a bytes translate and a hash, where Event.error_key's masking costs
            # 10 us and a str translate 2 us on 400 characters)
            head = ev.text[:_ECHO_CHARS]
            if head.isascii():
                key = fingerprint(head.encode("ascii").translate(None, _DIGITS).decode("ascii"))
            else:
                key = fingerprint(_DIGIT.sub("", head))
            st.user_again = key == st.user_key
            st.user_key = key
        else:
            st.by_key.clear()
            st.user_key, st.user_again = "", False

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), StagnationState)
        agents = st.by_key
        if ctx.event.kind == USER:
            self._heard_user(st, ctx)
            return None
        if ctx.event.kind == TOOL_CALL:
            if agents:
                agents.clear()  # the agent acted: outputs before and after are not "in a row"
            return None
        ev = ctx.event
        agent = ev.agent or ""
        if not ev.text_known:
            # an output the trace did not record is neither empty nor a restatement:
            # it ends this agent's run of outputs, like a new one would
            agents.pop(agent, None)
            return None
        whole = ev.text.strip()
        text = whole[:_COMPARE_CHARS]
        payload = ev.payload_key if len(whole) > _COMPARE_CHARS else ""
        prev = agents.pop(agent, None)
        # compared only when two outputs of one agent come in a row, which most
        # agents never do; two that differ past the characters compared (one runs
        # past them and the other does not, or their payloads differ) are new work,
        # however alike their openings
        unasked = prev is not None and (st.user_again or ctx.state.user_step < prev.steps[-1])
        if (
            prev is not None
            and payload == prev.payload
            and (_same(text, prev.text) or (unasked and self._similar(text, prev.text)))
        ):
            prev.count += 1
            if unasked:
                prev.unasked += 1
            prev.text = text
            prev.payload = payload
            prev.steps.append(ctx.step)
            trim(prev.steps, _STEPS_MAX)
            entry = prev
        else:
            entry = Restatement(text, ctx.step, payload)
            if agents:
                self._heard(agents, text)
        agents[agent] = entry
        if len(agents) > _AGENTS_MAX:
            del agents[next(iter(agents))]
        count = entry.count
        severity = severity_for(count, self.warn_at, self.stop_at)
        if severity is None:
            return None
        if severity is Severity.STOP and not entry.unasked:
            # every restatement answered a new message of the user's: an agent holding
            # the same answer against a user who asks again is told once, not stopped
            # (the user is the one going round; restated_reply's rule too)
            severity = Severity.WARN
        who = f"{agent} has" if agent else "You have"
        if not text:
            what = f"produced {count} empty outputs in a row"
        else:
            what = f"said essentially the same thing {count} times in a row ({preview(text, 60)!r})"
        action = (
            "Say something new: act on your plan, ask for what you need, or give your answer."
            if severity is Severity.WARN
            else "This is not moving forward; stop and give your best answer."
        )
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(entry.steps),
            f"{who} {what}. {action}",
            f"{agent}@{entry.steps[0]}",
        )
