"""No effect: an action whose result the trace does not hold, tried again and again
while the agent's own narration says nothing came of it (computer-use agents)."""

from __future__ import annotations

import math
import re
from typing import Any, Final, final

from ..events import MODEL, TOOL_CALL, TOOL_RESULT, USER, Event
from ..findings import Finding, Severity
from ..fingerprints import lower_text, maybe_json, moves_view
from ..state import DetectorState, Record, StateError
from ..text import phrase_lower, word_mark
from .base import Context, Detector, preview, trim

__all__ = ["NoEffect"]

# -- the narration -------------------------------------------------------------------
# An agent that acts on screenshots writes, after each action, what the screen now
# shows and what it will do next: the part before the plan ("Let me ...", "I'll ...")
# is its observation of the action's effect. Patterns run on lower-cased text.
_PLAN: Final = re.compile(
    r"(?:^|(?<=[.!?:])\s+|\n)\W*(?:(?:now|so|ok(?:ay)?|first|then|next|instead|but|actually"
    r"|alternatively)\b,?\s+)*(?:let me|let's|i'll|i will|i need to|i should|i'm going to"
    r"|i am going to|i want to|i must|i have to|i'd better|going to|time to|trying)\b"
)
# The observation says the action did nothing, or failed.
_FAILED: Final = re.compile(
    r"\b(?:didn'?t|did not|doesn'?t|does not|hasn'?t|has not|haven'?t|wasn'?t|was not|weren'?t"
    r"|won'?t|couldn'?t|not (?:yet|working|responding|applied|selected|changed|open(?:ed)?"
    r"|expanded|registered)|no (?:change|effect|response)|nothing (?:happened|changed)"
    r"|unchanged|the same|persist\w*|keeps|keep (?:getting|showing|failing|\w+ing)|instead"
    r"|failed|accidentally|reverted|collapsed|taken back|redirected)\b"
)
# For a move (a scroll, page down), the observation says the view itself did not move:
# "keep scrolling", "don't see it yet" and "not known" are how reading a long page goes.
_VIEW_STILL: Final = re.compile(
    r"\b(?:(?:didn'?t|did not|doesn'?t|does not|hasn'?t|has not|won'?t|wouldn'?t|couldn'?t"
    r"|could not|can'?t|cannot) (?:seem to )?(?:scroll|move|change|budge)|no (?:change|effect)"
    r"|nothing (?:happened|changed|moved)|unchanged|(?:shows?|showing|see|seeing|still on"
    r"|displays?|displaying|is|are|remains?|stays?|stayed|looks?) (?:exactly )?the same"
    r"|(?:still|already) at the (?:very )?(?:bottom|end|top)"
    r"|no (?:more|further) (?:content|results|items|scrolling))\b"
)
# The plan announces another try, or aims again at the same thing: the last one missed.
_RETRY: Final = re.compile(
    r"\b(?:again|retry|re-?try|one more time|once more|try|trying|different (?:approach|way"
    r"|method)|precisely|exactly|accurately|more carefully|directly|properly"
    r"|(?:the )?(?:center|centre) of|correct (?:position|coordinates|spot|location))\b"
)
# The observation says the action took effect.
_WORKED: Final = re.compile(
    r"\b(?:successfully|worked|took effect|(?:is|are|was|were|has been|have been) (?:now )?"
    r"(?:(?!still\b)\w+ )?(?:selected|checked|unchecked|applied|active|opened|open|expanded"
    r"|set|closed|dismissed|gone|removed|added|entered|updated|changed|accepted|loaded"
    r"|enabled)|now (?:shows?|showing|displays?)|(?:i'm|i am) now (?:on|in|at|viewing))\b"
)
# The agent says a failure keeps happening ("it keeps collapsing", "I keep getting
# redirected"); a plan to keep scrolling, "keep in touch" or "keep track" does not.
_RECURS: Final = re.compile(r"(?<!to )\b(?:keeps|keep|kept) (?!in\b|track\b)(?:\w+ )?\w+ing\b")
# The agent says something is not there.
_ABSENT: Final = re.compile(
    r"\b(?:don'?t see|do not see|not see|can'?t find|cannot find|couldn'?t find"
    r"|doesn'?t (?:have|show|appear|exist)|(?:is|are)(?:n'?t| not) (?:listed|available|visible"
    r"|present|shown|there)|not (?:listed|available|visible|present|shown|found)"
    r"|no (?:\w+ )?(?:option|link|button|filter|tab|field|entry|item))\b"
)
# Every phrase of _ABSENT holds one of these: a narration without any is read no further.
_ABSENT_STEMS: Final = ("see", "find", "n't", "not ", "no ")
_QUOTE: Final = re.compile(r'"[^"]{1,80}"|\u201c[^\u201d]{1,80}\u201d|\*\*[^*]{1,80}\*\*')
_QUOTED: Final = re.compile(r'"([^"]{1,80})"|\u201c([^\u201d]{1,80})\u201d|\*\*([^*]{1,80})\*\*')
# Coordinates the agent reads off the screen (x=601, (240, 433)) are no page content.
_COORD: Final = re.compile(r"[xyXY]\s*[=:]\s*\d+|\(\s*\d+\s*,\s*\d+\s*\)")
_SENTENCE_END: Final = re.compile(r"[.!?:]\s+|\n")
_DIGIT: Final = re.compile(r"\d")
# A page named by its number in an observation ("page 3", "Page 3 of 12"), lower-cased.
_PAGE_NUMBER: Final = re.compile(r"\bpage (\d+)\b")
# Words, lower-cased ("1.25+", "k/da", "don't" stay whole).
_TOKEN: Final = re.compile(r"[a-z0-9$][\w$+/%-]*(?:['.][\w$+/%-]+)*")
# A word capitalised inside a sentence (a name), or in capitals (a code). Written to
# open with its capital, so that the engine scans for capitals (3x faster than opening
# with the lookbehind, which is tried at every position).
_NAME: Final = re.compile(
    r"[A-Z](?:(?<=[\w,;)\]%'\"\u201d-] [A-Z])[\w$+/%-]*|(?<=\b[A-Z])[A-Z0-9/&+-]+\b)"
)
_PRONOUNS: Final = frozenset({"I", "I'm", "I've", "I'll", "I'd"})
_OBSERVATION_CHARS: Final = 1200  # of a narration's observation (bounds the cost)
_PLAN_CHARS: Final = 400
_LEARN_CHARS: Final = 2000  # of any text the run's words are learned from
_HASH_MASK: Final = 0xFFFFFF  # 24 bits a word: chance collisions among 1,024 words ~ 6e-5


