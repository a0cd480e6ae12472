"""Fingerprints: what makes two calls, two results or two outputs the same to a detector.

Canonical JSON of tool arguments, the normal form of a text (case, spacing, word
order, stop words), the masking of volatile values (ids, timestamps, timings), the
outcome signature of a result, page sketches, and the conventions that say what a
call is (a shell command line, a no-op, a reflection tool, an error written as
text). Pure functions of values: :class:`~loopwatch.events.Event` computes its keys
with them, once per event.

Fingerprints are 64-bit xxh3 hashes rendered as 16 hex characters. They are
stable across processes and Python versions (no built-in ``hash()`` of str,
which is salted per process), so run state that holds them can live in Redis
and be shared by many workers.
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Mapping
from typing import Any, Final

import orjson
import xxhash
from mypy_extensions import i64

__all__ = [
    "DESCRIBING_KEYS",
    "SAME_PAGE",
    "canonical_args",
    "declared_wait",
    "fold_and_mask",
    "is_noop_command",
    "is_reflection",
    "looks_like_error",
    "lower_text",
    "mask_volatile",
    "maybe_json",
    "moves_view",
    "normalise_text",
    "outcome_signature",
    "page_address",
    "page_sketch",
    "reflection_tool",
    "reports_failure",
    "reports_pending",
    "shell_command",
    "sketch_similarity",
    "tool_key",
    "waiting_tool",
]

_hexdigest = xxhash.xxh3_64_hexdigest
# CPython's own str.lower, called through the method object (see lower_text).
_STR_LOWER: Callable[[str], str] = str.lower  # not Final: mypyc would compile it to its primitive
# Bound once: a module attribute read costs a generic lookup each time (three of them
# were 800 instructions of every call's canonical JSON), a global of this module a
# dict read and a Final int none.
_dumps = orjson.dumps
_SORTED_JSON: Final = orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS
# Text from Python callers may hold lone surrogates; hashing must not crash on them.
_UTF8: Final = "utf-8"
_LONE: Final = "surrogatepass"
# str.isascii and str.isalpha as functions: the compiled build has no native call for
# them and calls ``s.isascii()`` by looking the method up by name each time (a few
# hundred instructions); a function held here is called directly.
_isascii: Final = str.isascii
_isalpha: Final = str.isalpha

# Values that change on every call without changing what the call means or what it
# returned: UUIDs, ISO-8601 timestamps, long hex ids (request ids, trace ids, hashes),
# and dates. Masked in results everywhere and in arguments only in string values
# (never numbers: page=1 and page=2 are different calls).
#
# Ids are recognised by their shape, not by the provider that made them, so that the
# same run reads the same whoever served it: a prefixed random token (``call_...``,
# ``toolu_01...``, ``msg_bdrk_01...``, ``chatcmpl-...``, ``fc_...``, ``run-...``: a
# lowercase prefix, then 8+ letters and digits with at least one of each), the value
# of an id key in compact JSON (``"tool_call_id":"..."``), and a quoted mixed-case
# token of letters and digits (``"D681PevKs"``: short random ids in JSON written with
# spaces, where the key is another token). A serialised tool message that echoes its
# call's id must not make two identical results look different.
#
# Written without re.IGNORECASE, which makes the engine fold the case of every
# character it tests: the letter classes below are what IGNORECASE made of [a-z]
# (both cases, and the four non-ASCII letters that fold into a-z: İ ı ſ K), the
# literal prefixes keep a scoped (?i:...), and the leading \b is tested once for
# all alternatives. 2.5x faster (9 -> 22 MB/s of results) and the same matches:
# tests/core/test_events.py holds it to the case-insensitive form.
# The lowercase prefixes of provider ids: the volatile pattern, the token prefilter
# (_ID_PREFIX) and the character-class test (_may_hold_by_class) read them from here.
_ID_PREFIXES: Final = ("req", "request", "trace", "span", "msg", "call", "run", "toolu", "chatcmpl")
_HEX = "[0-9a-fA-F]"
_LETTER = "[a-zA-Z\u0130\u0131\u017f\u212a]"
_ALNUM = "[0-9a-zA-Z\u0130\u0131\u017f\u212a]"
_VOLATILE = re.compile(
    r"\b(?=\w)(?:"
    rf"{_HEX}{{8}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{4}}-{_HEX}{{12}}\b"
    r"|\d{4}-\d{2}-\d{2}(?:[Tt ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:[Zz]|[+-]\d{2}:?\d{2})?)?\b"
    r"|\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"
    rf"|(?={_HEX}*\d)(?={_HEX}*[a-fA-F]){_HEX}{{16,}}\b"
    # prefixed ids; the lookahead lets every other word fail at once
    rf"|(?={_LETTER}{{2,12}}[_-])(?:(?i:{'|'.join(_ID_PREFIXES)})"
    rf"[_-]{_ALNUM}{{6,}}\b"
    rf"|(?:{_LETTER}{{2,12}}[_-]){{1,3}}(?={_ALNUM}*\d)(?={_ALNUM}*{_LETTER}){_ALNUM}{{8,}}\b)"
    r")"
    # quoted: an id key's value in compact JSON, or a mixed-case random token
    r'|"(?:(?i:id|call_id|tool_call_id|tool_use_id)":"[\w.:-]{3,64}'
    r'|(?=[A-Za-z0-9]*\d)(?=[A-Za-z0-9]*[a-z])(?=[A-Za-z0-9]*[A-Z])[A-Za-z0-9]{9,40})(?=")'
)
# What a token holds if _VOLATILE can match in it (see _may_hold_volatile): these
# two searches cost 0.1-0.2 us, against about 1 us for the pattern; tests/core/test_events.py
# holds the test to the pattern.
_DIGIT = re.compile(r"\d")
_ID_PREFIX = re.compile(rf"(?:{'|'.join(_ID_PREFIXES)})[_-]")
# Argument keys whose values are volatile by name (a fresh request id per retry
# must not make two identical calls look different).
_VOLATILE_KEYS: Final = frozenset(
    {
        "request_id", "requestid", "trace_id", "traceid", "span_id", "spanid",
        "idempotency_key", "idempotencykey", "nonce", "timestamp", "ts",
        "correlation_id", "correlationid", "call_id", "tool_call_id", "tool_use_id",
        "toolcallid", "tooluseid",
    }
)  # fmt: skip
# Words that rewording adds or drops without changing a query ("weather in paris").
_STOPWORDS: Final = frozenset(
    {"a", "an", "the", "in", "of", "for", "on", "to", "at", "by", "with", "and", "or", "is"}
)
_WORD = re.compile(r"[^\W_]+")
_STOPWORDS_BYTES: Final = frozenset(w.encode("ascii") for w in _STOPWORDS)


_SKETCH_SIZE: Final = 64
_xxh32 = xxhash.xxh32_intdigest
# Bytes: letters lower-cased, digits kept, everything else a space.
_LOWER_WORD_BYTES: Final = bytes(
    c + 32 if 65 <= c <= 90 else c if 48 <= c <= 57 or 97 <= c <= 122 else 32 for c in range(256)
)


_PAGE_CHARS: Final = 2000
_PAGE_MIN_WORDS: Final = 12
_PAGE_WORD_MIN: Final = 4


def page_sketch(text: str) -> list[int] | None:
    """A sketch of what a result shows (stable across processes): a bottom-64 MinHash
    of the distinct words of 4+ characters in its first 2,000 characters, or None when
    there are fewer than 12 such words. Made for comparing two results of the same
    call (a page re-read, OCR'd differently). It neither masks volatile values (a
    volatile token or two moves the overlap of dozens of words little) nor hashes
    short words: 3-4x cheaper than a sketch of every masked word of 4,000
    characters. On the corpus's Magentic-One runs it puts 31 of 41 re-clicks of an
    unchanged page at 0.75 or more, and 1 of 33 page scrolls (the last screen of a
    page, shown again)."""
    head = text[:_PAGE_CHARS]
    if _isascii(head):
        words = {
            w
            for w in head.encode("ascii").translate(_LOWER_WORD_BYTES).split()
            if len(w) >= _PAGE_WORD_MIN
        }
        if len(words) < _PAGE_MIN_WORDS:
            return None
        return sorted([_xxh32(w) for w in words])[:_SKETCH_SIZE]
    found = {w for w in _WORD.findall(lower_text(head)) if len(w) >= _PAGE_WORD_MIN}
    if len(found) < _PAGE_MIN_WORDS:
        return None
    return sorted([_xxh32(w.encode(_UTF8, _LONE)) for w in found])[:_SKETCH_SIZE]


# Calls that move the view over content (scroll, page down, swipe): each result is
# another screen of one page, partly the screen before; only the very same screen again
# (the bottom of the page, where nothing moves) is the same result.
_MOVING_KEYS: Final = ("scroll", "pagedown", "pageup", "swipe")
_MOVING_VALUE: Final = 40  # characters of an argument value read for a moving word
_MOVING_NAMES: dict[str, bool] = {}  # tool name -> it says the call moves the view


def _moving_name(name: str) -> bool:
    key = tool_key(name)
    return any(w in key for w in _MOVING_KEYS)


def moves_view(name: str | None, args: Any) -> bool:
    """Whether a call moves the view over content rather than acting on it: its tool
    name, an argument's name or a short argument value says scroll, page down / up or
    swipe (``scroll_down``, ``computer(action="scroll")``, ``press(key="PageDown")``,
    ``scroll(delta_y=600)``). Read from the top level of the arguments only."""
    if name and _by_name(_MOVING_NAMES, name, _moving_name):
        return True
    if type(args) is not dict:
        args = maybe_json(args)
        if not isinstance(args, dict):
            return False
    for k, v in args.items():
        low = k.lower() if type(k) is str else str(k).lower()
        if "scroll" in low or low.startswith("delta"):
            return True
        if type(v) is str and len(v) <= _MOVING_VALUE and _moving_value(v.lower()):
            return True
    return False


def _moving_value(low: str) -> bool:
    """Whether a short lower-cased argument value names a moving key, as
    ``tool_key(value)`` would hold it ("Page_Down" and "page-down" are "pagedown"):
    str searches first, the character walk of tool_key only when one hits."""
    if "scroll" in low or "swipe" in low:
        return True
    if "page" not in low or ("down" not in low and "up" not in low):
        return False
    word = tool_key(low)
    return "pagedown" in word or "pageup" in word


# Arguments a moving word may be in, as canonical JSON: most calls hold none and are
# decided by four substring searches of their lower-cased bytes (a case-insensitive
# regular expression cost 20k instructions a call); the rest are read by moves_view.
# Longer arguments (a file written, a script) are no move.
_MOVING_ARGS_BYTES: Final = 400


def call_moves_view(name: str | None, args: Any, args_json: bytes) -> bool:
    """:func:`moves_view` of a call as it is recorded (``args_json``: its canonical
    arguments): the tool name decides (cached), else one search of short arguments
    for a moving word, and only then the arguments one by one (which costs 0.2-1 us a
    call, and every call is recorded)."""
    if name and _by_name(_MOVING_NAMES, name, _moving_name):
        return True
    if len(args_json) > _MOVING_ARGS_BYTES:
        return False
    # Searched as str: ``str in str`` is one C call, while bytes.find parses a tuple of
    # arguments (and ``bytes in bytes`` raises and clears a TypeError): four bytes
    # searches cost 5k instructions a call. Canonical JSON is UTF-8; should it not be,
    # "replace" keeps every ASCII letter where it was.
    low = args_json.decode(_UTF8, "replace").lower()
    if "croll" in low or "page" in low or "swipe" in low:
        return moves_view(None, args)
    return "delta" in low and moves_view(None, args)


# A moving call's short answer that only says the move was made ("Scrolled down the page
# by one page", "Pressed PageDown", "Scrolled 3 clicks"), as browser-use, computer-use
# tools and key presses answer: what moved into view is not in it. One that names a
# limit or a failure ("Already at the bottom", "Cannot scroll further") says something.
_ACK_CHARS: Final = 160
# The words by which a short answer reports a failure, for a move and an action alike.
_FAILURE_WORDS: Final = (
    r"cannot|can'?t|could ?n[o']t|unable|no|not|nothing|fail\w*|error|invalid|unknown"
)
_NOT_ACK: Final = re.compile(
    rf"\b(?:already|bottom|top|end|edge|beginning|limit|reached|further|more|beyond"
    rf"|{_FAILURE_WORDS})\b",
    re.IGNORECASE,
)


def acknowledges_move(text: str) -> bool:
    """Whether ``text``, the result of a call that moves the view (:func:`moves_view`),
    only acknowledges the move: short, and naming no limit or failure."""
    return len(text) <= _ACK_CHARS and _NOT_ACK.search(text) is None


# A pointer or keyboard action's short answer that only says it was done, opening with
# the action in the past tense ("Clicked element button.load-more", "🖱️ Clicked button
# with index 5: Load more", "Typed 'shoes' into the search box", "Pressed Enter"), as
# browser-use, Stagehand-like and home-made browser tools answer: the page after the
# click is not in it, so two such answers are not the same page. An answer that reports
# a failure ("Clicked, but nothing happened", "Element not found") says something, and
# so does a domain tool's answer ("Selected seat 12A", "Entered the passenger name"):
# it states what is now so, and the same statement again is the same result.
_ACTION_DONE: Final = frozenset(
    ["clicked", "double-clicked", "right-clicked", "tapped", "typed", "pressed", "hovered",
     "scrolled"]
)  # fmt: skip
_ACTION_FAILED: Final = re.compile(
    rf"\b(?:{_FAILURE_WORDS}|timed? ?out|disabled|but)\b", re.IGNORECASE
)


def acknowledges_action(text: str) -> bool:
    """Whether ``text``, a tool result, only acknowledges an action on a user interface:
    short (160 characters), opening with the action done in the past tense
    (``_ACTION_DONE``, after any emoji or markup), and reporting no failure."""
    if len(text) > _ACK_CHARS:
        return False
    start = 0
    n = len(text)
    while start < n and not text[start].isalpha():
        start += 1  # emoji, markup, spaces: browser-use opens its answers with an emoji
    end = start
    while end < n and (text[end].isalpha() or text[end] == "-"):
        end += 1
    if text[start:end].lower() not in _ACTION_DONE:
        return False
    return _ACTION_FAILED.search(text) is None


# Two showings of one address whose sketches overlap this much are the same page: the
# bar RepeatedCall measured for re-clicks of an unchanged page, OCR'd differently
# (0.79-0.86 in the corpus; scrolled screens of one page stay below it).
SAME_PAGE: Final = 0.75
# Browser tools echo the address they show near the start of a result ("Here is a
# screenshot of [title](url)", "Address: file:///...", "Page URL: ...").
_ADDRESS_WITHIN: Final = 400
_ADDRESS_CHARS: Final = 300
_ADDRESS_END: Final = frozenset(" \t\r\n)]>\"'")


def page_address(text: str) -> str | None:
    """The address a result shows, if it names one near its start (``scheme://...``
    in its first 400 characters), else None: what makes a result a *page* that can be
    shown again."""
    at = text.find("://", 0, _ADDRESS_WITHIN)
    if at < 0:
        return None
    start = at
    while start > 0 and text[start - 1].isalpha():
        start -= 1
    end = at + 3
    limit = min(len(text), end + _ADDRESS_CHARS)
    while end < limit and text[end] not in _ADDRESS_END:
        end += 1
    return text[start:end]


def sketch_similarity(a: list[int], b: list[int]) -> float:
    """Estimated Jaccard similarity of the word sets behind two sketches: of the
    smallest 64 hashes of their union, the share both hold. Sketches are sorted, so
    one merge walks the union in order (no sets, no sort: a page re-shown is compared
    with up to 8 earlier screens)."""
    i = j = taken = both = 0
    na, nb = len(a), len(b)
    last = -1  # hashes are >= 0: a repeated hash (two words colliding) counts once
    while taken < _SKETCH_SIZE and (i < na or j < nb):
        if j >= nb or (i < na and a[i] < b[j]):
            h = a[i]
            i += 1
            shared = False
        elif i >= na or b[j] < a[i]:
            h = b[j]
            j += 1
            shared = False
        else:
            h = a[i]
            i += 1
            j += 1
            shared = True
        if h == last:
            continue
        last = h
        taken += 1
        if shared:
            both += 1
    return both / taken if taken else 0.0


def mask_volatile(text: str) -> str:
    """Replace volatile values (UUIDs, timestamps, long hex ids) with a placeholder."""
    return _VOLATILE.sub("#", text)


# Fields whose value is how long something took ("durationMs": 5, elapsed=0.3):
# tools append them to otherwise identical results.
_TIMING_FIELD = re.compile(r"duration|elapsed|latency|took", re.IGNORECASE)
_FIELD_ENDS: Final = (":", "=")


def fold_and_mask(text: str) -> str:
    """Whitespace folded and volatile values masked, token by token.

    Equivalent to masking then folding for the values we mask (none contains
    spaces), but several times faster on long results: the regex runs only on the
    few tokens that could hold a volatile value (8+ characters, not purely letters)
    instead of at every position of the text.
    """
    low = text.lower()
    # the stems of _TIMING_FIELD; most texts hold none: no per-token test (written out,
    # not any() over a tuple: no generator per text)
    if not ("duration" in low or "elapsed" in low or "latency" in low or "took" in low):
        # a text of several lines (most real outputs) is folded: no class test for it
        if _isascii(text) and "\n" not in text and _already_folded(text):
            return text  # the same object: a caller may skip hashing it twice
        return _mask_tokens(text)
    tokens = text.split()
    timing = False
    for i, tok in enumerate(tokens):
        if timing and tok[:1].isdigit():
            tokens[i] = "#"  # the value of a field named as a duration
        timing = tok.endswith(_FIELD_ENDS) and _TIMING_FIELD.search(tok) is not None
    return " ".join(_masked(tokens))


def _mask_tokens(text: str) -> str:
    """:func:`mask_volatile` token by token, tokens joined by one space. Every match
    of the pattern is 8+ characters and holds a digit or one of ``-_:"``, so only
    such tokens are tried; and no match spans whitespace except a date and a time
    written with a space between them, which this masks as two values."""
    return " ".join(_masked(text.split()))


def _masked(tokens: list[str]) -> list[str]:
    """The tokens with their volatile values masked (in place; returned)."""
    for i, tok in enumerate(tokens):
        if len(tok) >= 8 and _may_hold(tok):  # most tokens are short: no call for them
            tokens[i] = _mask_token(tok)
    return tokens


def _may_hold(tok: str) -> bool:
    """:func:`_may_hold_volatile`, by the classes of the characters where that is
    faster (an ASCII token, in the compiled build)."""
    if _SCAN_CHARACTERS and _isascii(tok):
        return _may_hold_by_class(tok)
    return _may_hold_volatile(tok)


# Character classes of ASCII, as bit flags: what _may_hold_volatile asks of a token
# (letters and all other characters are 0: no rule reads them).
_DIGIT_BIT: Final = 1
_DASH: Final = 2
_UNDERSCORE: Final = 4
_QUOTE: Final = 8
_COLON: Final = 16
_ASCII_CLASS: Final = bytes(
    _DIGIT_BIT if 48 <= c <= 57
    else _DASH if c == 45
    else _UNDERSCORE if c == 95
    else _QUOTE if c == 34
    else _COLON if c == 58
    else 0
    for c in range(128)
)  # fmt: skip
_SEPARATORS: Final = _DASH | _UNDERSCORE | _QUOTE | _COLON
# The letters the id prefixes end with (lower case), tested before a separator.
_PREFIX_ENDS: Final = frozenset(ord(p[-1]) for p in _ID_PREFIXES)
_PREFIX_MAX: Final = max(len(p) for p in _ID_PREFIXES)


def _may_hold_by_class(tok: str) -> bool:
    """:func:`_may_hold_volatile` of an ASCII token, by the same steps on the classes
    of its characters, found in one pass (the compiled build: ``ord(tok[i])``
    compiles to a read of the string's buffer). A real tool result has about 80
    tokens, a third of them 8+ characters long, and testing those as Python strings
    (``isalpha``, five ``in`` tests, case folding and a regex for the id prefixes)
    cost 0.2-0.7 us each. The pure-Python build keeps the string tests, faster
    there; tests/core/test_events.py holds the two to the same answers."""
    n: i64 = len(tok)
    if n < 8:
        return False
    classes = _ASCII_CLASS
    flags: i64 = 0
    i: i64 = 0
    while i < n:
        flags |= classes[ord(tok[i])]
        i += 1
    if flags & (_QUOTE | _COLON) == _QUOTE | _COLON and '":"' in tok:
        return True
    if not flags & _SEPARATORS and n < 16:
        return False
    if flags & _DIGIT_BIT:
        return True
    if flags & _DASH and n >= 36:
        return True
    if not flags & (_DASH | _UNDERSCORE):
        return False
    i = 1
    while i < n:  # an id prefix just before a separator
        if (
            classes[ord(tok[i])] & (_DASH | _UNDERSCORE)
            and (ord(tok[i - 1]) | 32) in _PREFIX_ENDS  # lower-cased
            and tok[max(0, i - _PREFIX_MAX) : i].lower().endswith(_ID_PREFIXES)
        ):
            return True
        i += 1
    return False


def _may_hold_volatile(tok: str) -> bool:
    """Whether the volatile-value pattern could match in a token, by what each of its
    alternatives needs. Every match has 8+ characters, not all letters. With a digit:
    a date ("-"), a time (":"), a hex id (16+ characters), a prefixed id ("_" or
    "-"), a quoted token ('"'). Without one: a UUID of hex letters (36+ characters
    with "-"), a known id prefix before its separator (``req_``, ``call-``), or an id
    key's quoted value ('":"'). In real tool results most tokens of 8+ characters are
    file names, paths and identifiers (``test_utils.py``) that hold none of it, and
    the pattern costs about 1 us per call; these tests cost 0.1-0.3 us."""
    if len(tok) < 8 or tok.isalpha():
        return False
    if '":"' in tok:
        return True
    dash = "-" in tok
    underscore = "_" in tok
    if not (dash or underscore or '"' in tok or ":" in tok or len(tok) >= 16):
        return False  # both cases below need one of these: no search needed
    if _DIGIT.search(tok) is not None:
        return True
    if dash and len(tok) >= 36:
        return True
    # casefold: the pattern's prefixes are case-insensitive, and the one non-ASCII
    # letter that matches one of their letters (ſ, a long s) folds to it
    return (dash or underscore) and _ID_PREFIX.search(tok.casefold()) is not None


def _mask_token(tok: str) -> str:
    """:func:`mask_volatile` of one token. A path is masked part by part: no match
    holds a "/" and no part of the pattern reads across one, so the parts mask as the
    whole does, and most parts of a path are words the pattern need not read (the
    pattern reads a path at about 25 ns a character)."""
    if "/" not in tok:
        return _VOLATILE.sub("#", tok)
    parts = tok.split("/")
    for j, part in enumerate(parts):
        if _may_hold(part):
            parts[j] = _VOLATILE.sub("#", part)
    return "/".join(parts)


# What _already_folded reads of an ASCII text, one byte a character: a space stays a
# space, another whitespace character (as str.split() knows them) becomes a tab, a
# character _may_hold looks for (a digit, "-", "_", '"', ":") a "1", the rest an "a".
_WORD_CLASSES: Final = bytes(
    32 if c == 32
    else 9 if chr(c).isspace()
    else 49 if c < 128 and _ASCII_CLASS[c]
    else 97
    for c in range(256)
)  # fmt: skip


def _already_folded(text: str) -> bool:
    """Whether :func:`_mask_tokens` gives an ASCII ``text`` back unchanged: its words
    are one space apart (no space at either end, no other whitespace) and none is
    masked. Read from the text's classes (one translation, then string searches,
    native calls in the compiled build), visiting only the words that hold a
    character a volatile value needs, instead of splitting the text into words,
    testing them and joining them again: most tool results have nothing to mask, and
    that cost 2-3 us each. A word that may hold a volatile value is masked as
    ``_masked`` masks it and compared, so the answer is exact, never a guess."""
    classes = text.encode("ascii").translate(_WORD_CLASSES).decode("ascii")
    if "\t" in classes or "  " in classes or classes.startswith(" ") or classes.endswith(" "):
        return False
    n = len(classes)
    at = classes.find("1")
    while at >= 0:
        start = classes.rfind(" ", 0, at) + 1
        end = classes.find(" ", at)
        if end < 0:
            end = n
        if end - start >= 8:
            word = text[start:end]
            if _may_hold(word) and _mask_token(word) != word:
                return False
        at = classes.find("1", end)
    return True


# Whether this module runs compiled (mypyc makes its functions built-in functions):
# the character scan of _may_hold_by_class pays only there.
_SCAN_CHARACTERS: Final = not isinstance(_may_hold_by_class, types.FunctionType)


def normalise_text(text: str) -> str:
    """Fold case, whitespace, punctuation, word order and stop words; mask volatile values.

    Two strings with the same normal form say the same thing for our purposes:
    "Paris weather", "weather in paris " and "PARIS WEATHER" all become
    "paris weather".
    """
    if len(text) >= 8:  # no volatile value is shorter
        text = fold_and_mask(text)
    if _isascii(text):
        # The same words as the regex finds in the lower-cased text (runs of ASCII
        # letters and digits), found by one bytes translate and a split: 3x faster on
        # tool arguments (shell commands), which every call normalises.
        raw = [
            w
            for w in text.encode("ascii").translate(_LOWER_WORD_BYTES).split()
            if w not in _STOPWORDS_BYTES
        ]
        raw.sort()  # bytes sort as their ASCII strings do
        return b" ".join(raw).decode("ascii")
    words = [w for w in _WORD.findall(lower_text(text)) if w not in _STOPWORDS]
    words.sort()
    return " ".join(words)


# What a result says, with what changes between two runs of the same command
# masked. Everywhere: timings ("0.41s", "took 31 ms"), the values mask_volatile
# masks (UUIDs, timestamps, long hex) and letter-digit words of 5+ characters (temp
# paths, hashes, ids). In errors also numbers of 3+ digits and decimals (pids, ports,
# line numbers, addresses) and quoted spans (the command, token or path echoed
# back): in a failure they are incidental, while in a successful output numbers can
# be the progress itself (rows processed, a loss going down), so they stay there.
# Small integers always stay: "1 failed, 4 passed" and "3 failed, 9 passed" differ.
_QUOTED = re.compile(r"`[^`'\n]{0,200}['`]|'[^'\n]{0,200}'|\"[^\"\n]{0,200}\"")
_PART = re.compile(r"[^\W_]+")
_UNITS: Final = frozenset(
    {"ms", "us", "µs", "ns", "s", "sec", "secs", "second", "seconds", "min", "minutes"}
)
_LETTERS: Final = "abcdefghijklmnopqrstuvwxyzµ"
# An error's class and message sit at the start of a tool's output (shells, editors,
# HTTP clients) and a Python traceback ends with them; 600 characters from each end
# hold both, and bound the cost per result.
_OUTCOME_CHARS: Final = 600


def _outcome_words(text: str, error: bool, coarse: bool = False) -> list[str]:
    """The words that carry a result's meaning (see above), token by token: plain
    words take the fast path, and only tokens with digits or punctuation are split.
    ``coarse``: every number masked (see :func:`outcome_signature`)."""
    words: list[str] = []
    append = words.append
    for tok in lower_text(text).split():
        if _isalpha(tok):
            if tok in _UNITS and words and words[-1].isdigit():
                words[-1] = "#"  # "31 ms": a timing
            elif len(tok) >= 3:
                append(tok)
            continue
        if len(tok) >= 8 and _VOLATILE.search(tok):
            append("#")
            continue
        decimal = error and "." in tok
        for part in _PART.findall(tok):
            if _isalpha(part):
                if part in _UNITS and words and words[-1].isdigit():
                    words[-1] = "#"
                elif len(part) >= 3:
                    append(part)
            elif part.isdigit():
                append("#" if error and (coarse or decimal or len(part) >= 3) else part)
            else:
                digits = part.rstrip(_LETTERS)
                if digits.isdigit() and part[len(digits) :] in _UNITS:
                    if words and words[-1].isdigit():
                        words.pop()  # "0.41s": the integer part belongs to the timing
                    append("#")
                elif len(part) >= 5 and not part.isdigit():
                    append("#")
                else:
                    append(part)
    return words


def outcome_signature(text: str, error: bool = False, coarse: bool = False) -> str:
    """What a tool result amounts to: the same signature means the same outcome,
    even when the words around it changed (timings, temp paths, and in errors pids,
    line numbers, the input echoed back). Words of 1-2 letters are dropped, so a
    clipped tail ("re" / "r") does not make two copies of one message differ.

    ``coarse`` (errors): every number masked, small ones too, so "found 2 actions"
    and "found 3 actions" are one rejection. Only the error loop compares errors this
    way: as the outcome of a call (what every detector reads) 1 and 2 often differ
    ("2 tests failed" after a fix that made 1 pass)."""
    if len(text) > 2 * _OUTCOME_CHARS:
        text = text[:_OUTCOME_CHARS] + " " + text[-_OUTCOME_CHARS:]
    if error:
        text = _QUOTED.sub(" # ", text)
    words = _outcome_words(text, error, coarse and error)
    digest = _hexdigest(" ".join(words).encode(_UTF8, _LONE))
    return ("E" if error else "O") + digest[1:]


# Argument names under which tools take a shell command line.
_COMMAND_KEYS: Final = ("command", "cmd", "script", "commands")
# Shell built-ins that do nothing: ``:`` and ``true`` ignore their arguments.
_NOOP_PROGRAMS: Final = frozenset({":", "true"})


def shell_command(args: Any) -> str | None:
    """The command line a shell tool was given, or None for other tools."""
    if type(args) is dict:  # the common case: native lookups, no decoding or ABC checks
        return _command_in(args) if args else None
    args = maybe_json(args)
    if not isinstance(args, Mapping) or not args:
        return None
    return _command_in(args if type(args) is dict else dict(args))


def _command_in(args: dict[Any, Any]) -> str | None:
    for key in _COMMAND_KEYS:
        value = args.get(key)
        if isinstance(value, str):
            return value
        if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
            return " ".join(value)
    return None


def is_noop_command(command: str) -> bool:
    """True for a command line that cannot do anything: blank, or only shell no-ops
    (``:`` / ``true``, whose arguments are ignored) joined by ``;``/``&&``/newlines,
    or a bare comment. A first word that merely starts with ``:`` (``:)``, ``:ls``)
    counts too: no program has such a name, so the shell runs nothing (a syntax
    error or "command not found"). Measured on the corpus: an agent typing garbled
    ``:)`` commands is stopped one step after the labelled point, with no new stop on
    a solved run that is not itself labelled a loop."""
    head = command.lstrip()[:1]
    if head and head not in ":t#":
        return False  # the common case, decided without splitting the command
    for part in re.split(r"\n|;|&&|\|\|", command):
        words = part.split()
        if not words or words[0].startswith("#"):
            continue
        first = words[0]
        if first in _NOOP_PROGRAMS or first.startswith(":"):
            continue
        return False
    return True


# Argument keys that describe a call rather than parameterise it: the model rewords
# them on every try ("Run the tests", "Re-run the tests to check"). Dropped from the
# normalised call key when the call has other arguments, kept for the messages.
DESCRIBING_KEYS: Final = frozenset(
    {
        "description", "reason", "reasoning", "explanation", "justification", "rationale",
        "thought", "thoughts", "thinking", "summary", "purpose", "intent", "comment",
        "comments", "note", "notes",
    }
)  # fmt: skip
# Tools that change nothing in the world: the model thinks, plans or keeps notes
# (tau-bench's ``think``, the MCP sequential-thinking server, Claude Code's TodoWrite,
# Codex's update_plan, Gemini CLI's write_todos). Names compared lower-cased with
# everything but letters and digits dropped.
_REFLECTION_TOOLS: Final = frozenset(
    {
        "think", "thinking", "thought", "reflect", "reflection", "reason", "reasoning",
        "plan", "planning", "scratchpad", "notepad", "sequentialthinking", "todowrite",
        "todoread", "writetodos", "updateplan", "updatetodos",
    }
)  # fmt: skip
# A call whose every argument is one of these is a thought, whatever the tool's name.
_REFLECTION_ARGS: Final = frozenset({"thought", "thoughts", "thinking", "reasoning", "reflection"})


def tool_key(name: str | None) -> str:
    """A tool name lower-cased with everything but ASCII letters and digits dropped:
    ``TodoWrite``, ``todo_write`` and ``todo-write`` are one tool."""
    if not name:
        return ""
    return "".join(c for c in name.lower() if c.isascii() and c.isalnum())


_REFLECTION_NAMES: dict[str, bool] = {}  # tool name -> reflection_tool(name), bounded


def reflection_tool(name: str | None) -> bool:
    """Whether a tool's name says it only thinks, plans or takes notes (cached)."""
    if not name:
        return False
    return _by_name(_REFLECTION_NAMES, name, _reflection_name)


