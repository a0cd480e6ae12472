"""Chanting: one output that repeats the same chunk over and over."""

from __future__ import annotations

import re
from collections import Counter
from typing import Final

from ..events import MODEL
from ..findings import Finding, Severity
from ..fingerprints import lower_text
from .base import Context, Detector, preview

# Structured text repeats by nature and is left out, as Gemini CLI does: fenced code
# blocks (see _without_fences), table rows, list items, headings, divider lines; and
# data written out without a fence: a short JSON member (``"date": "2024-05-24",``; a
# long one, a message that may chant, stays), a line of brackets only, and an import
# line (a reply listing several files' code, each opening with the same imports, without
# fences: 1 of 101 public ChatDev logs warned). Measured on
# public tau2-bench trajectories (677 conversations by agents the corpus does not
# have): an agent answering in JSON listed 11 flight legs of one day and was stopped
# as a chant; no run of the 8 sources changes.
_FENCE: Final = "```"
_STRUCTURED = re.compile(
    r'^\s*(?:\||[-*+>#]|\d+[.)]\s|[=_~-]{3,}|"[^"\n]{0,200}"\s*:[^\n]{0,200}$|[\[\]{}(),]+\s*$'
    r"|import [\w.]+|from [\w.]+ import ).*$",
    re.MULTILINE,
)
_SENTENCE_ENDS: Final = ".!?;"
_WORD = re.compile(r"\S+")
_MIN_UNIT: Final = 20  # characters: "Done." repeated is not chanting
_SHINGLE: Final = 8  # words per shingle for text without sentence breaks


class Chanting(Detector):
    """A single model output that repeats one sentence (or word run) many times.

    Splits the output into sentences and counts the most repeated one (case and
    spacing folded, at least 20 characters); text with few sentence breaks is cut
    into 8-word shingles instead. Gemini CLI stops a stream in which a 50-character
    chunk recurs 10 times close together; we use the same 10 for ``stop_at`` and
    warn at 6.

    Deliberately ignores: code blocks, tables, lists, headings and divider lines, data
    written out as JSON (an agent answering in structured output lists each flight with
    the same date),
    lines of code outside a block (a reply listing the signature of each changed
    place), and outputs shorter than ``min_chars`` (they cannot hold ``warn_at`` repeats
    of a 20-character sentence).
    """

    name = "chanting"
    kinds = frozenset({MODEL})

    def __init__(self, warn_at: int = 6, stop_at: int | None = 10) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.min_chars = _MIN_UNIT * warn_at

    def observe(self, ctx: Context) -> Finding | None:
        # A chant shows from the start of an output: the first 64k characters bound
        # the cost of a huge one (10 MB would take ~40 ms of str.count probes).
        text = ctx.event.text[:_READ_CHARS]
        if len(text) < self.min_chars or not _probe(text, self.warn_at):
            return None
        unit, count = most_repeated_chunk(text)
        if count < self.warn_at:
            return None
        stop = self.stop_at is not None and count >= self.stop_at
        severity = Severity.STOP if stop else Severity.WARN
        return Finding(
            self.name,
            severity,
            ctx.step,
            (ctx.step,),
            f"This output repeats {preview(unit, 60)!r} {count} times. "
            "Stop repeating yourself and state your answer once.",
            f"{ctx.step}",
            # one output repeating a chunk stop_at times is overwhelming on its own:
            # a model that chants is not going to read a warning and stop chanting
            stop,
        )


_PROBE: Final = 24  # characters per probe window


_READ_CHARS: Final = 65_536


def _probe(text: str, repeats: int) -> bool:
    """Cheap pre-filter: does some 24-character window, taken at eight evenly spaced
    places, occur at least half ``repeats`` times? A chant that fills an eighth of
    the text or more is always hit; ordinary prose almost never is (str.count runs
    at C speed, so this costs about a microsecond per kilobyte)."""
    n = len(text)
    need = max(2, repeats // 2)
    end = n - _PROBE
    step = max(1, end // 8)
    # a while loop, not range() with a step known only at run time: mypyc compiles
    # this one to C, that one to a Python range object and its iterator
    start = 0
    while start < end:
        if text.count(text[start : start + _PROBE]) >= need:
            return True
        start += step
    return False


# A line of code that ends a unit: a signature or a call (``def parse(self, text) ->
# Node:``, ``public void run(String a);``), as a reply listing the signature of each
# changed place repeats it on every line. Listing is not chanting.
_CODE_LINE: Final = re.compile(r"\w\s*\([^()]*\)(?:\s*->\s*[\w\[\], .|]+?)?\s*[:;{]?\s*$")


def most_repeated_chunk(text: str) -> tuple[str, int]:
    """The most repeated sentence (or 8-word shingle) of a text and its count; lines of
    code (a signature, a call) are not sentences."""
    body = _STRUCTURED.sub("", _without_fences(text))
    if "(" in body:
        body = "\n".join(line for line in body.split("\n") if _CODE_LINE.search(line) is None)
    units = [u for u in _sentences(body) if len(u) >= _MIN_UNIT]
    best, count = "", 0
    if units:
        best, count = Counter(units).most_common(1)[0]
    if len(units) < 4 and len(body) >= 400:
        # Few sentence breaks: repetition hides inside long run-on text.
        words = _WORD.findall(lower_text(body))
        shingles = Counter(
            " ".join(words[i : i + _SHINGLE]) for i in range(0, len(words) - _SHINGLE + 1)
        )
        if shingles:
            s_best, s_count = shingles.most_common(1)[0]
            if s_count > count:
                best, count = s_best, s_count
    return best, count


def _sentences(body: str) -> list[str]:
    """The sentences of a text, case and spacing folded: split at line breaks and at
    whitespace after a sentence end (``.!?;``). What ``re.split(r"(?<=[.!?;])\\s+|\\n+")``
    gives, folded, with its empty parts left out; the regex tested its lookbehind
    at every character and cost two thirds of this detector's time on real outputs."""
    units: list[str] = []
    for line in body.split("\n"):
        words: list[str] = []
        for word in line.split():
            words.append(word)
            if word[-1] in _SENTENCE_ENDS:
                units.append(lower_text(" ".join(words)))
                words = []
        if words:
            units.append(lower_text(" ".join(words)))
    return units


def _without_fences(text: str) -> str:
    """The text with its fenced code blocks cut out, each from its opening fence to
    its closing one or, left open, to the end: ``re.sub(r"```.*?(?:```|\\Z)", "",
    text, flags=re.DOTALL)``, by ``str.find`` (the lazy regex stepped through every
    character of the code, 17 us per real output that went this far)."""
    start = text.find(_FENCE)
    if start < 0:
        return text
    kept: list[str] = []
    end = 0
    while start >= 0:
        kept.append(text[end:start])
        close = text.find(_FENCE, start + len(_FENCE))
        if close < 0:
            return "".join(kept)
        end = close + len(_FENCE)
        start = text.find(_FENCE, end)
    kept.append(text[end:])
    return "".join(kept)