_WORD_IDS: dict[str, int] = {}  # word -> its id: a run's words recur, hashed once
_WORD_IDS_MAX: Final = 16384


def _word_id(word: str) -> int:
    wid = _WORD_IDS.get(word)
    if wid is None:
        wid = word_mark(word) & _HASH_MASK
        if len(_WORD_IDS) >= _WORD_IDS_MAX:
            _WORD_IDS.clear()
        _WORD_IDS[word] = wid
    return wid


def _names(text: str) -> set[str]:
    """The names in a text: words capitalised inside a sentence, and quoted words."""
    named = {lower_text(name) for name in _NAME.findall(text) if name not in _PRONOUNS}
    if '"' in text or "\u201c" in text or "**" in text:
        for quoted in _QUOTED.findall(text):
            named.update(_TOKEN.findall(lower_text(quoted[0] or quoted[1] or quoted[2])))
    return named


@final
class Reading:
    """What one narration says about the action before it."""

    __slots__ = ("failed", "novel", "observation", "progress", "recurs", "still", "words")

    def __init__(
        self,
        observation: str,
        novel: bool,
        progress: bool,
        still: bool,
        failed: bool,
        recurs: bool,
        words: list[str],
    ) -> None:
        self.observation = observation
        self.novel = novel  # it names something the run never named
        self.progress = progress  # ... or says the action worked (and reports no failure)
        self.still = still  # the observation says the view did not move (for a move)
        self.failed = failed  # it reports a failure, or plans another try
        self.recurs = recurs  # it says a failure keeps happening
        self.words = words  # its words, lower-cased (the run learns them after)