def _reflection_name(name: str) -> bool:
    return tool_key(name) in _REFLECTION_TOOLS


def is_reflection(name: str | None, args: Any) -> bool:
    """Whether a tool call only thinks, plans or takes notes: it changes nothing in
    the world, so it is neither progress nor an attempt. A byte-identical call failing
    three times with a ``think`` between each try is still three tries."""
    if reflection_tool(name):
        return True
    if type(args) is dict:  # the common case: iterated natively
        return _thoughts_only(args) if args else False
    args = maybe_json(args)
    if not isinstance(args, Mapping) or not args:
        return False
    return _thoughts_only(args if type(args) is dict else dict(args))


def _thoughts_only(args: dict[Any, Any]) -> bool:
    for key in args:  # most calls fail on their first key
        if not isinstance(key, str) or key.lower() not in _REFLECTION_ARGS:
            return False
    return True


# What a failed call's result starts with by convention when the trace carries no
# error flag: "Error: ...", "ERROR: ...", "Exception: ...", a Python traceback, or a
# JSON object whose "error" field holds something.
_ERROR_TEXT: Final = re.compile(
    r"\s*(?:(?:error|exception|fatal)(?:\s*\[[^\]\n]{0,40}\])?\s*:"
    r"|traceback \(most recent call last\)"
    r'|\{\s*"error"\s*:(?!\s*(?:null\b|false\b|""|\[\s*\]|\{\s*\})))',
    re.IGNORECASE,
)


