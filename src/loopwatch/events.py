"""The event model: :class:`Event`, one step of an agent run in the shape of FORMAT.md.

An event's fingerprints (its call, result, outcome and text keys) are computed at
most once (lazily, cached on the event) so that ten detectors looking at the same
tool call pay for one hash, not ten. What they are made of, canonical arguments,
normal forms, masked volatile values and outcome signatures, is
:mod:`loopwatch.fingerprints`.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any, Final

from .content import media_only
from .fingerprints import (
    _LONE,
    _NORM_CACHE_MAX,
    _UTF8,
    _hexdigest,
    _normalise_value,
    _sorted_json,
    canonical_args,
    fold_and_mask,
    looks_like_error,
    lower_text,
    maybe_json,
    outcome_signature,
    page_sketch,
    shell_command,
)
from .text import ECHO_PREFIX, echo_digest, fingerprint

__all__ = [
    "KINDS",
    "MODEL",
    "SPAN",
    "TOOL_CALL",
    "TOOL_RESULT",
    "USER",
    "Event",
    "echo_digest",
    "event_time",
    "fold_case_space",
]


MODEL: Final = "model"
TOOL_CALL: Final = "tool_call"
TOOL_RESULT: Final = "tool_result"
USER: Final = "user"
SPAN: Final = "span"
KINDS: Final = frozenset({MODEL, TOOL_CALL, TOOL_RESULT, USER, SPAN})


# Normalised keys by exact key: a looping agent sends the same call again and again,
# so the (costlier) normalisation runs once per distinct call. Bounded; cleared when full.
_NORM_CACHE: dict[str, str] = {}
_RESULT_CACHE: dict[str, str] = {}
_OUTCOME_CACHE: dict[str, str] = {}


_TRUE: Final = (True, 1, "true", "True", "TRUE")
_KNOWABLE: Final = frozenset({"args", "text"})
_NOTHING_UNKNOWN: Final[frozenset[str]] = frozenset()
_TEXT_UNKNOWN: Final[frozenset[str]] = frozenset({"text"})
# How the JSON of content blocks opens (as the SDKs write it, the type first): only such
# a text is read for blocks (a screenshot); any other result, JSON ones included, is
# taken as it is after one startswith.
_BLOCKS_OPEN: Final = ('[{"type"', '{"type"')


# Characters folded and masked at each end of a long text; its middle is hashed
# exactly as it is. A 10 MB output then costs one encode and hash (~5 ms here),
# not a tokenisation (~500 ms); two long texts that differ only by a volatile value
# in the middle count as different: never equal by assumption.
_TEXT_BUDGET: Final = 8_192
# How much of a message Event.payload_key reads: past this, a changed payload is not seen.
_PAYLOAD_CHARS: Final = 16_000


def fold_case_space(text: str) -> str:
    """A text with case and spacing folded: what tells two outputs the same when only
    their case or layout differs (the events' folded keys, stagnation, the metrics)."""
    return " ".join(lower_text(text).split())


def _folded_key(text: str, fold: Callable[[str], str]) -> str:
    """xxh3 of ``fold(text)``; a long text is folded only at its ends, with the exact
    hash of its middle between them."""
    budget = _TEXT_BUDGET
    if len(text) <= 2 * budget:
        return _hexdigest(fold(text).encode(_UTF8, _LONE))
    head, tail = text[:budget], text[-budget:]
    data = text.encode(_UTF8, _LONE)
    start = len(head.encode(_UTF8, _LONE))
    end = len(data) - len(tail.encode(_UTF8, _LONE))
    middle = _hexdigest(memoryview(data)[start:end])
    return _hexdigest(f"{fold(head)}\x00{middle}\x00{fold(tail)}".encode(_UTF8, _LONE))


def _with_text(value: Any) -> list[Any]:
    """A FORMAT.md ``unknown`` value with ``text`` named in it too."""
    values = [value] if isinstance(value, str) else list(value) if isinstance(value, list) else []
    return [*values, "text"]


def _unknown_fields(value: Any) -> frozenset[str]:
    """The FORMAT.md ``unknown`` list as a set of the fields it may name."""
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)):
        return frozenset()
    return _KNOWABLE.intersection(v for v in value if isinstance(v, str))