def read(text: str, known: dict[int, None], moving: bool = False) -> Reading:
    """Read a narration: split at its plan; progress is an observation that reports no
    failure and names something the run never named (a number, a quoted text, a name)
    or says the action took effect; a failure signal is an observation that reports a
    failure, or a plan to try again or to aim more precisely.

    Each pattern costs several microseconds a narration, so they run only where their
    answer can still change the reading (a failure reported makes the rest moot)."""
    text = text.strip()[:_LEARN_CHARS]
    low = phrase_lower(text)
    at = _PLAN.search(low)
    start = at.start() if at else len(text)
    cut = min(start, _OBSERVATION_CHARS)
    observation = text[:cut]
    words = _TOKEN.findall(low, 0, cut)  # the observation's words
    quoted = '"' in observation or "\u201c" in observation or "**" in observation
    bare = _QUOTE.sub(" ", low[:cut]) if quoted else low[:cut]
    reported = _FAILED.search(bare) is not None
    novel = progress = retry = False
    if not reported:
        if at is not None:
            plan = low[start : start + _PLAN_CHARS]
            retry = _RETRY.search(_QUOTE.sub(" ", plan) if '"' in plan else plan) is not None
        novel = _names_new(observation, words, known)
        progress = novel or _WORKED.search(bare) is not None
    # read only after a move: most narrations follow a click or a typed text
    still = moving and _VIEW_STILL.search(bare) is not None
    if reported and "page " in bare and _new_page(bare, known):
        # "Page 3 still doesn't mention the refund policy": the view moved (a page the
        # run had not named) even if what is sought is not on it yet
        reported = still = False
        novel = progress = True
    recurs = ("keep" in bare or "kept" in bare) and _RECURS.search(bare) is not None
    words += _TOKEN.findall(low, cut)
    return Reading(observation, novel, progress, still, reported or retry, recurs, words)


def _new_page(observation: str, known: dict[int, None]) -> bool:
    """Whether a lower-cased observation names a page by a number the run never named
    ("page 3", "page 3 of 12"): paging moved the view."""
    return any(_word_id(m.group(1)) not in known for m in _PAGE_NUMBER.finditer(observation))


def _names_new(observation: str, words: list[str], known: dict[int, None]) -> bool:
    """Whether an observation (``words``: its words, lower-cased) names something the
    run never named: a token with a digit, or a name (capitalised or quoted), not among
    the run's words. Coordinates the agent reads off the screen (x=601) are no content."""
    if "=" in observation or "(" in observation or ":" in observation:
        words = _TOKEN.findall(lower_text(_COORD.sub(" ", observation)))
    new = [w for w in words if _word_id(w) not in known]
    if not new:
        return False
    if _DIGIT.search(" ".join(new)) is not None:  # one search, not one a word
        return True
    return not _names(observation).isdisjoint(new)


# -- the actions ---------------------------------------------------------------------
_POINT_KEYS: Final = (("x", "y"), ("start_x", "start_y"), ("coordinate_x", "coordinate_y"))


def _target(event: Event) -> tuple[float, float, str]:
    """What an action acts on: a point (x, y, "") for a pointer action, else (0, 0, its
    normalised call key: the same text, address, key press or scroll)."""
    args = event.args
    if type(args) is not dict:
        args = maybe_json(args)
    if isinstance(args, dict):
        for kx, ky in _POINT_KEYS:
            x, y = args.get(kx), args.get(ky)
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                return float(x), float(y), ""
        point = args.get("coordinate")
        if isinstance(point, (list, tuple)) and len(point) == 2:
            x, y = point
            if isinstance(x, (int, float)) and isinstance(y, (int, float)):
                return float(x), float(y), ""
    return 0.0, 0.0, event.norm_key