# A failure a result reports in its text without the trace flagging it: a non-zero exit
# status printed by the harness (<returncode>1</returncode>, "exit code 2", "exitcode:
# 1"), or a traceback anywhere near the start.
_FAILED_TEXT: Final = re.compile(
    r"<returncode>\s*-?[1-9]|\bexit(?:\s*code|code|\s*status)\s*[:=]?\s*-?[1-9]"
    r"|traceback \(most recent call last\)",
    re.IGNORECASE,
)
_FAILED_CHARS: Final = 2000


def reports_failure(text: str) -> bool:
    """Whether a result says, somewhere near its start, that the call failed: an error
    by convention (:func:`looks_like_error`), a non-zero exit status, or a traceback. A
    failed call may succeed when tried again (a flaky network, a race): its repeats are
    judged later than those of a call that worked (detectors.repeat)."""
    return looks_like_error(text) or _FAILED_TEXT.search(text, 0, _FAILED_CHARS) is not None


def looks_like_error(text: str) -> bool:
    """Whether a result's text says the call failed, by the conventions tools follow
    when they report failure as text (tau-bench's "Error: ...", a traceback, an
    ``{"error": ...}`` object). Decided from the start of the text only."""
    return _ERROR_TEXT.match(text) is not None


def lower_text(text: str) -> str:
    """``text.lower()`` as CPython writes it, in both builds. mypyc compiles
    ``s.lower()`` to a primitive that lower-cases a final capital sigma as "σ" where
    Python writes "ς" (the one context-sensitive mapping): "ΟΔΟΣ" and "οδος" were the
    same word in the pure build and two in the compiled one. A text holding a capital
    sigma goes through CPython's method; any other text keeps the fast primitive."""
    if "Σ" in text:  # one C search, at once for a text of narrower characters
        return _STR_LOWER(text)
    return text.lower()