def _never_equal() -> str:
    """A key for a value the trace did not record: random, so it equals no other key
    in any process (a counter would collide between workers sharing a store)."""
    return "?" + os.urandom(8).hex()[1:]


_TS_FIELDS: Final = ("ts", "timestamp", "time")
_ECHO_WITHIN: Final = 400  # a result quotes its request at its start ("Could not find [q]")


def event_time(extra: dict[str, Any] | None) -> float | None:
    """Seconds since the epoch from an event's ``ts``/``timestamp``/``time`` field
    (a number, or an ISO-8601 string); None when absent or unreadable."""
    if not extra:
        return None
    for field in _TS_FIELDS:
        value = extra.get(field)
        if value is None:
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
            except ValueError:
                return None
    return None


def _signature(text: str, error: bool, coarse: bool) -> str:
    """:func:`outcome_signature` of a text, cached by its exact text and the flags: a
    looping agent gets the same text again and again."""
    if len(text) > 2 * _TEXT_BUDGET:  # the signature reads only the ends anyway
        text = text[:_TEXT_BUDGET] + " " + text[-_TEXT_BUDGET:]
    tag = "C" if coarse else "E" if error else "O"
    raw = tag + _hexdigest(text.encode(_UTF8, _LONE))
    key = _OUTCOME_CACHE.get(raw)
    if key is None:
        key = outcome_signature(text, error, coarse)
        if len(_OUTCOME_CACHE) >= _NORM_CACHE_MAX:
            _OUTCOME_CACHE.clear()
        _OUTCOME_CACHE[raw] = key
    return key


def _forget(
    text: str, prefix: str, length: int, value: str | None, digest: str | None
) -> tuple[str, bool]:
    """``text`` with each quote of one argument value among its first 400 characters
    replaced by an ellipsis: where ``prefix`` starts, the next ``length`` characters
    equal to ``value`` (or, read from a store, hashing to ``digest``)."""
    found = False
    at = text.find(prefix, 0, _ECHO_WITHIN)
    while at >= 0:
        end = at + length
        quoted = text[at:end]
        if value is not None:
            same = quoted == value
        else:
            same = _hexdigest(quoted.encode(_UTF8, _LONE)) == digest
        if same:
            text = text[:at] + "\u2026" + text[end:]
            found = True
            end = at + 1
        at = text.find(prefix, end, _ECHO_WITHIN)
    return text, found


def _float(value: Any) -> float:
    """A count of tokens or a cost as given, or 0.0 (not recorded) for one that is no
    finite number: "NaN" would make every spend total NaN (no budget ever reached),
    "inf" would reach every budget at once."""
    try:
        number = float(value) if value is not None else 0.0
    except (TypeError, ValueError):
        return 0.0
    return number if math.isfinite(number) else 0.0