@final
class Attempt(Record):
    """One action in the window of recent attempts, and what its narration said."""

    __slots__ = ("failed", "key", "moves", "name", "said", "step", "x", "y")

    def __init__(self, step: int, name: str, x: float, y: float, key: str, moves: bool) -> None:
        self.step = step  # event index of the action
        self.name = name
        self.x = x  # its point, for a pointer action
        self.y = y
        self.key = key  # "" for a pointer action, else its target's key
        # it moves the view (a scroll, page down): only a narration that reports the
        # view unchanged is a failure; a plan to scroll "again" is how scrolling goes on
        self.moves = moves
        self.said = -1  # event index of the narration after it (-1: none yet); -2: a result
        self.failed = False  # the narration reported a failure or planned another try


@final
class NoEffectState(DetectorState):
    """Recent attempts, the run's words (hashed, at most 1,024, most recent last), and
    when the narration named something new, reported a recurring failure, was warned."""

    __slots__ = (
        "absent", "attempts", "known", "narrated", "news", "progress", "recurs", "unanswered",
        "warned",
    )  # fmt: skip

    def __init__(self) -> None:
        self.attempts: list[Attempt] = []  # the last 8
        self.known: dict[int, None] = {}  # the run's words, once it narrates
        self.narrated = False  # an action's effect was only narrated: the rule is on
        self.unanswered = -1  # until then: the step of the last call not yet answered
        self.news: list[int] = []  # steps whose narration or result named something new
        self.progress: list[int] = []  # attempt steps whose narration showed progress
        self.warned: list[int] = []  # attempt steps that got a warning
        self.recurs: list[int] = []  # steps of narrations reporting a recurring failure
        self.absent: dict[str, int] = {}  # name -> narrations reporting it absent (LRU, 32)

    def dump(self) -> Any:
        return [
            self.absent,
            [a.dump() for a in self.attempts],
            list(self.known),
            self.narrated,
            self.news,
            self.progress,
            self.recurs,
            self.unanswered,
            self.warned,
        ]

    @classmethod
    def load(cls, data: Any) -> NoEffectState:
        if not isinstance(data, list) or len(data) != 9:
            raise StateError("NoEffectState: expected 9 fields")
        st = cls()
        absent, attempts, known, st.narrated, *rest = data
        st.news, st.progress, st.recurs, st.unanswered, st.warned = rest
        st.absent = dict(absent)
        st.attempts = [Attempt.load(a) for a in attempts]
        st.known = dict.fromkeys(known)
        return st


_ATTEMPTS: Final = 8
_KNOWN_MAX: Final = 1024
_MARKS: Final = 32
_RECURS_MAX: Final = 4
_ABSENT_MAX: Final = 32