def maybe_json(value: Any) -> Any:
    """Decode a string that holds a JSON object or array (agents and trace exports
    often stringify arguments); anything else unchanged."""
    if isinstance(value, str):
        s = value.strip()
        if s[:1] in ("{", "[") and s[-1:] in ("}", "]"):
            try:
                return orjson.loads(s)
            except orjson.JSONDecodeError:
                return value
    return value


# Nesting deeper than this is fingerprinted instead of walked recursively: JSON
# parsers accept 500+ levels, orjson.dumps stops at 255, and Python's own
# recursion limit (1000 frames) is shared with the caller's stack.
_MAX_DEPTH: Final = 64


def _sorted_json(value: Any) -> bytes:
    """Key-sorted JSON bytes of any value, whatever its depth, size or cycles.

    orjson handles the common case in C. What it refuses (integers beyond 64 bits,
    nesting past its limit, a cyclic structure built in Python) goes through
    :func:`_bounded`, which replaces whatever lies deeper than :data:`_MAX_DEPTH`
    by a fingerprint of it, so no argument value can crash the guard, and two
    different deep values still get different bytes.
    """
    try:
        return _dumps(value, option=_SORTED_JSON, default=str)
    except TypeError:
        bounded = _bounded(value)
        return json.dumps(bounded, sort_keys=True, default=str, separators=(",", ":")).encode()


