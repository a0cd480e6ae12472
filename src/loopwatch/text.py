"""Text helpers shared by the detectors: words, overlap, fingerprints, emptiness.

One place for what several detectors ask of a text, so that "a word", "the same
words" and "an empty result" mean the same thing everywhere. Masking of volatile
values and the normal forms of calls and results live in fingerprints.py.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from re import Pattern
from typing import Any, Final

import xxhash

from .fingerprints import (
    _LONE,
    _UTF8,
    _hexdigest,
    _isalpha,
    _isascii,
    _xxh32,
    lower_text,
    mask_volatile,
    maybe_json,
    normalise_text,
)
from .redact import MARGIN, redact, redact_extra, redact_prefix

__all__ = [
    "ECHO_PREFIX",
    "HEAD_RUNG",
    "LONG_WORD",
    "WORD",
    "args_preview",
    "args_text",
    "asks_of",
    "contentless",
    "echo_digest",
    "echo_values",
    "entities",
    "fingerprint",
    "head_marks",
    "jaccard",
    "lexical_verdict",
    "looks_like_code",
    "negative",
    "phrase_lower",
    "plain_words",
    "preview",
    "request_overlap",
    "request_words",
    "said_of",
    "shared_head",
    "specifics",
    "split_words",
    "word_at_rest",
    "word_mark",
    "word_marks",
    "word_set",
    "words_alike",
]

# A word: a run of letters or digits (no underscores), in any script.
WORD: Final = re.compile(r"[^\W_]+")
# ASCII punctuation to spaces: with str.split this finds words several times faster
# than WORD, for the detectors that read up to a few thousand characters per event.
_ASCII_PUNCTUATION: Final = b"!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
# Other text is lower-cased as str, then spaced as its UTF-8 bytes: ASCII punctuation
# never occurs inside a multi-byte character, and a bytes translate is one C pass where
# str.translate with a mapping raises and clears a KeyError for every character it does
# not map (155 us on 2,000 characters holding one typographic apostrophe, 16 us so).
_SPACED_BYTES: Final = bytes.maketrans(_ASCII_PUNCTUATION, b" " * len(_ASCII_PUNCTUATION))
# The same for bytes, lower-casing too: ASCII text (most model output) is lower-cased
# and spaced in one C pass, several times faster than str.translate's per-character
# lookups (and a pass less than str.lower first).
_LOWER_SPACED_BYTES: Final = bytes.maketrans(
    b"ABCDEFGHIJKLMNOPQRSTUVWXYZ" + _ASCII_PUNCTUATION,
    b"abcdefghijklmnopqrstuvwxyz" + b" " * len(_ASCII_PUNCTUATION),
)


def _spaced(text: str) -> str:
    """Lower-cased, with ASCII punctuation turned into spaces."""
    if _isascii(text):  # O(1): CPython records it with the string
        return text.encode("ascii").translate(_LOWER_SPACED_BYTES).decode("ascii")
    return (
        lower_text(text)
        .encode("utf-8", "surrogatepass")
        .translate(_SPACED_BYTES)
        .decode("utf-8", "surrogatepass")
    )


def phrase_lower(text: str) -> str:
    """``text`` lower-cased for phrase patterns, its typographic apostrophes (right and
    left single quotes, the modifier letter) plain: phones, word processors and many
    models write "don’t", and the patterns ("don't have", "didn't") are written with
    "'". One character for one: offsets into the result are offsets into ``text``
    wherever lower-casing keeps them. Replaced one by one, as str.translate with a
    mapping raises and clears a KeyError per character it does not map."""
    if _isascii(text):
        return text.lower()
    return lower_text(text).replace("\u2019", "'").replace("\u2018", "'").replace("\u02bc", "'")


def word_set(text: str) -> set[str]:
    """The distinct words of a text, lower-cased (regex words: any script)."""
    return set(WORD.findall(lower_text(text)))


def plain_words(text: str) -> set[str]:
    """The distinct words of a text, lower-cased, ASCII punctuation dropped (str
    methods only: the fast path for long outputs)."""
    return set(split_words(text))


def split_words(text: str) -> list[str]:
    """The words of a text in order, repeats included: lower-cased, ASCII punctuation
    dropped (what :func:`plain_words` makes a set of). A list, not a set, when the
    order matters: a set's order changes with each process's string hashing, and
    state built in that order (a FIFO vocabulary) must be the same on every worker."""
    return _spaced(text).split()


# Words this long are kept in run state by their fingerprint (word_at_rest).
LONG_WORD: Final = 16


def word_at_rest(word: str) -> str:
    """A word as run state keeps it (the recent words of outputs and messages): itself,
    or ``#`` and its fingerprint when it has 16+ characters, as the body of a key or a
    token has (``#`` is never in a word: no two words share a key). One word, one key:
    word sets compare as before, so no verdict changes."""
    return word if len(word) < LONG_WORD else "#" + fingerprint(word)


# Words that carry no request: dropped before two messages between agents are compared
# (request_words), so that "could you please do it" adds nothing to their overlap.
_REQUEST_FILLER: Final = frozenset(
    {
        "a", "an", "the", "in", "of", "for", "on", "to", "at", "by", "with", "and", "or",
        "is", "are", "be", "me", "you", "i", "we", "it", "this", "that", "please", "could",
        "can", "would", "will", "do", "so", "ok", "okay", "let", "us", "your", "my",
    }
)  # fmt: skip


def request_words(text: str) -> dict[str, int]:
    """A message's content words, as run state keeps them (dict keys: a set that
    serialises; long words by their fingerprint, see :func:`word_at_rest`)."""
    return dict.fromkeys(
        (word_at_rest(w) for w in WORD.findall(lower_text(text)) if w not in _REQUEST_FILLER), 1
    )


def request_overlap(a: Mapping[str, int], b: Mapping[str, int]) -> float:
    """Shared content words over the larger message's content words.

    Stricter than containment (shared over the smaller): a short request and a long
    page that happens to contain its words are not the same message.
    """
    if not a or not b:
        return 0.0
    return len(a.keys() & b.keys()) / max(len(a), len(b))


# How many content words of a call's arguments run state keeps marks of (word_marks).
_WORD_MARKS: Final = 16


def word_mark(word: str) -> int:
    """A word's 32-bit mark (xxh32 of its UTF-8): what run state keeps of a word. The
    hash function is bound once, as a module attribute read per word cost a generic
    lookup each time."""
    return _xxh32(word.encode(_UTF8, _LONE))


def word_marks(said: list[Any]) -> list[int]:
    """32-bit marks of the content words of a call's argument values (:func:`said_of`;
    filler dropped as :func:`request_words` drops it), sorted, at most 16: what run
    state keeps to compare the words of two calls without keeping the words (a call's
    arguments may hold what a store must not)."""
    marks: set[int] = set()
    for value in said:
        for w in WORD.findall(lower_text(str(value))):
            if w not in _REQUEST_FILLER:
                marks.add(word_mark(w))
    return sorted(marks)[:_WORD_MARKS]


def words_alike(a: list[int], b: list[int]) -> float:
    """Shared marks over the larger set of marks (:func:`word_marks`), as
    :func:`request_overlap` compares words: 0.0 when either is empty."""
    if not a or not b:
        return 0.0
    return len(set(a).intersection(b)) / max(len(a), len(b))


def jaccard(a: set[str], b: set[str]) -> float:
    """Jaccard similarity of two word sets (0.0 when either is empty)."""
    if not a or not b:
        return 0.0
    inter = len(a & b)
    return inter / (len(a) + len(b) - inter)


def fingerprint(text: str) -> str:
    """Stable 16-hex fingerprint of a text (xxh3, as the event keys)."""
    return str(_hexdigest(text.encode(_UTF8, _LONE)))


# A text's opening, as :func:`head_marks` records it: one mark per this many characters,
# up to this many. A boilerplate opening (a role-play agent's fixed preamble, a framework's
# header before each message) is found to within one rung by comparing marks, without
# keeping the text itself.
HEAD_RUNG: Final = 32
_HEAD_RUNGS: Final = 32


def head_marks(text: str) -> list[int]:
    """32-bit marks of a text's first 32, 64, 96... characters (at most 1,024): two
    texts that open with the same characters share their first marks. Only whole rungs
    are marked, so a text shorter than one rung has none."""
    digest = xxhash.xxh3_64()
    marks: list[int] = []
    end = min(len(text), HEAD_RUNG * _HEAD_RUNGS)
    for start in range(0, end - HEAD_RUNG + 1, HEAD_RUNG):
        digest.update(text[start : start + HEAD_RUNG].encode(_UTF8, _LONE))
        marks.append(digest.intdigest() & 0xFFFFFFFF)
    return marks


def shared_head(a: list[int], b: list[int]) -> int:
    """How many characters two texts share at their start, to within one rung below,
    from their :func:`head_marks`."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n * HEAD_RUNG


