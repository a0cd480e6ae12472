"""Run state: what the engine and each detector remember about one run, typed.

One :class:`RunState` per run, owned by the engine: the shared window of
:class:`CallRecord` objects, a few counters, and one typed slot per detector
(a :class:`DetectorState` subclass that the detector declares). Every class is
slotted with documented fields, which is both what a reader needs and what a
compiler (mypyc) speeds up.

State crosses a process boundary only in a store (Redis, SQLite). There it is
serialised with :meth:`RunState.to_bytes` and read back with
:meth:`RunState.from_bytes`: a magic and the format version, then the fields as
compact JSON arrays (orjson) in one zstd frame (level 1, with a checksum). A state
written by another version (format 2 and older were bare JSON) or damaged is refused
cleanly (:class:`StateError`) and the store starts the run afresh instead of
misreading it.

Why zstd: a live run's state is mostly fingerprints, 16 hex characters each, and
the same fingerprint sits in several places (the call window, the repeat tallies,
the recent results), which compresses well. Measured on ``bench_guard``'s 1,000 live
runs, per state, in cache: bare JSON is 9.9 kB (12.6 kB at most), 18 us to write and
67 us to read; in a zstd level-1 frame it is 3.3 kB (4.1 kB at most, under the 4 KiB
target), 30 us and 48 us. zlib level 1 compressed the JSON to 3.6 kB (4.3 kB at most)
for 30 us more per write and 20 us more per read; a hand-written binary encoding
(8-byte fingerprints, each string once) gave 4.0 kB (5.9 kB at most) for 67 us per
write.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from operator import attrgetter
from re import Pattern
from typing import Any, ClassVar, Final, Generic, TypeVar, final

import orjson
import zstandard
from mypy_extensions import mypyc_attr

from .text import args_preview, asks_of, echo_digest, echo_values, word_marks

__all__ = [
    "STATE_VERSION",
    "WARNED_MAX",
    "CallRecord",
    "DetectorState",
    "KeyedState",
    "Record",
    "RunState",
    "StateError",
    "Tally",
    "Written",
    "dump_map",
    "load_map",
]

# Bumped whenever the serialised shape changes; a state of another version is refused.
# 3: JSON arrays in a zstd frame, without ``seen`` (2 and older: bare JSON arrays).
# 4: the user's news (``news_step``, ``uspec``) and the pending reflection (``quiet``).
# 5: shell calls marked on CallRecord. 6: polls marked on CallRecord, ``wait_step``.
# 7: ping_pong keeps how each agent's last message opened (``heads``).
# 8: the marks of a call's words on CallRecord (``marks``).
# 9: stagnation keeps the marks of the user's last message's words (``heard``).
# 10: restated_reply keeps whether the user deferred; long messages' payload keys.
# 11: stagnation keeps the user's last message's key and whether it was said again,
# instead of the marks of its words; CallRecord says whether the call moves the view.
# 12: no_effect's attempts say whether they move the view (scrolls are attempts);
# revisited_page keeps its last results; stagnation counts restatements no user asked.
# 13: ping_pong keeps the marks of the numbers each message names (``specs``) and
# whether it restated one before it (``again``).
STATE_VERSION: Final = 13
# What a serialised state starts with, before its version byte. JSON never starts
# with it, so a state of format 2 or older is told apart and refused by its version.
_MAGIC: Final = b"LWS"
# Loops the run was warned about (RunState.warned), most recent last: old ones fall out.
WARNED_MAX: Final = 256
_ZSTD_LEVEL: Final = 1
# A zstd (de)compressor is not safe to share between threads, and building one costs
# 16 us: one per thread, made on first use.
_ZSTD = threading.local()


def _compress(data: bytes) -> bytes:
    compressor: zstandard.ZstdCompressor | None = getattr(_ZSTD, "compressor", None)
    if compressor is None:
        compressor = _ZSTD.compressor = zstandard.ZstdCompressor(
            level=_ZSTD_LEVEL, write_checksum=True
        )
    return compressor.compress(data)


def _decompress(data: bytes) -> bytes:
    decompressor: zstandard.ZstdDecompressor | None = getattr(_ZSTD, "decompressor", None)
    if decompressor is None:
        decompressor = _ZSTD.decompressor = zstandard.ZstdDecompressor()
    return decompressor.decompress(data)


R = TypeVar("R", bound="Record")
W = TypeVar("W", bound="Written")
S = TypeVar("S", bound="DetectorState")
K = TypeVar("K", bound="KeyedState[Any]")


class StateError(ValueError):
    """A serialised state that cannot be read: another version, or damaged bytes."""


@mypyc_attr(allow_interpreted_subclasses=True)
class Written:
    """What every record of the run state is to a store: :meth:`dump` to JSON values,
    :meth:`load` back, equal when they write the same.

    :class:`Record` writes and reads any slotted record field by field. A record made
    on every event writes its own fields and derives from this class directly
    (:class:`CallRecord`, ``repeat.Streak``): Record's ``__new__``, which lets its
    ``load`` make an instance without calling ``__init__``, puts every construction
    of a compiled subclass on the slow path (its arguments packed into a tuple,
    ``__new__`` and ``__init__`` called through their Python wrappers: 0.2 us a
    record, against a native call).
    """

    __slots__ = ()

    def dump(self) -> Any:  # pragma: no cover - abstract
        """JSON-compatible form (a list of the fields)."""
        raise NotImplementedError

    @classmethod
    def load(cls: type[W], data: Any) -> W:  # pragma: no cover - abstract
        """The record back from :meth:`dump`'s output."""
        raise NotImplementedError

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Written) and type(other) is type(self) and self.dump() == other.dump()
        )

    def __hash__(self) -> int:  # records are mutable: hash by identity
        return id(self)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.dump()!r})"


