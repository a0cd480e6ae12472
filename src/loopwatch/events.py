"""The event model and the fingerprints every detector shares.

An :class:`Event` is one step of an agent run in the shape of FORMAT.md. Its
fingerprints are computed at most once (lazily, cached on the event) so that
ten detectors looking at the same tool call pay for one hash, not ten.

Fingerprints are 64-bit xxh3 hashes rendered as 16 hex characters. They are
stable across processes and Python versions (no built-in ``hash()`` of str,
which is salted per process), so run state that holds them can live in Redis
and be shared by many workers.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson
import xxhash

__all__ = [
    "KINDS",
    "MODEL",
    "SPAN",
    "TOOL_CALL",
    "TOOL_RESULT",
    "USER",
    "Event",
    "canonical_args",
    "fold_and_mask",
    "mask_volatile",
    "maybe_json",
    "normalise_text",
    "sketch_similarity",
    "text_sketch",
]

MODEL: Final = "model"
TOOL_CALL: Final = "tool_call"
TOOL_RESULT: Final = "tool_result"
USER: Final = "user"
SPAN: Final = "span"
KINDS: Final = frozenset({MODEL, TOOL_CALL, TOOL_RESULT, USER, SPAN})

_hexdigest = xxhash.xxh3_64_hexdigest
# Text from Python callers may hold lone surrogates; hashing must not crash on them.
_UTF8: Final = "utf-8"
_LONE: Final = "surrogatepass"

# Values that change on every call without changing what the call means or what it
# returned: UUIDs, ISO-8601 timestamps, long hex ids (request ids, trace ids, hashes),
# and dates. Masked in results everywhere and in arguments only in string values
# (never numbers: page=1 and page=2 are different calls).
_VOLATILE = re.compile(
    r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"
    r"|\b\d{4}-\d{2}-\d{2}(?:[T ]\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?\b"
    r"|\b\d{2}:\d{2}:\d{2}(?:\.\d+)?\b"
    r"|\b(?=[0-9a-f]*\d)(?=[0-9a-f]*[a-f])[0-9a-f]{16,}\b"
    r"|\b(?:req|request|trace|span|msg|call|run)[_-][A-Za-z0-9]{6,}\b",
    re.IGNORECASE,
)
# Argument keys whose values are volatile by name (a fresh request id per retry
# must not make two identical calls look different).
_VOLATILE_KEYS: Final = frozenset(
    {
        "request_id", "requestid", "trace_id", "traceid", "span_id", "spanid",
        "idempotency_key", "idempotencykey", "nonce", "timestamp", "ts",
        "correlation_id", "correlationid", "call_id", "tool_call_id",
    }
)  # fmt: skip
# Words that rewording adds or drops without changing a query ("weather in paris").
_STOPWORDS: Final = frozenset(
    {"a", "an", "the", "in", "of", "for", "on", "to", "at", "by", "with", "and", "or", "is"}
)
_WORD = re.compile(r"[^\W_]+")


_SKETCH_SIZE: Final = 64
_SKETCH_MIN_WORDS: Final = 20
_xxh32 = xxhash.xxh32_intdigest


def text_sketch(text: str) -> list[int] | None:
    """A bottom-64 MinHash sketch of a text's distinct words (stable across processes),
    or None when the text has too few words for a fuzzy comparison to mean anything."""
    words = set(_WORD.findall(mask_volatile(text[:4000]).lower()))
    if len(words) < _SKETCH_MIN_WORDS:
        return None
    return sorted(_xxh32(w.encode(_UTF8, _LONE)) for w in words)[:_SKETCH_SIZE]


def sketch_similarity(a: list[int], b: list[int]) -> float:
    """Estimated Jaccard similarity of the word sets behind two sketches."""
    sa, sb = set(a), set(b)
    merged = sorted(sa | sb)[:_SKETCH_SIZE]
    if not merged:
        return 0.0
    return sum(1 for h in merged if h in sa and h in sb) / len(merged)


def mask_volatile(text: str) -> str:
    """Replace volatile values (UUIDs, timestamps, long hex ids) with a placeholder."""
    return _VOLATILE.sub("#", text)


def fold_and_mask(text: str) -> str:
    """Whitespace folded and volatile values masked, token by token.

    Equivalent to masking then folding for the values we mask (none contains
    spaces), but several times faster on long results: the regex runs only on the
    few tokens that could hold a volatile value (8+ characters, not purely letters)
    instead of at every position of the text.
    """
    tokens = text.split()
    sub = _VOLATILE.sub
    for i, tok in enumerate(tokens):
        if len(tok) >= 8 and not tok.isalpha():
            tokens[i] = sub("#", tok)
    return " ".join(tokens)


def normalise_text(text: str) -> str:
    """Fold case, whitespace, punctuation, word order and stop words; mask volatile values.

    Two strings with the same normal form say the same thing for our purposes:
    "Paris weather", "weather in paris " and "PARIS WEATHER" all become
    "paris weather".
    """
    if len(text) >= 8:  # no volatile value is shorter
        text = fold_and_mask(text)
    words = [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]
    words.sort()
    return " ".join(words)


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
        return orjson.dumps(
            value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS, default=str
        )
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


def _normalise_value(value: Any, depth: int = 0, path: set[int] | None = None) -> Any:
    """The normalised form of an argument value (strings folded, volatile keys masked).

    From :data:`_MAX_DEPTH` down a subtree is kept exact, as its fingerprint: deep
    values are compared as they are rather than walked with unbounded recursion. A
    container inside itself (built in Python) becomes ``"#cycle"``, as in
    :func:`_bounded`; ``path`` holds the ids of the enclosing containers.
    """
    if isinstance(value, str):
        return normalise_text(value)
    if not isinstance(value, (Mapping, list, tuple)):
        return value
    if path is None:
        path = set()
    elif id(value) in path:
        return "#cycle"
    if depth >= _MAX_DEPTH:
        return "#deep:" + _deep_fingerprint(value)
    path.add(id(value))
    try:
        if isinstance(value, Mapping):
            return {
                str(k).lower(): (
                    "#"
                    if str(k).lower() in _VOLATILE_KEYS
                    else _normalise_value(v, depth + 1, path)
                )
                for k, v in value.items()
            }
        return [_normalise_value(v, depth + 1, path) for v in value]
    finally:
        path.discard(id(value))


# Normalised keys by exact key: a looping agent sends the same call again and again,
# so the (costlier) normalisation runs once per distinct call. Bounded; cleared when full.
_NORM_CACHE: dict[str, str] = {}
_NORM_CACHE_MAX: Final = 16384
_RESULT_CACHE: dict[str, str] = {}


_TRUE: Final = (True, 1, "true", "True", "TRUE")


def _float(value: Any) -> float:
    try:
        return float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0


class Event:
    """One step of an agent run (FORMAT.md), with lazily cached fingerprints.

    Build one with :meth:`from_dict` (a FORMAT.md event object) or the
    constructor. Unknown fields are kept in ``extra`` and ignored by detectors.
    """

    __slots__ = (
        "_args_json",
        "_call_key",
        "_norm_key",
        "_result_key",
        "agent",
        "args",
        "cost",
        "error",
        "extra",
        "id",
        "kind",
        "name",
        "parent",
        "text",
        "to",
        "tokens",
        "type",
    )

    def __init__(
        self,
        kind: str,
        name: str | None = None,
        args: Any = None,
        text: str = "",
        id: str | None = None,
        parent: str | None = None,
        type: str | None = None,
        error: bool = False,
        tokens: float = 0.0,
        cost: float = 0.0,
        agent: str | None = None,
        to: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        self.kind = kind
        self.name = name
        self.args = args
        self.text = text
        self.id = id
        self.parent = parent
        self.type = type
        self.error = error
        self.tokens = tokens
        self.cost = cost
        self.agent = agent
        self.to = to
        self.extra = extra
        self._args_json: bytes | None = None
        self._call_key: str | None = None
        self._norm_key: str | None = None
        self._result_key: str | None = None

    _FIELDS: Final = frozenset(
        {"kind", "name", "args", "text", "id", "parent", "type", "error", "tokens", "cost",
         "agent", "to"}
    )  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """Build an event from a FORMAT.md event object; tolerant of wrong types.

        A missing or non-string ``kind`` becomes ``""`` (ignored by detectors but
        keeps its index); ``text`` that is not a string is JSON-encoded.
        """
        get = data.get
        kind = get("kind")
        text = get("text")
        if text is None:
            text = ""
        elif not isinstance(text, str):
            text = _sorted_json(text).decode()
        name = get("name")
        ident = get("id")
        parent = get("parent")
        unknown = data.keys() - cls._FIELDS
        extra = {k: data[k] for k in unknown} if unknown else None
        return cls(
            kind=kind if isinstance(kind, str) else "",
            name=None if name is None else str(name),
            args=get("args"),
            text=text,
            id=None if ident is None else str(ident),
            parent=None if parent is None else str(parent),
            type=None if get("type") is None else str(get("type")),
            error=get("error") in _TRUE,
            tokens=_float(get("tokens")),
            cost=_float(get("cost")),
            agent=None if get("agent") is None else str(get("agent")),
            to=None if get("to") is None else str(get("to")),
            extra=extra,
        )

    def to_dict(self) -> dict[str, Any]:
        """The FORMAT.md object for this event (only the fields that are set)."""
        out: dict[str, Any] = {"kind": self.kind}
        for field in ("name", "args", "id", "parent", "type", "agent", "to"):
            value = getattr(self, field)
            if value is not None:
                out[field] = value
        if self.text or self.kind == MODEL:
            out["text"] = self.text
        if self.error:
            out["error"] = True
        if self.tokens:
            out["tokens"] = self.tokens
        if self.cost:
            out["cost"] = self.cost
        if self.extra:
            out.update(self.extra)
        return out

    # -- fingerprints -------------------------------------------------------------
    @property
    def call_key(self) -> str:
        """Exact call key: tool name + canonical arguments."""
        key = self._call_key
        if key is None:
            key = self._call_key = _hexdigest(
                (self.name or "").encode(_UTF8, _LONE) + b"\x00" + self.args_json
            )
        return key

    @property
    def args_json(self) -> bytes:
        """Canonical JSON of the arguments (computed once)."""
        raw = self._args_json
        if raw is None:
            raw = self._args_json = canonical_args(self.args)
        return raw

    @property
    def norm_key(self) -> str:
        """Normalised call key: string values folded (case, spacing, word order,
        punctuation, stop words), volatile values and volatile-named keys masked."""
        key = self._norm_key
        if key is None:
            exact = self.call_key
            key = _NORM_CACHE.get(exact)
            if key is None:
                normalised = _normalise_value(maybe_json(self.args))
                key = _hexdigest(
                    (self.name or "").encode(_UTF8, _LONE) + b"\x00" + _sorted_json(normalised)
                )
                if len(_NORM_CACHE) >= _NORM_CACHE_MAX:
                    _NORM_CACHE.clear()
                _NORM_CACHE[exact] = key
            self._norm_key = key
        return key

    @property
    def name_key(self) -> str:
        """Name-only key (the tool name itself; short and already stable)."""
        return self.name or ""

    @property
    def result_key(self) -> str:
        """Result key: the text with volatile values masked, whitespace folded, plus the
        error flag. Two results with the same key carry the same information."""
        key = self._result_key
        if key is None:
            raw = _hexdigest(self.text.encode(_UTF8, _LONE))
            key = _RESULT_CACHE.get(raw)
            if key is None:
                folded = fold_and_mask(self.text)
                key = _hexdigest(folded.encode(_UTF8, _LONE))
                if len(_RESULT_CACHE) >= _NORM_CACHE_MAX:
                    _RESULT_CACHE.clear()
                _RESULT_CACHE[raw] = key
            if self.error:
                key = "E" + key[1:]
            self._result_key = key
        return key

    @property
    def text_key(self) -> str:
        """Fingerprint of model output: case and whitespace folded."""
        return _hexdigest(" ".join(self.text.lower().split()).encode(_UTF8, _LONE))

    def __repr__(self) -> str:
        bits = [self.kind]
        if self.name:
            bits.append(self.name)
        if self.args is not None:
            bits.append(repr(self.args)[:60])
        if self.text:
            bits.append(repr(self.text[:40]))
        return f"Event({', '.join(bits)})"