# A result with less content than this (markup and spacing removed) is an
# acknowledgement: "ok", "[]", "File written.", or mini-swe-agent's
# "<returncode>0</returncode><output></output>" after a silent shell edit.
_ACK_CHARS: Final = 40
_MARKUP: Final = re.compile(r"<[^>]{1,40}>|\s+")


def contentless(text: str) -> bool:
    """True for an empty result or a bare acknowledgement."""
    n = len(text)
    if n > 400:
        return False
    if n < _ACK_CHARS:
        return True  # the markup and spaces taken out only make it shorter
    if "<" not in text:
        # no markup: what is left is the text without its whitespace (str.split and the
        # pattern's \s both split at str.isspace), without a regex
        return len("".join(text.split())) < _ACK_CHARS
    return len(_MARKUP.sub("", text)) < _ACK_CHARS


# A lookup that found nothing: an empty collection, or a short text saying so. Not an
# acknowledgement that something changed: ten reworded searches that each return
# "No results found." are not ten pieces of progress.
_EMPTY_VALUES: Final = frozenset({"[]", "{}", "null", "none", '""', "''", "[[]]"})
_NOTHING_FOUND: Final = re.compile(
    r"\b(?:no (?:\w+ )?(?:results?|matches|match|hits|items|files|records|entries|rows|data)"
    r"(?: (?:were |was )?found)?\b|not found\b|nothing (?:found|matched)\b"
    r"|0 (?:results|matches|hits|items|files|records|rows)\b|did not match any"
    r"|returned no\b|could not find any\b|no such )"
)  # searched in lower-cased text
_NEGATIVE_CHARS: Final = 200