@mypyc_attr(allow_interpreted_subclasses=True)
class Record(Written):
    """A small slotted record, serialised as the list of its fields in slot order.

    Fields must hold JSON values (numbers, strings, booleans, None, lists and dicts
    of those); a record holding other records overrides :meth:`dump`/:meth:`load`.
    """

    __slots__ = ()

    def __new__(cls: type[R], *args: Any, **kwargs: Any) -> R:
        # Python's semantics in both builds: a compiled class's own __new__ would
        # also run __init__, and load() needs an instance without it.
        return super().__new__(cls)

    def dump(self) -> Any:
        """JSON-compatible form (a list of the fields)."""
        getter = _GETTERS.get(type(self))
        if getter is None:
            getter = _getter(type(self))
        return list(getter(self))

    @classmethod
    def load(cls: type[R], data: Any) -> R:
        """The record back from :meth:`dump`'s output."""
        fields = _fields(cls)
        if not isinstance(data, list) or len(data) != len(fields):
            raise StateError(f"{cls.__name__}: expected {len(fields)} fields")
        obj = cls.__new__(cls)
        for name, value in zip(fields, data, strict=True):
            setattr(obj, name, value)
        return obj

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in _fields(type(self)))
        return f"{type(self).__name__}({fields})"


_FIELDS: dict[type[Written], tuple[str, ...]] = {}  # per class, computed once
# Per class: reads all the fields in one C call (a getattr per field costs 60 ns each
# through the generic attribute lookup, and the call window alone has ~300 of them).
_GETTERS: dict[type[Record], Callable[[Any], tuple[Any, ...]]] = {}


def _getter(cls: type[Record]) -> Callable[[Any], tuple[Any, ...]]:
    fields = _fields(cls)
    if len(fields) == 1:
        one = attrgetter(fields[0])
        getter: Callable[[Any], tuple[Any, ...]] = lambda obj: (one(obj),)  # noqa: E731
    else:
        getter = attrgetter(*fields)
    _GETTERS[cls] = getter
    return getter


def _fields(cls: type[Written]) -> tuple[str, ...]:
    """A record class's own fields, in slot order (sorted: ruff's RUF023 keeps every
    ``__slots__`` sorted). A class compiled by mypyc has no ``__slots__`` left, but
    lists its attributes in ``__mypyc_attrs__``; sorted, they are the same fields in
    the same order, so both builds write and read the same bytes."""
    fields = _FIELDS.get(cls)
    if fields is None:
        own = vars(cls)
        slots = own.get("__slots__")
        if slots is None:
            slots = sorted(a for a in own.get("__mypyc_attrs__", ()) if not a.startswith("__"))
        fields = _FIELDS[cls] = (slots,) if isinstance(slots, str) else tuple(slots)
    return fields


