"""What every detector is: a small object that looks at one event in context.

A detector keeps its per-run state in a typed slot of the run's
:class:`~loopwatch.state.RunState` (a :class:`~loopwatch.state.DetectorState`
subclass it declares, fetched with ``ctx.state.slot(self.name, MyState)``), so one
run's state serialises to a shared store. Detectors must be deterministic: the same
events in the same order give the same findings, which is what makes the offline
scan and the runtime guard agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Final, Protocol, TypeVar, final

from mypy_extensions import mypyc_attr

from ..events import Event
from ..findings import Finding, Severity
from ..fingerprints import SAME_PAGE, page_address, sketch_similarity
from ..state import CallRecord, Record, RunState
from ..text import fingerprint, preview

__all__ = [
    "Context",
    "Detector",
    "DetectorSet",
    "Showing",
    "dump_pages",
    "load_pages",
    "note_novelty",
    "preview",
    "severity_for",
    "show_page",
    "trim",
]


class Context:
    """One event in its run: the event, its index, the run state, and its call record."""

    __slots__ = ("call", "event", "novel", "state", "step")

    def __init__(
        self,
        step: int,
        event: Event,
        state: RunState,
        call: CallRecord | None,
        novel: bool = False,
    ) -> None:
        self.step = step
        self.event = event
        self.state = state
        self.call = call
        # Does this event bring something new? A call not in the window, a result or
        # user input not among the run's last 64; always False for other kinds.
        self.novel = novel

    @property
    def epoch(self) -> int:
        """Progress marker: novel calls (not in the window) made so far, minus those
        that failed. Unchanged between two calls means nothing new was tried."""
        return self.state.epoch

    @property
    def batched(self) -> bool:
        """Whether this event's call was issued in the same turn as an earlier,
        different call: part of a parallel batch. A batch of different calls failing
        the same way is one failed decision, not several attempts; the same call
        issued twice in one turn is still a repeat."""
        rec = self.call
        if rec is None:
            return False
        turn, key, step = rec.turn, rec.key, rec.step
        return any(c.turn == turn and c.key != key and c.step < step for c in self.state.calls)

    @property
    def calls(self) -> list[CallRecord]:
        """The window of recent call records, oldest first."""
        return self.state.calls

    @property
    def turn_calls(self) -> list[CallRecord]:
        """The window's calls made since the last user input, oldest first."""
        calls = self.state.calls
        since = self.state.user_step
        if not calls or calls[0].step > since:
            return calls
        return [c for c in calls if c.step > since]


@mypyc_attr(allow_interpreted_subclasses=True)
class Detector:
    """Base class: subclasses set ``name`` and ``kinds`` and implement ``observe``.

    Combine detectors with ``|``: ``RepeatedCall() | Cycle(max_period=8)``.
    """

    name: ClassVar[str] = "detector"
    kinds: ClassVar[frozenset[str]] = frozenset()
    # Whether the default configuration enables it (every default's reason is in
    # its docstring).
    default_on: ClassVar[bool] = True
    # Every concrete detector of loopwatch's, by name (run order: detectors.RUN_ORDER):
    # the default set and the config's sections are built from it.
    registry: ClassVar[dict[str, type[Detector]]] = {}

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        # A concrete detector of loopwatch's own names itself. A user's detector is
        # composed explicitly (Guard(detectors=...)), never added to the defaults.
        if "name" in vars(cls) and str(vars(cls).get("__module__", "")).startswith("loopwatch."):
            other = Detector.registry.get(cls.name)
            if other is not None and other.__qualname__ != cls.__qualname__:
                raise TypeError(f"two detectors are named {cls.name!r}")
            Detector.registry[cls.name] = cls

    # ``name`` as an attribute of the instance, read once: a class attribute is read by a
    # generic lookup in the compiled build, and a detector reads its slot on every event.
    _slot_name: str = ""

    def slot_name(self) -> str:
        """The key of this detector's slot in the run state: its ``name``."""
        key = self._slot_name
        if not key:
            key = self._slot_name = self.name
        return key

    def observe(self, ctx: Context) -> Finding | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def __or__(self, other: Detector | DetectorSet) -> DetectorSet:
        return DetectorSet((self,)) | other

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in _settings(self) if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


def _settings(obj: object) -> list[tuple[str, object]]:
    """An object's attributes in the order they were set: its ``__dict__``, or for an
    instance of a class compiled by mypyc (no ``__dict__``), its classes' declared
    attributes (``__mypyc_attrs__``), base classes first."""
    if hasattr(obj, "__dict__"):
        return list(vars(obj).items())
    out: dict[str, object] = {}
    for cls in reversed(type(obj).__mro__):
        for name in vars(cls).get("__mypyc_attrs__", ()):
            if name != "__dict__" and name not in out and hasattr(obj, name):
                out[name] = getattr(obj, name)
    return list(out.items())


class DetectorSet:
    """An ordered set of detectors, built with ``|``; names must be unique."""

    def __init__(self, detectors: tuple[Detector, ...] = ()) -> None:
        names = [d.name for d in detectors]
        dupes = {n for n in names if names.count(n) > 1}
        if dupes:
            raise ValueError(f"two detectors share the name(s) {sorted(dupes)}: give each a name")
        self.detectors = detectors

    def __or__(self, other: Detector | DetectorSet) -> DetectorSet:
        more = other.detectors if isinstance(other, DetectorSet) else (other,)
        return DetectorSet(self.detectors + more)

    def __iter__(self) -> Iterator[Detector]:
        return iter(self.detectors)

    def __len__(self) -> int:
        return len(self.detectors)

    def __repr__(self) -> str:
        return " | ".join(repr(d) for d in self.detectors) or "DetectorSet()"