def negative(text: str) -> bool:
    """True for a result that says nothing was found (``[]``, ``No results found.``).
    Only short texts: a long result that mentions "not found" somewhere says more."""
    if len(text) > _NEGATIVE_CHARS:
        return False
    low = lower_text(text.strip())
    if low in _EMPTY_VALUES:
        return True
    # every phrase of _NOTHING_FOUND holds "no" or "0 ": most results hold neither
    if "no" not in low and "0 " not in low:
        return False
    return _NOTHING_FOUND.search(low) is not None


# What makes a message specific: ids, codes, numbers, references (``#W2378156``,
# ``HXDUBJ``, ``sophia_silva_7557``, ``SFO``, ``5th``, ``a@b.c``). A user who brings one
# not said before brings information; one who defers, restates or thanks does not.
# A token (letters, digits and the marks ids are written with) holding a digit, "_",
# "@" or "#"; or a code of 3+ capitals. Anchored at a token's start, so each token is
# read once.
# Read as the runs of such characters (one regular expression without look-around,
# which cost 60 ns a character), each kept whole when it holds a digit, "_", "@" or
# "#", else searched for codes of capitals.
_RUN: Final = re.compile(r"[\w@#.:/+-]+")
_CAPITALS: Final = re.compile(r"\b[A-Z]{3,}\b")
_MARKED: Final = re.compile(r"[\d_@#]")
_SPECIFIC_CHARS: Final = 2000  # a message names its specifics early; bounds the cost
_TRAILING: Final = ".:/+-"
# The same runs in ASCII text, found by one bytes translate (every other character to a
# space) and a split: the regex's character class cost 25 ns a character.
_RUN_CHARS: Final = frozenset(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@#.:/+-"
)
_NOT_RUN_TO_SPACE: Final = bytes(c if chr(c) in _RUN_CHARS else 32 for c in range(256))


def _runs(text: str) -> list[str]:
    """What ``_RUN.findall(text, 0, _SPECIFIC_CHARS)`` finds."""
    head = text[:_SPECIFIC_CHARS]
    if _isascii(head):
        return head.encode("ascii").translate(_NOT_RUN_TO_SPACE).decode("ascii").split()
    return _RUN.findall(head)