class NoEffect(Detector):
    """The same action on the same target, tried again while the agent's own narration
    says nothing came of it: a computer-use agent clicking a button that does not
    respond, typing into a box that takes no text, re-opening a menu that collapses.

    For an action whose result the trace does not hold (a screenshot agent: the screen
    is the result; an image-only result), identical actions prove nothing by
    themselves. The agent's next narration is its observation: the part before its
    plan ("Let me ...") says what the screen now shows. Progress is an observation
    that names something the run had not named (a number, a quoted label, a name: the
    next item of a carousel, "2+" on a counter, the rows a scroll reveals) or says the
    action took effect; a failure signal is an observation that reports none ("didn't
    change", "still shows 1", "accidentally", "persists") or a plan to try again or aim
    more precisely. "Still" alone is no failure: "the right arrow is still active"
    comes with each new item of a carousel. Nor is an observation that names a page by a
    number the run never named ("Page 3 still doesn't mention the refund policy"): the
    view moved, even if what is sought is not on it yet (a page that moved is not the
    same page). Measured: no run of the corpus changes; an agent paging with "Next" and
    saying each new page still lacks what it seeks was stopped at the 3rd page.

    Three patterns, each warned before it stops:

    * the same target (a point within ``radius`` pixels, or the same text, address or
      key) tried ``attempts`` times in a row with no progress in any narration since the
      first: warned before the last of them when the earlier ones each drew a failure
      signal (or after it otherwise), stopped when its narration again shows no progress
      with ``failures`` failure signals among them, or at the next try;
    * the agent saying twice within 20 events that a failure keeps recurring ("it
      keeps collapsing", "I keep getting redirected"): warned at the first, stopped at
      the second (re-aimed clicks that never land on one point);
    * the same name reported missing ("I don't see X", "X is not listed") in
      ``absent_warn_at`` narrations: warned; in ``absent_stop_at``: stopped (an agent
      that keeps going back to look for an option it found absent).

    A scroll (or a page down) is an attempt too, but only an observation saying the
    view itself did not move counts as its failure ("the page looks the same", "it
    didn't scroll", "still at the bottom"): "let me keep scrolling", "I don't see it
    yet" or a plan to scroll "again" are how reading a long page goes, and a narration
    that names what came into view is progress. A page at its bottom, scrolled on while
    the agent says nothing moves, is warned and then stopped; measured: no run of the 8
    sources changes (read with the failure words of a click instead, 2 healthy runs of
    the screenshot agent were stopped and one warned: "need to keep scrolling", "that
    usually don't need ...").

    A result that only acknowledges its action ("Clicked element #load-more", "Typed
    'shoes'", "Pressed Enter": ``fingerprints.acknowledges_action``) holds nothing of
    the screen either: the engine reads it as unknown, and the narration after it is
    the observation. Actions whose results the trace holds are left to the detectors
    of results.

    Defaults, measured on the screenshot agent of the corpus (abp_mind2web, 157 runs:
    19 labelled loops, 92 labelled not-a-loop): 15 of 19 loops stopped, a median of 1
    event after the labelled step, every one after a warning; 1 of 92 not-a-loop runs
    warned (a colour swatch that worked on its third click), none stopped. A radius of
    30 px is half a button in a 1280 px screenshot (15 stops one loop fewer, 45 warns a
    healthy run); three attempts is the labelling rubric's "three times without
    progress" (four stops 8 of 19); without the progress test (failure words alone) 15
    healthy runs are warned and 7 stopped. Tuned on half the runs and tested on the
    other half, the thresholds kept 8/9 and 9/10 held-out loops stopped with one false
    warning each. On the text-tool agents of the corpus the rule never fires: their
    calls have results.
    """

    name = "no_effect"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT, MODEL, USER})

    def __init__(
        self,
        attempts: int = 3,
        radius: float = 30.0,
        failures: int = 2,
        absent_warn_at: int | None = 4,
        absent_stop_at: int | None = 5,
    ) -> None:
        if attempts < 2:
            raise ValueError("NoEffect attempts must be at least 2")
        self.attempts = attempts
        self.radius = radius
        self.failures = failures
        self.absent_warn_at = absent_warn_at
        self.absent_stop_at = absent_stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), NoEffectState)
        ev = ctx.event
        kind = ev.kind
        if kind == TOOL_CALL:
            return self._call(ctx, st, ev)
        if kind == TOOL_RESULT:
            if ev.text_known and ev.text.strip():
                rec = ctx.call
                if not st.narrated:
                    if rec is None or rec.step == st.unanswered:
                        st.unanswered = -1  # answered: a text-tool agent so far
                    return None
                for a in st.attempts:
                    if a.said == -1 and (rec is None or a.step == rec.step):
                        a.said = -2  # the trace holds its result: not this rule's to judge
                        break
                head = ev.text[:_OBSERVATION_CHARS]
                if _names_new(head, _TOKEN.findall(lower_text(head)), st.known):
                    _mark(st.news, ctx.step)
                _learn(st, _TOKEN.findall(lower_text(ev.text[:_LEARN_CHARS])))
            return None
        if kind == USER:
            if st.narrated:
                _learn(st, _TOKEN.findall(lower_text(ev.text[:_LEARN_CHARS])))
            return None
        if not ev.text_known:
            return None
        if not st.narrated:
            if st.unanswered < 0:
                return None  # the last action had its result: a text-tool agent
            st.narrated = True  # an action whose effect only the narration tells: on
        pending = [a for a in st.attempts if a.said == -1]
        return self._narration(ctx, st, ev.text, pending)

    def _call(self, ctx: Context, st: NoEffectState, ev: Event) -> Finding | None:
        if not st.narrated:
            # until an action goes unanswered before the narration, the run is a
            # text-tool agent's: only whether its last call is answered is kept
            st.unanswered = ctx.step
            return None
        rec = ctx.call
        x, y, key = _target(ev)
        moves = rec.moves if rec is not None else moves_view(ev.name, ev.args)
        attempt = Attempt(ctx.step, ev.name or "", x, y, key, moves)
        found = None
        run = self._run(st, attempt)
        n = len(run)
        failed = sum(1 for a in run if a.failed)
        warned = any(a.step in st.warned for a in run)
        if warned and n >= self.attempts:
            found = self._finding(ctx, run, attempt, Severity.STOP)
        elif not warned and n >= self.attempts - 1 and failed >= self.failures:
            _mark(st.warned, ctx.step)
            found = self._finding(ctx, run, attempt, Severity.WARN)
        if isinstance(ev.args, dict):
            said = " ".join(v for v in ev.args.values() if isinstance(v, str))
            _learn(st, _TOKEN.findall(lower_text(said[:_LEARN_CHARS])))
        st.attempts.append(attempt)
        trim(st.attempts, _ATTEMPTS)
        return found

    def _narration(
        self, ctx: Context, st: NoEffectState, text: str, pending: list[Attempt]
    ) -> Finding | None:
        step = ctx.step
        reading = read(text, st.known, any(a.moves for a in pending))
        if reading.novel:
            _mark(st.news, step)
        found = None
        if pending:
            for a in pending:
                a.said = step
                a.failed = reading.still if a.moves else reading.failed
                if reading.progress:
                    _mark(st.progress, a.step)
            last = pending[-1]
            run = self._run(st, last)
            n = len(run)
            failed = sum(1 for a in run if a.failed)
            warned = any(a.step in st.warned for a in run)
            if n >= self.attempts and failed >= self.failures and warned:
                found = self._finding(ctx, run, None, Severity.STOP)
            elif n >= self.attempts and failed >= 1 and not warned:
                _mark(st.warned, last.step)
                found = self._finding(ctx, run, None, Severity.WARN)
        if reading.recurs:
            recent = any(step - s <= _RECURS_WINDOW for s in st.recurs)
            st.recurs.append(step)
            trim(st.recurs, _RECURS_MAX)
            if found is None or (recent and found.severity is Severity.WARN):
                found = self._recurs(ctx, reading.observation, recent)
        if found is None or found.severity is Severity.WARN:
            absent = self._absent(ctx, st, reading.observation)
            if absent is not None and (found is None or absent.severity is Severity.STOP):
                found = absent
        _learn(st, reading.words)
        return found

    def _run(self, st: NoEffectState, attempt: Attempt) -> list[Attempt]:
        """The narrated attempts on this attempt's target in a row with no progress: a
        narration after one of them, or between two of them, that named something new
        starts the run again. Actions batched with no narration between count once."""
        run: list[Attempt] = []
        previous: Attempt | None = None
        said: set[int] = set()
        for a in st.attempts:
            if a.said < 0 or not self._same(a, attempt):
                continue
            if a.said in said:
                continue
            said.add(a.said)
            if previous is not None and any(previous.step < s < a.step for s in st.news):
                run = []
            run = [] if a.step in st.progress else [*run, a]
            previous = a
        return run

    def _same(self, a: Attempt, b: Attempt) -> bool:
        if a.name != b.name or a.key != b.key:
            return False
        return a.key != "" or math.hypot(a.x - b.x, a.y - b.y) <= self.radius

    def _finding(
        self, ctx: Context, run: list[Attempt], attempt: Attempt | None, severity: Severity
    ) -> Finding:
        tries = len(run) + (1 if attempt is not None else 0)
        first = run[0] if run else attempt
        assert first is not None
        where = _describe(first)
        if severity is Severity.WARN:
            said = (
                f"You are about to try {where} a {_ordinal(tries)} time; after each of the "
                f"last {len(run)} your own notes said it had no effect."
                if attempt is not None
                else f"You have tried {where} {tries} times and your notes after them name "
                "nothing new on the screen."
            )
            action = "Try another way: another element, the keyboard, or a URL."
        else:
            said = (
                f"You tried {where} {tries} times and each time the screen did not change, "
                "by your own notes."
            )
            action = "Stop trying it: use another way, or finish with what you have."
        steps = [s for a in run for s in (a.step, a.said) if s >= 0]
        if attempt is not None:
            steps.append(attempt.step)
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(sorted(set(steps))[-_STEPS_MAX:]),
            f"{said} {action}",
            f"target@{first.step}",
        )

    def _recurs(self, ctx: Context, observation: str, again: bool) -> Finding:
        st = ctx.state.slot(self.slot_name(), NoEffectState)
        steps = tuple(st.recurs[-2:]) if again else (ctx.step,)
        quoted = preview(observation, 80)
        if again:
            return Finding(
                self.name,
                Severity.STOP,
                ctx.step,
                steps,
                f"You have said twice that the same failure keeps happening ({quoted!r}). "
                "Stop repeating what causes it: use another way, or finish with what you have.",
                f"recurs@{steps[0]}",
            )
        return Finding(
            self.name,
            Severity.WARN,
            ctx.step,
            steps,
            f"You say a failure keeps happening ({quoted!r}). Doing the same again will not "
            "change it: try another way.",
            f"recurs@{ctx.step}",
        )

    def _absent(self, ctx: Context, st: NoEffectState, observation: str) -> Finding | None:
        low = phrase_lower(observation)
        if not any(stem in low for stem in _ABSENT_STEMS) or _ABSENT.search(low) is None:
            return None
        names: set[str] = set()
        for sentence in _SENTENCE_END.split(observation):
            if sentence and _ABSENT.search(phrase_lower(sentence)):
                names |= {w for w in _names(sentence) if not any(c.isdigit() for c in w)}
        worst: Finding | None = None
        for name in sorted(names):
            count = st.absent.pop(name, 0) + 1
            st.absent[name] = count
            if len(st.absent) > _ABSENT_MAX:
                del st.absent[next(iter(st.absent))]
            stop, warn = self.absent_stop_at, self.absent_warn_at
            if stop is not None and count >= stop:
                severity = Severity.STOP
            elif warn is not None and count == warn:
                severity = Severity.WARN
            else:
                continue
            if worst is not None and worst.severity is Severity.STOP:
                continue
            worst = Finding(
                self.name,
                severity,
                ctx.step,
                (ctx.step,),
                f"You have reported {name!r} missing {count} times. It is not there: stop "
                "looking for it; use what the page offers, or finish with what you have.",
                f"absent:{name}",
            )
        return worst


_RECURS_WINDOW: Final = 20  # events between two reports of a recurring failure
_STEPS_MAX: Final = 8


def _mark(marks: list[int], step: int) -> None:
    marks.append(step)
    trim(marks, _MARKS)


def _learn(st: NoEffectState, words: list[str]) -> None:
    """Add a text's words (lower-cased) to the run's (hashed; the oldest fall out past
    1,024), in the order the text has them: a set's order changes with each process's
    string hashing, and the vocabulary, first in first out, must be the same on every
    worker that reads the run's state."""
    known = st.known
    for word in dict.fromkeys(words):
        wid = _word_id(word)
        if wid in known:
            continue
        known[wid] = None
        if len(known) > _KNOWN_MAX:
            del known[next(iter(known))]


def _describe(a: Attempt) -> str:
    if a.key == "":
        return f"{a.name} at ({a.x:g}, {a.y:g})"
    return f"the same {a.name}"


def _ordinal(n: int) -> str:
    return {2: "second", 3: "third", 4: "fourth"}.get(n, f"{n}th")