@mypyc_attr(allow_interpreted_subclasses=True)
class DetectorState(Record):
    """Base of each detector's own per-run state.

    Subclasses are registered by class name so that a stored state can be rebuilt
    without knowing which detectors wrote it; a subclass must be constructible with
    no arguments (a fresh run).
    """

    __slots__ = ()
    registry: ClassVar[dict[str, type[DetectorState]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        other = DetectorState.registry.get(cls.__name__)
        if other is not None and other is not cls:
            raise TypeError(f"two detector state classes are named {cls.__name__}")
        DetectorState.registry[cls.__name__] = cls


def _mapping(value: Any) -> dict[str, int]:
    if not isinstance(value, dict):
        raise StateError("run state is damaged: expected a mapping")
    return value


def _json(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # written with escapes for lone surrogates (to_bytes)
        return json.loads(data)


def _old_version(data: bytes) -> object:
    """The version a state of format 2 or older (a JSON array, version first) says it
    has, for the error message; None when the bytes are not such a state."""
    try:
        raw = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return raw[0] if isinstance(raw, list) and raw else None


def dump_map(records: dict[str, W]) -> dict[str, Any]:
    """A dict of records in JSON-compatible form."""
    return {k: v.dump() for k, v in records.items()}


def load_map(cls: type[W], data: Any) -> dict[str, W]:
    """A dict of records back from :func:`dump_map`."""
    if not isinstance(data, dict):
        raise StateError(f"expected a mapping of {cls.__name__}")
    return {k: cls.load(v) for k, v in data.items()}


@mypyc_attr(allow_interpreted_subclasses=True)
class KeyedState(DetectorState, Generic[W]):
    """A detector state that is one LRU dict of records (by call key, agent, span id).

    Subclasses set ``record`` to the record class; the detector bounds the dict."""

    __slots__ = ("by_key",)
    record: ClassVar[type[Written]]

    def __init__(self) -> None:
        self.by_key: dict[str, W] = {}

    def dump(self) -> Any:
        return dump_map(self.by_key)

    @classmethod
    def load(cls: type[K], data: Any) -> K:
        st = cls()
        st.by_key = load_map(cls.record, data)
        return st


@final
class Tally(Record):
    """A count and the event indices that are its evidence (the last few)."""

    __slots__ = ("count", "steps")

    def __init__(self, count: int = 0, steps: list[int] | None = None) -> None:
        self.count = count
        self.steps: list[int] = [] if steps is None else steps


# CallRecord's fields as dump() writes them (its slots also hold what is never written)
_CALL_FIELDS: Final = (
    "args", "asks", "echo", "key", "marks", "moves", "name", "norm", "novel", "poll",
    "result", "rstep", "shell", "step", "turn",
)  # fmt: skip


@final
class CallRecord(Written):
    """One tool call in the run's shared window of recent calls."""

    __slots__ = (
        "_args", "_asks", "_marks", "_raw", "_redact", "echo", "key", "moves", "name", "norm",
        "novel", "poll", "result", "rstep", "said", "shell", "step", "turn",
    )  # fmt: skip

    def __init__(
        self,
        step: int,
        key: str,
        norm: str,
        name: str,
        novel: bool,
        args: str | None,
        turn: int,
        shell: bool = False,
        raw: bytes = b"",
        redact: tuple[Pattern[str], ...] = (),
    ) -> None:
        self.step = step  # event index of the tool_call
        self.key = key  # exact call key (tool + canonical arguments)
        self.norm = norm  # normalised call key (reworded arguments fold together)
        self.name = name  # tool name
        self.result: str | None = None  # result key once the result is seen ("E..." = error)
        self.rstep: int | None = None  # event index of the tool_result
        self.novel = novel  # the normalised key was not in the window when called
        # The preview of the arguments (``args``), or None until it is first read: made
        # then from ``_raw`` (the first 200 bytes of the canonical arguments, in memory
        # only) and redacted, with the user's patterns (``_redact``). Most calls are
        # never quoted: the preview is made when a message or a store reads it.
        self._args = args
        self._raw = raw
        self._redact = redact
        self.turn = turn  # the model turn it was issued in (calls of one turn = a batch)
        self.shell = shell  # a shell command line: its output is no page (events.Event.command)
        # The string and number values of the call's short arguments, as given
        # (text.said_of), in memory only: what its result may quote back
        # (text.echo_values, until the result arrives) and what it asks about
        # (``asks``) are read from them when needed. Never written to a store: dump()
        # writes what they give, fingerprints (the run state keeps no secret at rest).
        # None for a record read from a store, and for calls whose arguments are not
        # read (a shell command's output does not quote the command; long arguments).
        self.said: list[Any] | None = None
        # what finds the call's short string arguments in its result, for a record read
        # from a store before its result arrived (text.echo_digest: never the values);
        # a result that quotes them is keyed without them (events.Event.forget_echoes)
        self.echo: list[list[Any]] = []
        # fingerprints of the specific things the call asks about (``asks``), once read
        self._asks: list[int] | None = None
        self._marks: list[int] | None = None  # read on first use: see ``marks``
        # a call that waits for something (it sleeps or watches, it repeats a call made
        # before a wait, or its result says the status is pending): polling, which
        # only detectors.wait.WaitBudget judges
        self.poll = False
        # the call moves the view over content (fingerprints.moves_view: a scroll, a
        # page down): a short answer that only acknowledges the move holds nothing of
        # the screen (fingerprints.acknowledges_move)
        self.moves = False

    @property
    def args(self) -> str:
        """A short preview of the arguments, secrets redacted: what messages quote and a
        store keeps (text.args_preview)."""
        args = self._args
        if args is None:
            args = self._args = args_preview(self._raw, self._redact)
            self._raw = b""
        return args

    @property
    def asks(self) -> list[int]:
        """Fingerprints of the specific things the call asks about (ids, dates, codes,
        numbers in its arguments: text.asks_of): another date or id is another
        question. Read on first use: most calls are never asked."""
        asks = self._asks
        if asks is None:
            said = self.said
            asks = self._asks = [] if said is None else asks_of(said)
        return asks

    @property
    def marks(self) -> list[int]:
        """Marks of the content words of the call's short arguments (text.word_marks):
        what tells a question reworded from another question. Empty for a shell command
        and for long arguments (their values are not read: CallRecord.said). Read on
        first use: most calls are never compared."""
        marks = self._marks
        if marks is None:
            said = self.said
            marks = self._marks = [] if said is None else word_marks(said)
        return marks

    def echo_at_rest(self) -> list[list[Any]]:
        """What finds the call's argument values in its result, as a store keeps it:
        digests (text.echo_digest), until the result has arrived."""
        said = self.said
        if said is None or self.rstep is not None:
            return self.echo
        out: list[list[Any]] = []
        for value in echo_values(said):
            digest = echo_digest(value)
            if digest is not None:
                out.append(digest)
        return out

    # Written out field by field (in slot order, as Record.dump): the window holds 32
    # of these, and native attribute reads cost a fraction of the generic lookup.
    def dump(self) -> Any:
        return [
            self.args,
            self.asks,
            self.echo_at_rest(),
            self.key,
            self.marks,
            self.moves,
            self.name,
            self.norm,
            self.novel,
            self.poll,
            self.result,
            self.rstep,
            self.shell,
            self.step,
            self.turn,
        ]

    @classmethod
    def load(cls, data: Any) -> CallRecord:
        if not isinstance(data, list) or len(data) != 15:
            raise StateError("CallRecord: expected 15 fields")
        args, asks, echo, key, marks, moves, name, norm, novel, poll, result, rstep = data[:12]
        shell, step, turn = data[12:]
        rec = CallRecord(step, key, norm, name, novel, args, turn, shell)
        rec._asks = asks
        rec._marks = marks
        rec.moves = moves
        rec.echo = echo
        rec.poll = poll
        rec.result = result
        rec.rstep = rstep
        return rec

    def __repr__(self) -> str:
        # the fields as a store keeps them (never the arguments held in memory)
        fields = ", ".join(f"{n}={v!r}" for n, v in zip(_CALL_FIELDS, self.dump(), strict=True))
        return f"CallRecord({fields})"


@final
class RunState:
    """Everything remembered about one run: shared engine state plus detector slots.

    Bounded by construction: the call window, the seen-sets and every detector slot
    have fixed maximum sizes, whatever the run's length.
    """

    __slots__ = (
        "calls",
        "epoch",
        "n",
        "ncalls",
        "news",
        "news_step",
        "pending",
        "quiet",
        "reset_reason",
        "rseen",
        "seen",
        "skips",
        "slots",
        "talks",
        "turn",
        "user_step",
        "uspec",
        "wait_step",
        "warned",
    )

    def __init__(self) -> None:
        self.n = 0  # events observed so far (the next event's index)
        self.calls: list[CallRecord] = []  # the window of recent calls, oldest first
        self.seen: dict[str, int] = {}  # normalised call key -> count in the window
        self.rseen: dict[str, int] = {}  # recent result / user-input keys -> last step
        self.pending: dict[str, int] = {}  # call id -> call step, awaiting its result
        self.epoch = 0  # progress marker: novel calls made, minus those that failed
        self.ncalls = 0  # tool calls observed in the whole run
        self.news = 0  # events that brought something new: a call not in the window,
        # a result or user input not among the recent ones (Context.novel)
        self.warned: dict[str, int] = {}  # "detector:pattern" already warned -> step
        self.turn = 0  # model turns so far (calls of one turn are a batch: Context.batched)
        self.talks = False  # whether the run has model events at all
        self.skips = 0  # calls skipped by the policy (for escalation to stop)
        self.user_step = -1  # event index of the last user input (-1: none yet)
        # event index of the last user input that said something specific it had not
        # said before (-1: none yet); the fingerprints of what it said (LRU, at most 64)
        self.news_step = -1
        self.uspec: dict[str, int] = {}
        # name of a reflection call awaiting its result in a trace without ids
        self.quiet: str | None = None
        # event index of the last wait: a call that waits, or a result saying a status is
        # pending (-1: none yet); a call repeated after it is checking again (a poll)
        self.wait_step = -1
        self.slots: dict[str, DetectorState] = {}  # detector name -> its state
        # Set (never stored) by a store that found this run's stored state unreadable
        # and started it afresh; the guard reports it in the verdict once.
        self.reset_reason: str | None = None

    def slot(self, name: str, cls: type[S]) -> S:
        """The named detector's state, created on first use."""
        st = self.slots.get(name)
        if st is None:
            st = self.slots[name] = cls()
            return st
        if st.__class__ is cls:  # the hot path: one dict lookup, one identity test
            return st
        raise StateError(f"slot {name!r} holds a {type(st).__name__}, not {cls.__name__}")

    def dump(self) -> list[Any]:
        """The fields as plain values, what :meth:`to_bytes` packs. ``seen`` is left
        out: it is the count of each normalised key in the call window, rebuilt from
        the window on reading."""
        return [
            self.n,
            [c.dump() for c in self.calls],
            self.rseen,
            self.pending,
            self.epoch,
            self.ncalls,
            self.news,
            self.warned,
            self.turn,
            self.talks,
            self.skips,
            self.user_step,
            self.news_step,
            self.uspec,
            self.quiet,
            self.wait_step,
            [[name, type(st).__name__, st.dump()] for name, st in self.slots.items()],
        ]

    def to_bytes(self) -> bytes:
        """Compact serialised form, for stores that keep state outside the process.

        Text from Python callers may hold lone surrogates, which UTF-8 cannot carry:
        such a state is written with JSON escapes instead (``\\ud800``), which
        :meth:`from_bytes` reads back to the same string, so every store keeps the
        same text and gives the same verdicts."""
        dump = self.dump()
        try:
            raw = orjson.dumps(dump)
        except TypeError:
            raw = json.dumps(dump, ensure_ascii=True, separators=(",", ":")).encode("ascii")
        return _MAGIC + bytes((STATE_VERSION,)) + _compress(raw)

    @classmethod
    def from_bytes(cls, data: bytes | str) -> RunState:
        """Read a state written by :meth:`to_bytes`; :class:`StateError` if it was
        written by another version or is damaged."""
        if isinstance(data, str):
            data = data.encode("utf-8", "surrogatepass")
        if not data.startswith(_MAGIC) or len(data) == len(_MAGIC):
            raise StateError(
                f"run state of format {_old_version(data)!r}, this loopwatch reads {STATE_VERSION}"
            )
        version = data[len(_MAGIC)]
        if version != STATE_VERSION:
            raise StateError(
                f"run state of format {version!r}, this loopwatch reads {STATE_VERSION}"
            )
        try:
            raw = _json(_decompress(data[len(_MAGIC) + 1 :]))
            n, calls, rseen, pending, epoch, ncalls, news, warned, *rest = raw
            turn, talks, skips, user_step, news_step, uspec, pending_quiet, wait_step, slots = rest
            st = cls()
            st.n = int(n)
            st.calls = [CallRecord.load(c) for c in calls]
            seen = st.seen
            for call in st.calls:
                seen[call.norm] = seen.get(call.norm, 0) + 1
            st.rseen, st.pending, st.warned = _mapping(rseen), _mapping(pending), _mapping(warned)
            st.epoch, st.ncalls, st.turn, st.talks, st.skips = epoch, ncalls, turn, talks, skips
            st.user_step, st.news_step, st.uspec = user_step, news_step, _mapping(uspec)
            st.quiet = None if pending_quiet is None else str(pending_quiet)
            st.wait_step = int(wait_step)
            st.news = news
            for name, kind, value in slots:
                slot_cls = DetectorState.registry.get(kind)
                if slot_cls is None:
                    raise StateError(f"unknown detector state {kind!r}")
                st.slots[name] = slot_cls.load(value)
        except StateError:
            raise
        except (
            TypeError,
            ValueError,
            KeyError,
            IndexError,
            RecursionError,
            zstandard.ZstdError,
        ) as exc:
            raise StateError(f"run state is damaged: {type(exc).__name__}: {exc}") from exc
        return st

    def __eq__(self, other: object) -> bool:
        return isinstance(other, RunState) and self.dump() == other.dump()

    def __hash__(self) -> int:  # mutable: hash by identity
        return id(self)

    def __repr__(self) -> str:
        return f"RunState(n={self.n}, calls={len(self.calls)}, slots={sorted(self.slots)})"