def specifics(text: str) -> list[str]:
    """The specific tokens of a message, lower-cased, in order of first appearance:
    tokens with a digit, an underscore, ``@`` or ``#``, and all-capital codes of three
    letters or more (``SFO``, not ``I`` or ``ID``). Read from the first 2,000
    characters."""
    out: dict[str, None] = {}
    for run in _runs(text):
        if run.isalpha():
            # most runs are plain words: no digit, "_", "@" or "#" (none is a letter),
            # and a code of capitals only when the whole word is one (a word boundary
            # falls only at its ends): str methods, not two regex calls per word
            if len(run) >= 3 and run.isascii() and run.isupper():
                out[run.lower()] = None
        elif _MARKED.search(run) is not None:
            tok = run.strip(_TRAILING)
            if len(tok) >= 2:
                out[lower_text(tok)] = None
        elif len(run) >= 3 and not run.islower():
            for code in _CAPITALS.findall(run):
                out[code.lower()] = None
    return list(out)


# What a call says: the string and number values of its arguments, read once when the
# call is observed (values are immutable: a caller reusing its arguments dict for the
# next call changes nothing read from it), turned into what the detectors need only
# when they need it (:class:`~loopwatch.state.CallRecord` keeps them in memory, never
# at rest).
_SAID_NODES: Final = 64  # a bounded walk: arguments built in Python may contain themselves
_ECHO_VALUES: Final = 3
_ECHO_CHARS: Final = 200
_ECHO_MIN: Final = 6  # shorter argument values are words any result may hold
ECHO_PREFIX: Final = 4  # characters of a value kept to find it again (never the value)
_ASKS_MAX: Final = 8
_SPEC_MASK: Final = 0xFFFFF  # 20 bits a specific: a chance collision among 8 is ~1e-5
_WORD_EDGES: Final = ".,;:!?()[]{}<>\"'`"


def said_of(args: Any) -> list[Any]:
    """The string and number values of a call's arguments (booleans left out), in the
    order :func:`asks_of` and :func:`echo_values` read them: a depth-first walk, last
    value first, of at most 64 nodes."""
    said: list[Any] = []
    todo = [maybe_json(args)]
    budget = _SAID_NODES
    while todo and budget:
        budget -= 1
        value = todo.pop()
        if isinstance(value, (str, int, float)) and not isinstance(value, bool):
            said.append(value)
        elif isinstance(value, dict):
            for item in value.values():  # not extend(): it copies the view to a list first
                todo.append(item)
        elif isinstance(value, list):
            todo.extend(value)
    return said


def echo_values(said: list[Any]) -> list[str]:
    """The argument values a result may quote back (:func:`said_of`): the first 3
    strings of 6 to 200 characters."""
    out: list[str] = []
    for value in said:
        if isinstance(value, str) and _ECHO_MIN <= len(value) <= _ECHO_CHARS:
            out.append(value)
            if len(out) == _ECHO_VALUES:
                break
    return out


def echo_digest(value: str) -> list[Any] | None:
    """What finds an argument value in a result without keeping the value: its first 4
    characters, its length and a hash of it; None for a value too short (under 6
    characters) to be more than a word any result may hold."""
    if len(value) < _ECHO_MIN:
        return None
    return [value[:ECHO_PREFIX], len(value), _hexdigest(value.encode(_UTF8, _LONE))]


def asks_of(said: list[Any]) -> list[int]:
    """The fingerprints of the specific things a call asks about (:func:`said_of`):
    ids, dates, codes, numbers; at most 8 (a number is one; a string's are read by
    :func:`_asked`)."""
    asks: list[int] = []
    for value in said:
        if len(asks) >= _ASKS_MAX:
            break
        if isinstance(value, str):
            _asked(value, asks)
        else:
            asks.append(_spec_id(str(value)))
    return asks


def _asked(value: str, asks: list[int]) -> None:
    """Add to ``asks`` the specific words of an argument's first 200 characters: those
    with a digit, ``_``, ``@`` or ``#`` (an id, a date, a flight), and codes of three
    capitals or more (an airport). A plain word is read with one C call (``isalpha``)."""
    for word in value[:_ECHO_CHARS].split():
        word = word.strip(_WORD_EDGES)
        if len(word) < 2 or len(asks) >= _ASKS_MAX:
            continue
        if _isalpha(word):
            if len(word) >= 3 and word.isupper():
                asks.append(_spec_id(lower_text(word)))
        elif _has_mark(word):
            asks.append(_spec_id(lower_text(word)))


def _has_mark(word: str) -> bool:
    """Whether a word holds a digit, ``_``, ``@``, ``#``, or a ``.`` or ``/`` inside it
    (a domain, a file, a path: its edges are stripped before): a loop, not ``any()``
    over a generator (a generator object per word cost most of :func:`_asked`)."""
    for c in word:  # noqa: SIM110 - any() over a generator is the cost this saves
        if c.isdigit() or c in "_@#./":
            return True
    return False