def severity_for(
    count: float, warn_at: float | None, stop_at: float | None, before: float | None = None
) -> Severity | None:
    """The severity a count reaches: stop at ``stop_at``, warn at ``warn_at``; else None.

    The one severity rule of every detector. Returns warn only when the count reaches
    the threshold (a warning is issued once per pattern) and stop at and beyond it (a
    stop must hold on every repeat). ``before``, the count before this event, is for
    weighted evidence that can step past ``warn_at`` without landing on it; counts
    that grow by one need not pass it.
    """
    if stop_at is not None and count >= stop_at:
        return Severity.STOP
    if warn_at is not None:
        if before is None:
            before = count - 1
        if before < warn_at <= count:
            return Severity.WARN
    return None


T = TypeVar("T")


def trim(items: list[T], limit: int) -> None:
    """Keep only the last ``limit`` items of a list, in place."""
    if len(items) > limit:
        del items[: len(items) - limit]


class Marked(Protocol):
    """A detector state with a novelty mark (see :func:`note_novelty`)."""

    mark: int


def note_novelty(slot: Marked, ctx: Context) -> bool:
    """Record whether this event brings new information; return True if it does.

    The engine answers "is it new?" once per event (:attr:`Context.novel`: a call not
    in the window, a result or user input not among the run's recent ones); each new
    piece bumps ``slot.mark``, so a detector can tell "nothing new happened since X"
    by comparing marks.
    """
    if ctx.novel:
        slot.mark += 1
        return True
    return False


_ADDRESSES_MAX: Final = 8  # addresses whose pages a detector keeps (LRU)
_SHOWN_MAX: Final = 8  # distinct pages kept per address (a scrolled page's screens)
_SHOWINGS_MAX: Final = 8  # steps kept per page


@final
class Showing(Record):
    """One page an address showed: its sketch, how often, and when (the last few)."""

    __slots__ = ("count", "sketch", "steps")

    def __init__(self, sketch: list[int], step: int) -> None:
        self.sketch = sketch
        self.count = 1
        self.steps = [step]


def call_before(ctx: Context, rec: CallRecord) -> CallRecord | None:
    """The call made just before this one, if the window still holds it."""
    for earlier in reversed(ctx.calls):
        if earlier is not rec and earlier.step < rec.step:
            return earlier
    return None


def asks_anew(ctx: Context, rec: CallRecord) -> bool:
    """Whether a new call that got a result seen before asked something specific that
    the call which got it first did not: another date, route, id or number (a trip
    planned leg by leg whose searches list some of the same flights), not the same
    question in new words (reworded searches landing on the same page). Read from the
    fingerprints of what the calls ask about (CallRecord.asks, from the arguments
    themselves: redaction changes no verdict); False when the first left the window."""
    key = rec.result
    for earlier in ctx.calls:
        if earlier is not rec and earlier.result == key and earlier.step < rec.step:
            return not set(rec.asks).issubset(earlier.asks)
    return False


def show_page(pages: dict[str, list[Showing]], ctx: Context) -> Showing | None:
    """Note that this result shows a page, in a detector's ``pages`` (address
    fingerprint -> the distinct pages it showed, LRU, 8 x 8); return the page's
    record (``count`` 1 when it is new), or None when the result is no page.

    A page is a recorded result, not of a shell command (a command's output quoting
    a URL, an SVG's namespace, is no page: measured, a SWE run printing an SVG was
    stopped as a revisit), that names an address near its start
    (:func:`~loopwatch.fingerprints.page_address`) and has words enough to sketch; two
    showings of one address are the same page when their sketches overlap by
    :data:`~loopwatch.fingerprints.SAME_PAGE` (another OCR or scroll percentage of an
    unchanged page is the same; another screen of a scrolled page is not).
    """
    event = ctx.event
    call = ctx.call
    if not event.text_known or (call is not None and (call.shell or call.poll)):
        return None  # a status page checked while waiting is a poll, not a revisit
    address = page_address(event.text)
    if address is None:
        return None
    sketch = event.sketch
    if sketch is None:
        return None
    step = ctx.step
    key = fingerprint(address)
    shown = pages.pop(key, None) or []
    pages[key] = shown  # most recently shown last
    if len(pages) > _ADDRESSES_MAX:
        del pages[next(iter(pages))]
    for page in shown:
        if sketch_similarity(page.sketch, sketch) >= SAME_PAGE:
            page.count += 1
            page.steps.append(step)
            trim(page.steps, _SHOWINGS_MAX)
            return page
    page = Showing(sketch, step)
    shown.append(page)
    trim(shown, _SHOWN_MAX)
    return page


def dump_pages(pages: dict[str, list[Showing]]) -> Any:
    """``pages`` (see :func:`show_page`) as JSON values."""
    return {key: [page.dump() for page in shown] for key, shown in pages.items()}


def load_pages(data: Any) -> dict[str, list[Showing]]:
    """``pages`` back from :func:`dump_pages`."""
    return {key: [Showing.load(page) for page in shown] for key, shown in data.items()}
