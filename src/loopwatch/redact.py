"""Secrets out of every text loopwatch quotes: previews, messages, timelines, logs.

Agents put credentials in tool calls (``curl -H "Authorization: Bearer ..."``,
``OPENAI_API_KEY=sk-... python run.py``, ``psql postgresql://admin:pw@db``), and
loopwatch quotes calls in its messages, keeps a short preview of each call's
arguments in the run state (SQLite, Redis) and prints both in scans, reports and
logs. :func:`redact` replaces the secret values with ``[redacted]`` and keeps the
rest readable, so a message still names the command
(``curl -H "Authorization: Bearer [redacted]" https://api...``).

Redaction is for what is shown and stored, never for what is compared: fingerprints
are computed on the original values, so redacting never changes a verdict.

Why a compact pattern set of our own and not detect-secrets' plugins: previews are
built on the hot path (every tool call), and detect-secrets scans a line with every
plugin's regexes (several microseconds per line; its keyword plugin alone runs
eight case-insensitive patterns); it also lacks formats agents send today
(``sk-proj-``/``sk-ant-`` keys, ``github_pat_``, ``hf_``, bearer headers). Its
plugins were the model for the provider prefixes and the keyword names here.

Cost: a text is first tested for the literal *triggers* every rule needs (a
keyword such as ``password`` or ``token``, a provider prefix such as ``ghp_``,
``://`` before credentials in a URL), case-insensitively for ASCII letters. In the
compiled build that is one pass of a small automaton over the characters (about
0.1 us for an 80-character preview); the pure-Python build tests each trigger in
the lower-cased text. Only a text with a trigger (about 4 in 100 recorded tool
calls) pays for the rules. Every rule's match contains one of its triggers, at or
before the secret it covers (tests/core/test_redact.py holds the rules to that).
"""

from __future__ import annotations

import re
import types
from collections.abc import Iterable
from re import Match, Pattern
from typing import Final

from mypy_extensions import i64

__all__ = [
    "MARGIN",
    "MARK",
    "TRIGGERS",
    "compile_patterns",
    "may_hold_secret",
    "redact",
    "redact_extra",
    "redact_prefix",
    "redact_shown",
]

MARK: Final = "[redacted]"
# Characters read past what a preview shows: a secret that starts in the preview is
# redacted whole even when it ends beyond it (the longest key is about 200).
MARGIN: Final = 512

# Literal triggers, lower case: each rule below needs one of them (ASCII letters in
# any case), at or before the value it redacts.
TRIGGERS: Final = (
    # names of credentials: password=, --token, "api_key":, Authorization:, Bearer
    "pass", "pwd", "secret", "token", "key", "bearer", "authoriz",
    # provider prefixes
    "sk-", "sk_", "rk_", "whsec_", "akia", "asia", "abia", "acca", "a3t", "aiza",
    "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_", "glpat-", "gldt-", "glft-",
    "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "gloas-", "glagent-",
    "xox", "xapp-", "hf_", "npm_", "pypi-", "eyj",
    # credentials in a URL (user:password@), curl's -u user:password
    "://", "-u ", "--user",
)  # fmt: skip