def _bounded(value: Any) -> Any:
    """A copy of ``value`` that is at most :data:`_MAX_DEPTH` deep: each subtree at
    that depth becomes the string ``"#deep:<hash>"`` of its :func:`_deep_fingerprint`,
    and a container met again inside itself becomes ``"#cycle"``. Recursion stays
    within :data:`_MAX_DEPTH` frames."""

    def walk(v: Any, depth: int, path: frozenset[int]) -> Any:
        if isinstance(v, (Mapping, list, tuple)):
            if id(v) in path:
                return "#cycle"
            if depth >= _MAX_DEPTH:
                return "#deep:" + _deep_fingerprint(v)
            inner = path | {id(v)}
            if isinstance(v, Mapping):
                return {str(k): walk(x, depth + 1, inner) for k, x in v.items()}
            return [walk(x, depth + 1, inner) for x in v]
        return v

    return walk(value, 0, frozenset())


def _deep_fingerprint(value: Any) -> str:
    """A hash of a whole nested value, computed with an explicit stack (no recursion,
    any depth). Keys are visited in sorted order so key order does not matter, and a
    container met again inside itself (only Python can build one) hashes as a marker
    instead of being walked forever. Every element is visited once: nothing is skipped,
    so different values hash differently."""
    digest = xxhash.xxh3_64()
    # work items: (value, ids of the containers enclosing it) or a closing token
    stack: list[tuple[Any, frozenset[int]] | bytes] = [(value, frozenset())]
    while stack:
        item = stack.pop()
        if isinstance(item, bytes):
            digest.update(item)
            continue
        v, path = item
        if isinstance(v, (Mapping, list, tuple)):
            if id(v) in path:
                digest.update(b"@")
                continue
            inner = path | {id(v)}
            if isinstance(v, Mapping):
                digest.update(b"{")
                stack.append(b"}")
                for k, x in sorted(v.items(), key=lambda kv: str(kv[0]), reverse=True):
                    stack.append((x, inner))
                    stack.append(b"\x00" + str(k).encode(_UTF8, _LONE) + b":")
            else:
                digest.update(b"[")
                stack.append(b"]")
                for x in reversed(v):
                    stack.append((x, inner))
                    stack.append(b",")
        else:
            digest.update(_scalar_bytes(v))
    return digest.hexdigest()