class Event:
    """One step of an agent run (FORMAT.md), with lazily cached fingerprints.

    Build one with :meth:`from_dict` (a FORMAT.md event object) or the
    constructor. Unknown fields are kept in ``extra`` and ignored by detectors.
    """

    __slots__ = (
        "_args_json",
        "_call_key",
        "_command",
        "_commanded",
        "_norm_key",
        "_outcome_key",
        "_payload_key",
        "_result_key",
        "_sketch",
        "_sketched",
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
        "unknown",
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
        unknown: frozenset[str] = _NOTHING_UNKNOWN,
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
        # Fields the trace did not record ("args", "text"): unknown, never equal to
        # anything, never empty (FORMAT.md, "absent is not equal").
        self.unknown = unknown
        self._args_json: bytes | None = None
        self._call_key: str | None = None
        self._norm_key: str | None = None
        self._result_key: str | None = None
        self._outcome_key: str | None = None
        self._payload_key: str | None = None
        self._sketch: list[int] | None = None
        self._sketched = False
        self._command: str | None = None
        self._commanded = False

    _FIELDS: Final = frozenset(
        {"kind", "name", "args", "text", "id", "parent", "type", "error", "tokens", "cost",
         "agent", "to", "unknown"}
    )  # fmt: skip

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Event:
        """Build an event from a FORMAT.md event object; tolerant of wrong types.

        A missing or non-string ``kind`` becomes ``""`` (ignored by detectors but
        keeps its index); ``text`` that is not a string is JSON-encoded.
        """
        # a dict read with native lookups in the compiled build (a bound ``get`` per
        # event, called 13 times, cost 0.2 us); another mapping is read as a dict of it
        fields_of: dict[str, Any] = data if type(data) is dict else dict(data)
        return cls._of_dict(fields_of)

    @classmethod
    def _of_dict(cls, data: dict[str, Any]) -> Event:
        kind = data.get("kind")
        raw_text = data.get("text")
        recorded_unknown = data.get("unknown")
        unknown_fields: Any = recorded_unknown
        if raw_text is None:
            text = ""
            if kind in (TOOL_RESULT, MODEL, USER):
                # a result, an output or a user message without its text: the trace did
                # not carry it (a screenshot agent's screen; a model turn recorded by its
                # tokens alone; a message whose content was not captured): unknown, not
                # empty (an empty output is "text": "")
                unknown_fields = ["text"] if unknown_fields is None else _with_text(unknown_fields)
        elif (
            kind == TOOL_RESULT
            and (raw_text.startswith(_BLOCKS_OPEN) if isinstance(raw_text, str) else True)
            and media_only(raw_text)
        ):
            # a screenshot (content blocks none of which is text, or their JSON): the
            # screen is the result, and the trace does not hold it as text
            text = ""
            unknown_fields = ["text"] if unknown_fields is None else _with_text(unknown_fields)
        elif not isinstance(raw_text, str):
            text = _sorted_json(raw_text).decode()
        else:
            text = raw_text
        name = data.get("name")
        ident = data.get("id")
        args = data.get("args")
        tokens = data.get("tokens")
        error = data.get("error")
        # The common event holds only fields read above: when they account for every
        # key, the rest are absent and nothing is left over (6 lookups and a set test
        # fewer, a fifth of building a short event).
        held = (
            (kind is not None) + (raw_text is not None) + (name is not None)
            + (ident is not None) + (args is not None) + (tokens is not None)
            + (error is not None) + (recorded_unknown is not None)
        )  # fmt: skip
        parent: Any = None
        typ: Any = None
        agent: Any = None
        to: Any = None
        cost: Any = None
        extra: dict[str, Any] | None = None
        if held != len(data):
            parent = data.get("parent")
            fields = cls._FIELDS
            # no field beyond FORMAT.md's (no set built)
            if not fields.issuperset(data):
                extra = {k: data[k] for k in data.keys() - fields}
            typ = data.get("type")
            agent = data.get("agent")
            to = data.get("to")
            cost = data.get("cost")
        # no flag recorded: a result whose text says it failed did fail
        failed = (
            error in _TRUE if error is not None else kind == TOOL_RESULT and looks_like_error(text)
        )
        # positional: the hot path of every observed event (keywords cost more to
        # pass, most of all to the compiled constructor)
        return Event(
            kind if isinstance(kind, str) else "",
            None if name is None else str(name),
            args,
            text,
            None if ident is None else str(ident),
            None if parent is None else str(parent),
            None if typ is None else str(typ),
            failed,
            0.0 if tokens is None else _float(tokens),
            0.0 if cost is None else _float(cost),
            None if agent is None else str(agent),
            None if to is None else str(to),
            extra,
            _NOTHING_UNKNOWN if unknown_fields is None else _unknown_fields(unknown_fields),
        )

    def to_dict(self) -> dict[str, Any]:
        """The FORMAT.md object for this event (only the fields that are set)."""
        out: dict[str, Any] = {"kind": self.kind}
        for field in ("name", "args", "id", "parent", "type", "agent", "to"):
            value = getattr(self, field)
            if value is not None:
                out[field] = value
        if self.text or (self.kind in (MODEL, TOOL_RESULT, USER) and self.text_known):
            out["text"] = self.text
        if self.error:
            out["error"] = True
        if self.tokens:
            out["tokens"] = self.tokens
        if self.cost:
            out["cost"] = self.cost
        if self.unknown:
            out["unknown"] = sorted(self.unknown)
        if self.extra:
            out.update(self.extra)
        return out

    @property
    def time(self) -> float | None:
        """When the event happened, if the trace says (its ``ts``, ``timestamp`` or
        ``time`` field: seconds since the epoch or ISO-8601); None when it does not."""
        return event_time(self.extra)

    @property
    def args_known(self) -> bool:
        """Whether the trace recorded this call's arguments."""
        return "args" not in self.unknown

    @property
    def text_known(self) -> bool:
        """Whether the trace recorded this event's text (output, result, input)."""
        return "text" not in self.unknown

    # -- fingerprints -------------------------------------------------------------
    @property
    def call_key(self) -> str:
        """Exact call key: tool name + canonical arguments."""
        key = self._call_key
        if key is None:
            if not self.args_known:
                key = self._call_key = self._norm_key = _never_equal()
                return key
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
            if not self.args_known:
                return self.call_key  # sets both keys, to one that equals nothing
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
    def command(self) -> str | None:
        """:func:`~loopwatch.fingerprints.shell_command` of the arguments (None for a
        call that is not a shell command), read once per event: several detectors ask."""
        if not self._commanded:
            self._command = shell_command(self.args) if self.kind == TOOL_CALL else None
            self._commanded = True
        return self._command

    @property
    def sketch(self) -> list[int] | None:
        """:func:`~loopwatch.fingerprints.page_sketch` of the text, made once per event:
        the detectors that compare pages (repeated calls, re-sent instructions,
        revisits) share it."""
        if not self._sketched:
            self._sketch = page_sketch(self.text)
            self._sketched = True
        return self._sketch

    @property
    def payload_key(self) -> str:
        """Fingerprint of the whole text (its first 16,000 characters), made once per
        event: the detectors that read only a message's opening (ping-pong, stagnation,
        spend velocity) compare a long message's payload with it.

        A request, a plan or a restatement shows in a message's opening; a long message
        carries a payload after it (code, a document, a report) that changes from one
        round to the next while the opening stays the same (a role-play's fixed
        preamble, a framework's template around each version of the code). Exact, not
        folded: folding case and spacing cost 40 us on 5 kB against 0.6 for the hash."""
        key = self._payload_key
        if key is None:
            key = self._payload_key = fingerprint(self.text[:_PAYLOAD_CHARS])
        return key

    @property
    def name_key(self) -> str:
        """Name-only key (the tool name itself; short and already stable)."""
        return self.name or ""

    @property
    def result_key(self) -> str:
        """Result key: the text with volatile values masked, whitespace folded. Two
        results with the same key carry the same information. For an error it is the
        error's signature (:func:`outcome_signature`), so the same failure in new
        words (another pid, duration or line number) is the same error to every
        detector; it starts with "E"."""
        key = self._result_key
        if key is None:
            if not self.text_known:
                key = self._result_key = ("E" if self.error else "?") + _never_equal()[1:]
                return key
            if self.error:
                key = self._result_key = self.outcome_key
                return key
            text = self.text
            if len(text) > 2 * _TEXT_BUDGET:
                key = self._result_key = _folded_key(text, fold_and_mask)
                return key
            raw = _hexdigest(text.encode(_UTF8, _LONE))
            key = _RESULT_CACHE.get(raw)
            if key is None:
                folded = fold_and_mask(text)
                # most results are folded and hold nothing to mask: their key is ``raw``
                key = raw if folded is text else _hexdigest(folded.encode(_UTF8, _LONE))
                if len(_RESULT_CACHE) >= _NORM_CACHE_MAX:
                    _RESULT_CACHE.clear()
                _RESULT_CACHE[raw] = key
            self._result_key = key
        return key

    def forget_text(self) -> None:
        """Read this result as unknown from here on: it holds nothing of what its call
        did (a scroll answered "Scrolled down the page": the screen is the result, and
        the trace does not hold it). The text is kept for messages; every key made of
        it is never equal to another."""
        self.unknown = self.unknown | _TEXT_UNKNOWN
        self._result_key = self._outcome_key = self._payload_key = None
        self._sketch = None
        self._sketched = True

    def forget_echoes(
        self, echoes: list[list[Any]], ident: str | None = None, values: list[str] | None = None
    ) -> None:
        """Key this result as if it did not quote its request: a result that echoes its
        call's arguments or id ("Could not find [famous bhavageete by Arun Date]",
        "call_8f2a: done") would otherwise differ from the same answer to a reworded
        call only by the echo. ``values`` are the call's argument values as given
        (:func:`~loopwatch.text.echo_values`, held in memory only), ``echoes`` what finds
        them when the call's record was read from a store (:func:`echo_digest`: a value
        is never kept whole at rest, it may hold a secret); ``ident`` is the call's id.
        All are looked for in the result's first 400 characters, each found the same way
        (a value's first 4 characters, then the whole of it). The text itself is kept
        (messages quote it as it was); only the result and outcome keys are made
        without the echoed values."""
        if not self.text_known:
            return
        text = self.text
        found = False
        if values:
            for value in values:
                text, hit = _forget(text, value[:ECHO_PREFIX], len(value), value, None)
                found = found or hit
        if ident is not None and text.find(ident, 0, _ECHO_WITHIN) >= 0:
            of_id = echo_digest(ident)  # None for a short id: a counter, not an id
            if of_id is not None:
                echoes = [*echoes, of_id]
        for prefix, length, digest in echoes:
            text, hit = _forget(text, prefix, length, None, digest)
            found = found or hit
        if found:
            bare = Event(self.kind, self.name, None, text, error=self.error)
            key = self._result_key = bare.result_key
            if self.error:
                self._outcome_key = key  # an error's result key is its outcome
            else:
                self._outcome_key = None  # made from the text as it is, if ever asked

    @property
    def outcome_key(self) -> str:
        """What this result or message amounts to (:func:`outcome_signature`); cached
        by exact text and error flag, because a looping agent gets the same text
        again and again."""
        key = self._outcome_key
        if key is None:
            if not self.text_known:
                key = self._outcome_key = ("E" if self.error else "?") + _never_equal()[1:]
                return key
            key = self._outcome_key = _signature(self.text, self.error, False)
        return key

    @property
    def error_key(self) -> str:
        """An error's signature with every number masked (:func:`outcome_signature`,
        ``coarse``): "found 2 actions" and "found 3 actions" are one rejection. What the
        error loop compares; cached by exact text, as a looping agent gets the same
        rejection again and again."""
        if not self.text_known:
            return self.result_key
        return _signature(self.text, True, True)

    @property
    def text_key(self) -> str:
        """Fingerprint of model output: case and whitespace folded."""
        if not self.text_known:
            return _never_equal()
        return _folded_key(self.text, fold_case_space)

    def __repr__(self) -> str:
        bits = [self.kind]
        if self.name:
            bits.append(self.name)
        if self.args is not None:
            bits.append(repr(self.args)[:60])
        if self.text:
            bits.append(repr(self.text[:40]))
        return f"Event({', '.join(bits)})"