def _spec_id(token: str) -> int:
    return word_mark(token) & _SPEC_MASK


def preview(value: Any, limit: int = 80, extra: tuple[Pattern[str], ...] = ()) -> str:
    """A short one-line rendering of tool arguments or text for messages, with
    secrets redacted (:mod:`loopwatch.redact`; ``extra``: the user's own patterns)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else _compact(value)
    text = " ".join(text.split())
    cut = len(text) > limit + MARGIN
    text = redact_prefix(text, limit, extra)
    return text if len(text) <= limit and not cut else text[: limit - 3] + "..."


# What an arguments preview reads of the canonical arguments: all of them up to 80 bytes,
# else the first 200 (cut to 80 characters, a key cut there redacted).
ARGS_PREVIEW_BYTES: Final = 200


def args_preview(raw: bytes, extra: tuple[Pattern[str], ...] = ()) -> str:
    """The canonical arguments (JSON bytes, or their first 200) as messages quote them
    and a stored state keeps them: short, with secrets redacted (``extra``: the user's
    own patterns)."""
    if len(raw) <= 80:
        text = redact(raw.decode("utf-8", "replace"))
        return redact_extra(text, extra) if extra else text
    return preview(raw[:ARGS_PREVIEW_BYTES].decode("utf-8", "ignore"), extra=extra)


def _compact(value: Any) -> str:
    import orjson

    try:
        return orjson.dumps(value, default=str).decode()
    except TypeError:
        return str(value)


_TOKEN = re.compile(r"[\w./-]+")
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*)([^\W_]+)")
_LEXICAL_SAME: Final = 0.8  # word-set Jaccard at which texts are the same without a model


def entities(text: str) -> set[str]:
    """The specifics that make related texts different, lower-cased: numbers,
    capitalised words not starting a sentence ("Tokyo", "EUR", "FirstValue"), and
    code-like tokens (``file.py``, ``snake_case``, ``a/b``)."""
    starts = {m.start(1) for m in _SENTENCE_START.finditer(text)}
    out = set()
    for m in _TOKEN.finditer(text):
        token = m.group().strip("./-")
        if not token:
            continue
        if (
            any(c.isdigit() for c in token)
            or (token[0].isupper() and m.start() not in starts)
            or any(c in token for c in "_./")
        ):
            out.add(lower_text(token))
    return out


# Shell commands, code and paths: embeddings of these follow their shared syntax more
# than what they do ("python test_x.py" scored 0.72+ against the heredoc that wrote
# test_x.py), and a script with one line changed is another program: tool arguments
# that look like this count as the same only when equal once normalised.
_CODE = re.compile(r"[\n{}()\[\]<>=;|$\\/`]|(?:^|\s)--?\w|\w[._]\w")


def looks_like_code(text: str) -> bool:
    """Whether a text has the marks of code or a command rather than prose."""
    return _CODE.search(text) is not None


def lexical_verdict(a: str, b: str) -> bool | None:
    """True (same), False (different) or None (undecided: needs embeddings)."""
    if a == b or normalise_text(a) == normalise_text(b):
        return True
    ea, eb = entities(mask_volatile(a)), entities(mask_volatile(b))
    if ea - eb and eb - ea:
        return False  # each names something the other does not: FirstValue / LastValue
    wa, wb = word_set(a), word_set(b)
    if wa and wb:
        inter = len(wa & wb)
        if inter / (len(wa) + len(wb) - inter) >= _LEXICAL_SAME:
            return True
    return None


def args_text(args: Any) -> str:
    """The meaningful text of tool arguments: string values in key order, joined.

    Structure and key names carry little meaning for similarity ("q" vs "query");
    arguments without any string value fall back to their canonical JSON.
    """
    value = maybe_json(args)
    parts: list[str] = []

    def walk(v: Any) -> None:
        if isinstance(v, str):
            if v.strip():
                parts.append(v.strip())
        elif isinstance(v, Mapping):
            for k in sorted(v, key=str):
                walk(v[k])
        elif isinstance(v, (list, tuple)):
            for item in v:
                walk(item)

    walk(value)
    if parts:
        return " ; ".join(parts)
    if value is None:
        return ""
    return preview(value, 500)