def _scalar_bytes(value: Any) -> bytes:
    """JSON bytes of a leaf (a string, a number, anything else as its ``str``)."""
    try:
        return orjson.dumps(value, default=str)
    except TypeError:  # an integer beyond 64 bits
        return str(value).encode(_UTF8, _LONE)


def canonical_args(args: Any) -> bytes:
    """Canonical JSON bytes of tool arguments: key order and JSON-string-vs-dict insensitive."""
    return _sorted_json(maybe_json(args))


# A calendar day in a string argument ("2024-05-03", alone or in a query: "flights
# on 2024-05-03") is kept, like a page number: it is what the call asks about. A clock
# reading ("2024-05-03T10:00:07Z", "2024-05-03 10:00") stays masked. Measured on the 8
# sources: one run labelled not-a-loop (already warned) is warned 3 events earlier,
# nothing else changes; an agent scanning six days for a flight, each answer empty, was
# stopped at the 3rd day.
_DAY = re.compile(r"\b\d{4}-\d{2}-\d{2}\b(?![ T]\d{2}:)")
# What every day holds, searched first: a pattern that opens with a literal is found by
# a fast scan (0.3 us on a 250-character shell command, against 4.7 for _DAY itself).
_DAY_HINT = re.compile(r"-\d\d-")