# -- the rules ------------------------------------------------------------------------------
# Each pattern has a group "s", the secret: it becomes MARK, the rest of the match
# stays (e.g. "Bearer " or "sk-proj-"). A rule runs only on a text that holds one of
# its triggers (lower-cased, as in TRIGGERS). re.ASCII: IGNORECASE folds only ASCII
# letters, as the triggers do.
# ASCII letters lower-cased in UTF-8 bytes: one C pass (str.translate with a mapping
# raises and clears a KeyError for every character it does not map), and one
# character for one, so that spans found in the result are spans of the text.
_ASCII_LOWER: Final = bytes.maketrans(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ", b"abcdefghijklmnopqrstuvwxyz")
_A: Final = re.ASCII
_AI: Final = re.ASCII | re.IGNORECASE
# a value's characters when unquoted: up to a space, quote, separator or bracket
_VALUE: Final = r"[^\s\"'`\\,;&|<>(){}\[\]]+"
# not a value: a variable ($X, ${X}, %X%, <X>) or one already redacted
_NOT_A_VALUE: Final = r"(?![$%<\[])"
# not a call or an index (token = get_token(), key = os.environ["KEY"]): code, not a value
_NOT_CODE: Final = r"(?![^\s\"'`\\,;&|<>(){}\[\]]*[(\[])"
# a quoted value: the opening quote (escaped in a JSON string: \"), then up to its match
_QUOTED: Final = r"(?P<q>\\?[\"'])(?P<s>(?!\$|\[redacted\])(?:(?!(?P=q))[^\n])+)"
_UNQUOTED: Final = rf"(?P<s>{_NOT_A_VALUE}{_NOT_CODE}{_VALUE})"
# an Authorization header's scheme: the value comes after it
_SCHEME: Final = r"(?:bearer|basic|token|digest|bot|apikey)\s+"
_PROVIDER_PREFIXES: Final = (
    "sk-", "sk_", "rk_", "whsec_", "ghp_", "gho_", "ghu_", "ghs_", "ghr_", "github_pat_",
    "glpat-", "gldt-", "glft-", "glsoat-", "glrt-", "glcbt-", "glimt-", "glptt-", "gloas-",
    "glagent-", "xox", "xapp-", "hf_", "npm_", "pypi-",
)  # fmt: skip
_RULES: Final[tuple[tuple[Pattern[str], tuple[str, ...]], ...]] = tuple(
    (re.compile(pattern, flags), triggers)
    for pattern, flags, triggers in (
        # a private key block's body, up to its END line or the end of the text
        (
            r"-----BEGIN[A-Z0-9 ]* PRIVATE KEY(?: BLOCK)?-----(?!\[redacted\])"
            r"(?P<s>(?:(?!-----END).)+)",
            _A | re.DOTALL,
            ("key",),
        ),
        # provider prefixes: the prefix stays, to say what kind of key it was; a key
        # cut short by the end of the text (a preview's window) counts too
        (
            r"\b(?:sk-(?:ant-(?:api|admin)\d\d-|proj-|svcacct-|admin-)?"
            r"|[sr]k_(?:live|test)_|whsec_|gh[pousr]_|github_pat_"
            r"|gl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|oas|agent)-|xox[abposre]-|xapp-"
            r"|hf_|npm_|pypi-)"
            r"(?P<s>(?=[\w-]*\d)[\w-]{16,}|[\w-]+\Z)",
            _A,
            _PROVIDER_PREFIXES,
        ),
        (
            r"\bA(?:KIA|SIA|BIA|CCA|3T[A-Z0-9])(?P<s>[A-Z0-9]{16})\b",
            _A,
            ("akia", "asia", "abia", "acca", "a3t"),
        ),
        # 35 characters or more: the rest of a longer run is redacted with it, so that
        # what follows cannot read as a new secret once "[redacted]" stands before it
        (r"\bAIza(?P<s>[\w-]{35,})", _A, ("aiza",)),
        # a JSON web token (header.payload.signature), or its start at the end of a text
        (r"\b(?P<s>eyJ[\w-]{4,}(?:\.[\w-]{4,}(?:\.[\w-]*)?|\Z))", _A, ("eyj",)),
        # user:password@ in a URL
        (r"://[^\s:/?#@\"'\\<>]*:(?P<s>[^\s/?#@\"'\\<>]+)(?=@)", _A, ("://",)),
        (r"://hooks\.slack\.com/services/(?P<s>[\w/-]+)", _A, ("://",)),
        # Authorization headers, whatever the scheme
        (
            rf"authorization\\?[\"']?\s*[:=]\s*\\?[\"']?(?:{_SCHEME})?"
            rf"(?P<s>{_NOT_A_VALUE}(?!{_SCHEME})[^\s\"'\\,;]+)",
            _AI,
            ("authoriz",),
        ),
        # Bearer <token> anywhere (a token has a digit: "bearer instruments" is prose)
        (r"\bbearer\s+(?P<s>(?=[\w.~+/=-]*\d)[\w.~+/=-]{8,})", _AI, ("bearer",)),
        # curl -u user:password, --user user:password
        (r"(?:\s-u\s+|--user[\s=]+)[^\s:\"']+:(?P<s>[^\s\"']+)", _A, ("-u ", "--user")),
    )
)

# Names of credentials (password=, "api_key": ..., --token ...) are found by where
# they end, with str.find in the lower-cased text: a regex that starts with a name
# costs 10-70 us on a 200-character text, tried at every position. A name ends with
# one of these words and is not followed by a letter or digit (max_tokens, tokenizer
# and passwords are not names of one credential).
_NAME_ENDS: Final = ("pass", "pwd", "secret", "token", "key")
# what a name ending in "pass" may go on with
_PASS_TAILS: Final = ("word", "wd", "phrase")
# "...key" names a credential after one of these (api_key, x-api-key, secretKey)
_KEY_OWNER: Final = re.compile(
    r"(?:api|access|secret|private|auth|signing|encryption|master|client|session|account"
    r"|app)[_-]?\Z",
    _A,
)
# after a name: a value assigned (=, :, JSON's ":"), quoted or not; after a flag
# (--password), a value after a space
_ASSIGNED: Final = (
    re.compile(rf"\\?[\"']?(?:\s+=\s+|=|\s*:\s*){_QUOTED}", _AI),
    re.compile(rf"\\?[\"']?(?:=|\s*:\s*){_UNQUOTED}", _AI),
)
_FLAG_VALUE: Final = (re.compile(rf"\s+{_QUOTED}", _AI), re.compile(rf"\s+(?!-){_UNQUOTED}", _AI))


def _value(forms: tuple[Pattern[str], ...], text: str, at: int) -> Match[str] | None:
    """The first of ``forms`` that matches at ``at``."""
    for form in forms:
        found = form.match(text, at)
        if found is not None:
            return found
    return None


def _alnum(low: str, i: int) -> bool:
    """Whether ``low[i]`` is an ASCII letter or digit (False out of range)."""
    if i < 0 or i >= len(low):
        return False
    c = low[i]
    return ("a" <= c <= "z") or ("0" <= c <= "9")


def _name_at(low: str, word: str, at: int) -> int:
    """The end of the credential name whose last word starts at ``at`` (``word`` was
    found there), or -1 when it is no such name."""
    end = at + len(word)
    if word == "pass":
        for tail in _PASS_TAILS:
            if low.startswith(tail, end):
                end += len(tail)
                break
        else:
            if _alnum(low, at - 1):  # bypass, compass: "pass" must start a word
                return -1
    elif word == "pwd":
        # MYSQL_PWD is a password; PWD (and OLDPWD) the working directory
        if at < 2 or low[at - 1] not in "_.-" or not _alnum(low, at - 2):
            return -1
    elif word == "key" and _KEY_OWNER.search(low, max(0, at - 12), at) is None:
        return -1
    return -1 if _alnum(low, end) else end


def _is_flag(low: str, at: int) -> bool:
    """Whether the name whose last word starts at ``at`` is a flag (--db-password)."""
    start = at
    while start > 0 and (_alnum(low, start - 1) or low[start - 1] in "_.-"):
        start -= 1
    return low.startswith("-", start)


def _names(text: str, low: str) -> list[tuple[int, int]]:
    """The (start, end) of each secret value given to a credential's name."""
    spans: list[tuple[int, int]] = []
    for word in _NAME_ENDS:
        at = low.find(word)
        while at >= 0:
            end = _name_at(low, word, at)
            if end >= 0:
                value = _value(_ASSIGNED, text, end)
                if value is None and _is_flag(low, at):
                    value = _value(_FLAG_VALUE, text, end)
                if value is not None:
                    spans.append(value.span("s"))
            at = low.find(word, at + 1)
    return spans


def _ascii_lower(text: str) -> str:
    if text.isascii():
        return text.lower()
    return (
        text.encode("utf-8", "surrogatepass")
        .translate(_ASCII_LOWER)
        .decode("utf-8", "surrogatepass")
    )


def _apply_rules(text: str) -> str:
    low = _ascii_lower(text)
    for pattern, triggers in _RULES:
        for trigger in triggers:
            if trigger in low:
                text = pattern.sub(_mark, text)
                break
    if text is not low and len(text) != len(low):
        low = _ascii_lower(text)
    spans = _names(text, low)
    if not spans:
        return text
    out: list[str] = []
    last = 0
    for start, end in sorted(spans):
        if start < last:  # inside a value already redacted
            continue
        out.append(text[last:start])
        out.append(MARK)
        last = end
    out.append(text[last:])
    return "".join(out)


def _mark(match: Match[str]) -> str:
    """The match with its group ``s`` (the secret) replaced by the mark."""
    start, end = match.span("s")
    whole = match.start()
    found = match.group()
    return found[: start - whole] + MARK + found[end - whole :]


# -- the prefilter ----------------------------------------------------------------------
_FOUND: Final = 255


def _automaton() -> tuple[bytes, bytes, int]:
    """An Aho-Corasick automaton of :data:`TRIGGERS` as a full transition table:
    ``(classes, table, width)``. ``classes`` maps each ASCII code to a small class
    (0: a character no trigger holds; a letter's two cases share one), ``table`` maps
    ``state * width + class`` to the next state, or to 255 on a trigger's last
    character. (One table indexed by the ASCII code itself, 128 wide, was slower:
    three times the memory for one lookup less.)"""
    alphabet = sorted({c for t in TRIGGERS for c in t})
    codes = [0] * 128
    for i, ch in enumerate(alphabet, 1):
        codes[ord(ch)] = i
        codes[ord(ch.upper())] = i
    width = len(alphabet) + 1
    goto: list[dict[int, int]] = [{}]
    final = [False]
    for trigger in TRIGGERS:
        state = 0
        for ch in trigger:
            c = codes[ord(ch)]
            nxt = goto[state].get(c)
            if nxt is None:
                goto.append({})
                final.append(False)
                nxt = goto[state][c] = len(goto) - 1
            state = nxt
        final[state] = True
    if len(goto) >= _FOUND:  # pragma: no cover - a guard for whoever adds triggers
        raise ValueError("too many trigger states for a byte table")
    fail = [0] * len(goto)
    table = [0] * (len(goto) * width)
    queue = [0]
    while queue:  # breadth first: a state's fallback is filled in before it is read
        state = queue.pop(0)
        for c in range(width):
            nxt = goto[state].get(c)
            if nxt is not None:
                fail[nxt] = table[fail[state] * width + c] if state else 0
                final[nxt] = final[nxt] or final[fail[nxt]]
                queue.append(nxt)
            else:
                nxt = table[fail[state] * width + c] if state else 0
            table[state * width + c] = nxt
    # a transition into a state that completes a trigger says so at once
    return bytes(codes), bytes(_FOUND if final[t] else t for t in table), width


_AUTOMATON: Final = _automaton()
_CLASSES: Final = _AUTOMATON[0]
_TABLE: Final = _AUTOMATON[1]
_WIDTH: Final = _AUTOMATON[2]


def _scan(text: str, end: i64) -> bool:
    """Whether a trigger occurs in ``text[:end]``: one pass of the automaton."""
    classes = _CLASSES
    table = _TABLE
    width: i64 = _WIDTH
    state: i64 = 0
    i: i64 = 0
    while i < end:
        c: i64 = ord(text[i])
        state = table[state * width + (classes[c] if c < 128 else 0)]
        if state == _FOUND:
            return True
        i += 1
    return False


def _search(text: str, end: i64) -> bool:
    """:func:`_scan` by string tests: faster than a character loop in pure Python."""
    low = _ascii_lower(text[:end])
    return any(t in low for t in TRIGGERS)


# Whether this module runs compiled (mypyc makes its functions built-in functions):
# the automaton's character loop pays only there.
_COMPILED: Final = not isinstance(_scan, types.FunctionType)


def may_hold_secret(text: str, end: int = -1) -> bool:
    """Whether ``text[:end]`` (the whole text when ``end`` is -1) holds a trigger, so
    that a rule may match there. False means :func:`redact` leaves it unchanged."""
    n: i64 = len(text)
    stop: i64 = n if end < 0 or end > n else end
    if _COMPILED:
        return _scan(text, stop)
    return _search(text, stop)


def redact(text: str) -> str:
    """``text`` with every secret the rules know replaced by ``[redacted]``."""
    if not may_hold_secret(text):
        return text
    return _apply_rules(text)


def redact_shown(text: str, shown: int) -> str:
    """:func:`redact` for a text of which only the first ``shown`` characters will be
    shown (a preview): the triggers are looked for there only (every rule's trigger
    comes at or before the secret it covers), the rules read the whole text."""
    if not may_hold_secret(text, shown):
        return text
    return _apply_rules(text)


def redact_prefix(text: str, shown: int, extra: tuple[Pattern[str], ...] = ()) -> str:
    """The start of ``text`` that a preview of ``shown`` characters is cut from (its
    first ``shown + MARGIN`` characters), redacted; ``extra``: the user's patterns."""
    text = redact_shown(text[: shown + MARGIN], shown)
    return redact_extra(text, extra) if extra else text


# -- the user's own patterns ([redact] patterns in loopwatch.toml) ------------------------
def compile_patterns(patterns: Iterable[str]) -> tuple[Pattern[str], ...]:
    """The user's extra patterns, compiled; ``re.error`` for a bad one (the
    configuration names the key). A pattern with a group named ``secret`` redacts that
    group only (the rest of the match stays), any other the whole match."""
    return tuple(re.compile(p) for p in patterns)


def _user_mark(match: Match[str]) -> str:
    if "secret" in match.re.groupindex:
        start, end = match.span("secret")
        if start == end:
            return match.group()
        whole = match.start()
        found = match.group()
        return found[: start - whole] + MARK + found[end - whole :]
    return MARK if match.end() > match.start() else ""


def redact_extra(text: str, patterns: tuple[Pattern[str], ...]) -> str:
    """``text`` with the matches of the user's patterns replaced by ``[redacted]``."""
    for pattern in patterns:
        text = pattern.sub(_user_mark, text)
    return text
