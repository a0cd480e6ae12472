"""What every detector is: a small object that looks at one event in context.

Detectors keep their own per-run state in ``ctx.state[self.name]`` as plain
JSON-compatible values (dicts with str keys, lists, numbers, strings), so one run's
state can be serialised as-is to a shared store. They must be deterministic: the
same events in the same order give the same findings, which is what makes the
offline scan and the runtime guard agree.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, ClassVar, Final

from ..events import Event
from ..findings import Finding, Severity
from ..text import preview

__all__ = [
    "C_ARGS",
    "C_KEY",
    "C_NAME",
    "C_NORM",
    "C_NOVEL",
    "C_RESULT",
    "C_RSTEP",
    "C_STEP",
    "C_TURN",
    "Context",
    "Detector",
    "DetectorSet",
    "note_novelty",
    "preview",
    "severity_for",
    "trim",
]

# Layout of a call record in the shared call window (a list, so it serialises as JSON).
C_STEP: Final = 0  # event index of the tool_call
C_KEY: Final = 1  # exact call key
C_NORM: Final = 2  # normalised call key
C_NAME: Final = 3  # tool name
C_RESULT: Final = 4  # result key, None until the result is observed ("E..." = error)
C_RSTEP: Final = 5  # event index of the tool_result, or None
C_NOVEL: Final = 6  # True if the normalised key was not in the window when called
C_ARGS: Final = 7  # short preview of the arguments, for messages
C_TURN: Final = 8  # the model turn the call was issued in (see Context.turn)


class Context:
    """One event in its run: the event, its index, the run state, and its call record."""

    __slots__ = ("call", "event", "novel", "state", "step")

    def __init__(
        self,
        step: int,
        event: Event,
        state: dict[str, Any],
        call: list[Any] | None,
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
        return int(self.state["epoch"])

    @property
    def turn(self) -> int:
        """The model turn this event belongs to: calls issued together (after one
        model output, before the next) share it; without model events, each call
        is its own turn."""
        return int(self.state.get("turn", 0))

    @property
    def batched(self) -> bool:
        """Whether this event's call was issued in the same turn as an earlier,
        different call: part of a parallel batch. A batch of different calls failing
        the same way is one failed decision, not several attempts; the same call
        issued twice in one turn is still a repeat."""
        rec = self.call
        if rec is None:
            return False
        turn, key, step = rec[C_TURN], rec[C_KEY], rec[C_STEP]
        return any(c[C_TURN] == turn and c[C_KEY] != key and c[C_STEP] < step for c in self.calls)

    @property
    def calls(self) -> list[list[Any]]:
        """The window of recent call records, oldest first."""
        calls: list[list[Any]] = self.state["calls"]
        return calls


class Detector:
    """Base class: subclasses set ``name`` and ``kinds`` and implement ``observe``.

    Combine detectors with ``|``: ``RepeatedCall() | Cycle(max_period=8)``.
    """

    name: ClassVar[str] = "detector"
    kinds: ClassVar[frozenset[str]] = frozenset()

    def observe(self, ctx: Context) -> Finding | None:  # pragma: no cover - abstract
        raise NotImplementedError

    def my_state(self, ctx: Context, factory: type = dict) -> Any:
        """This detector's slot in the run state, created on first use."""
        st = ctx.state.get(self.name)
        if st is None:
            st = ctx.state[self.name] = factory()
        return st

    def __or__(self, other: Detector | DetectorSet) -> DetectorSet:
        return DetectorSet((self,)) | other

    def __repr__(self) -> str:
        params = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"{type(self).__name__}({params})"


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


def trim(items: list[Any], limit: int) -> None:
    """Keep only the last ``limit`` items of a list, in place."""
    if len(items) > limit:
        del items[: len(items) - limit]


def note_novelty(slot: dict[str, Any], ctx: Context) -> bool:
    """Record whether this event brings new information; return True if it does.

    The engine answers "is it new?" once per event (:attr:`Context.novel`: a call not
    in the window, a result or user input not among the run's recent ones); each new
    piece bumps ``slot["mark"]``, so a detector can tell "nothing new happened since
    X" by comparing marks. The slot is the caller's own per-run state dict.
    """
    if ctx.novel:
        slot["mark"] = slot.get("mark", 0) + 1
        return True
    return False