def _normalised_string(value: str) -> str:
    """:func:`normalise_text` of an argument, its calendar days kept among its words."""
    if "-" in value and _DAY_HINT.search(value) is not None:  # most arguments: decided here
        days = _DAY.findall(value)
        if days:
            rest = normalise_text(_DAY.sub(" ", value)).split()
            return " ".join(sorted(rest + days))
    return normalise_text(value)


def _normalise_value(value: Any, depth: int = 0, path: set[int] | None = None) -> Any:
    """The normalised form of an argument value (strings folded, volatile keys masked).

    From :data:`_MAX_DEPTH` down a subtree is kept exact, as its fingerprint: deep
    values are compared as they are rather than walked with unbounded recursion. A
    container inside itself (built in Python) becomes ``"#cycle"``, as in
    :func:`_bounded`; ``path`` holds the ids of the enclosing containers.
    """
    if isinstance(value, str):
        return _normalised_string(value)
    kind = type(value)
    if kind is int or kind is float or kind is bool or value is None:
        return value  # a JSON leaf, without the ABC check of Mapping below
    if kind is not dict and kind is not list and not isinstance(value, (Mapping, list, tuple)):
        return value
    if path is None:
        path = set()
    elif id(value) in path:
        return "#cycle"
    if depth >= _MAX_DEPTH:
        return "#deep:" + _deep_fingerprint(value)
    path.add(id(value))
    try:
        if kind is dict or (kind is not list and isinstance(value, Mapping)):
            # each key lower-cased once, then read for what it names
            items = [(lower_text(str(k)), v) for k, v in value.items()]
            if depth == 0 and len(items) > 1:
                # Fields that describe a call (Claude Code's Bash ``description``) are
                # rewritten by the model on every try: they must not make a repeat new.
                kept = [(k, v) for k, v in items if k not in DESCRIBING_KEYS]
                if kept:
                    items = kept
            return {
                k: "#" if k in _VOLATILE_KEYS else _normalise_value(v, depth + 1, path)
                for k, v in items
            }
        return [_normalise_value(v, depth + 1, path) for v in value]
    finally:
        path.discard(id(value))


# Caches of fingerprints (the reflection tool names here, an event's normalised call,
# result and outcome keys in events.py) hold at most this many entries; cleared when full.
_NORM_CACHE_MAX: Final = 16384


def _by_name(cache: dict[str, bool], name: str, test: Callable[[str], bool]) -> bool:
    """What ``test`` says of a tool name, cached: a run calls a handful of tools, each
    many times (the cache is cleared when full)."""
    known = cache.get(name)
    if known is None:
        if len(cache) >= _NORM_CACHE_MAX:
            cache.clear()
        known = cache[name] = test(name)
    return known


# -- waiting ---------------------------------------------------------------------
# A call that waits for something is polling, not looping (detectors.wait.WaitBudget).
# Its command waits: ``sleep 30``, ``watch ...``, ``--watch``, ``--wait``, ``wait``;
# the number is its duration in seconds (``5m``, ``2h`` and ``1.5`` read too), 0
# when it does not say. ``timeout 60 pytest`` bounds a command, it waits for nothing.
_WAIT_COMMAND: Final = re.compile(
    r"(?:^|[\s;&|(`])sleep\s+(\d+(?:\.\d+)?)([smhd]?)\b"
    r"|(?:^|[\s;&|(`])(?:watch|wait)(?=$|[\s;&|)`])"
    r"|\s--(?:watch|wait)\b"
)
_UNIT_SECONDS: Final = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_WAIT_CHARS: Final = 2000
# Tool names whose words say they wait (wait_for_job, sleep, poll_status, watchRun).
_WAIT_WORDS: Final = frozenset({"wait", "sleep", "poll", "watch"})
_NAME_WORD: Final = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])")
_WAIT_NAMES: dict[str, bool] = {}  # tool name -> waiting_tool(name), bounded


def waiting_tool(name: str | None) -> bool:
    """Whether a tool's name says it waits: a word of it is wait, sleep, poll or watch
    (``wait_for_job``, ``sleep``, ``poll_status``, ``watchRun``; cached)."""
    if not name:
        return False
    return _by_name(_WAIT_NAMES, name, _waiting_name)


def _waiting_name(name: str) -> bool:
    return not _WAIT_WORDS.isdisjoint(w.lower() for w in _NAME_WORD.findall(name))


def declared_wait(command: str) -> float | None:
    """The seconds a shell command says it waits (``sleep 30``: the longest such
    number), 0.0 for a wait of no stated length (``--watch``, ``wait``), or None when
    it does not wait."""
    if "sleep" not in command and "wait" not in command and "watch" not in command:
        return None  # the common case, decided without a regular expression
    longest: float | None = None
    for match in _WAIT_COMMAND.finditer(command, 0, _WAIT_CHARS):
        number, unit = match.group(1), match.group(2)
        seconds = float(number) * _UNIT_SECONDS[unit or ""] if number else 0.0
        if longest is None or seconds > longest:
            longest = seconds
    return longest


# A result that reports a status still pending: a short text, or a status field, that
# says pending / queued / in progress / running / waiting / not ready / starting...; a
# browser agent's page that says "Loading..." or "Please wait" has not loaded yet.
_PENDING: Final = (
    r"pending|queued|in[ _-]?progress|running|waiting|not[ _-]ready|starting|processing"
    r"|scheduled|building|deploying|provisioning|initiali[sz]ing|preparing|generating|loading"
    # a Kubernetes pod on its way up (kubectl's STATUS column)
    r"|containercreating|podinitializing|init:\d+/\d+"
    r"|please\s+wait"
    r"|not\s+(?:finished|complete|completed|done)\s+yet"
    r"|not\s+yet\s+(?:ready|available|finished|complete|completed|done)"
    r"|still\s+being\s+\w+|try\s+again\s+later"
)
# A status in capitals may name what is pending first (CloudFormation's
# CREATE_IN_PROGRESS, UPDATE_IN_PROGRESS); a lower-case prefix is a name (test_loading).
# A status field's name may be compound ("StackStatus", "provisioningState").
_ACTION_PREFIX: Final = r"(?-i:[A-Z]+_)*"
_PENDING_FIELD: Final = re.compile(
    rf"\b\w*?(?:status|state|phase)\b[\"']?\s*[:=]\s*[\"']?{_ACTION_PREFIX}(?:{_PENDING})\b",
    re.IGNORECASE,
)
_PENDING_WORD: Final = re.compile(rf"\b{_ACTION_PREFIX}(?:{_PENDING})\b", re.IGNORECASE)
_PENDING_SHORT: Final = 160  # a bare status line ("Job 42: running") is this short
_STATUS_CHARS: Final = 600  # a status report says its state near its start


def reports_pending(text: str) -> bool:
    """Whether a result reports that something is not finished yet: a status field
    saying so (``"status": "in_progress"``, ``state=queued``), or a short text with
    such a word ("Deployment pending", "job 42 still running"). A long output that
    mentions "running" somewhere (a test log) is not a status."""
    if len(text) <= _PENDING_SHORT:
        return _PENDING_WORD.search(text) is not None
    end = _STATUS_CHARS
    if text.find("tat", 0, end) < 0 and text.find("hase", 0, end) < 0:
        return False  # most long results: no status field, no regular expression
    return _PENDING_FIELD.search(text, 0, end) is not None
