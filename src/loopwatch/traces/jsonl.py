"""The native format: JSON Lines, one run per line (FORMAT.md section 1)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from itertools import repeat
from operator import contains, itemgetter
from typing import Any, Final

from ..events import KINDS
from .base import InputError, TraceRun

__all__ = ["Understanding", "parse_run"]

# The fields FORMAT.md names on an event (section 1); ``ts`` is read by the time budget.
_NAMED: Final = frozenset(
    {"kind", "name", "args", "text", "id", "parent", "type", "error", "tokens", "cost",
     "agent", "to", "unknown", "ts"}
)  # fmt: skip
# The field without which an event of a kind says nothing a detector can use (see add).
# Every kind of KINDS has an entry ("": none).
_MAIN: Final[dict[Any, str]] = {
    "tool_call": "name",
    "tool_result": "text",
    "model": "text",
    "user": "",
    "span": "",
}
_UNKNOWN_KIND: Final = "?"  # by identity: what _MAIN gives for a kind not in KINDS


# What an event of each kind must hold to be understood without a closer look: its
# main field (a user turn or a span: its kind, which it holds).
_HOLDS: Final[dict[Any, str]] = {**_MAIN, "user": "kind", "span": "kind"}
_KIND_OF: Final = itemgetter("kind")


def _all_understood(events: list[Any]) -> bool:
    """Whether every event is an object of a known kind holding its main field, so that
    :meth:`Understanding.add` has nothing to note: decided by passes of C (``map`` over
    the events) rather than by a loop of Python steps per event, a twentieth of a
    short event's scan. False sends the run through that loop, which says what is
    wrong (an event without a kind, an unknown kind, a missing field)."""
    try:
        mains = list(map(_HOLDS.get, map(_KIND_OF, events)))
    except (KeyError, TypeError):  # an event without a kind, not an object, an odd kind
        return False
    return None not in mains and all(map(contains, events, mains))


class Understanding:
    """What the events of one native file said in FORMAT.md's terms, and what not.

    A native file whose events use other names (``"type": "tool_call"``, ``"tool"``,
    ``"arguments"``) or misspelled kinds (``"tool-call"``) reads without an error, and
    every detector skips such events: the scan would say ``ok`` about a file it never
    understood. So the events are counted as they are read, and the file gets one
    line naming what was not understood (:meth:`warning`); a file of which nothing
    was understood is an input error of the whole file (exit status 2).
    """

    __slots__ = ("events", "path", "unread")

    def __init__(self, path: str) -> None:
        self.path = path
        self.events = 0
        # what was not understood -> [count, the fields those events had]
        self.unread: dict[str, list[Any]] = {}

    def add(self, events: Iterable[Mapping[str, Any]]) -> None:
        """Count one run's events."""
        if type(events) is list and _all_understood(events):
            self.events += len(events)  # the common run: nothing to note
            return
        count = 0  # added once, after the loop (an attribute write per event cost more)
        try:
            for event in events:
                count += 1
                kind = event.get("kind")
                # a kind's main field ("" for a kind without one): one lookup, not two
                main = _MAIN.get(kind, _UNKNOWN_KIND)
                if main is _UNKNOWN_KIND:
                    has_kind = "kind" in event
                    what = f"with kind {str(kind)[:40]!r}" if has_kind else "without 'kind'"
                    self._note(what, event)
                    continue
                if not main or main in event:
                    continue
                unknown = event.get("unknown")
                if isinstance(unknown, list) and main in unknown:
                    continue  # not recorded, and said so
                # A call must name its tool. An output or result without text is one the
                # trace did not record (read as unknown: events.Event), said here only
                # when the event carries fields of its own instead (``output``...).
                if kind == "tool_call" or not _NAMED.issuperset(event):
                    self._note(f"{kind!r} without {main!r}", event)
        finally:
            self.events += count

    def _note(self, what: str, event: Mapping[str, Any]) -> None:
        seen = self.unread.get(what)
        if seen is None:
            seen = self.unread[what] = [0, set()]
        seen[0] += 1
        if len(seen[1]) < 12:
            seen[1].update(str(k) for k in list(event)[:12] if k not in ("kind",))

    def merge(self, other: Understanding) -> None:
        """Add the counts of another part of the same file (a parallel scan's range)."""
        self.events += other.events
        for what, (count, fields) in other.unread.items():
            seen = self.unread.setdefault(what, [0, set()])
            seen[0] += count
            seen[1].update(fields)

    def warning(self) -> InputError | None:
        """One line for the file, or None when every event was understood."""
        missed = sum(count for count, _ in self.unread.values())
        if not missed:
            return None
        parts = []
        for what, (count, fields) in sorted(self.unread.items(), key=lambda x: -x[1][0]):
            names = ", ".join(sorted(fields)[:8])
            parts.append(f"{count} {what}" + (f" (fields: {names})" if names else ""))
        whole = missed == self.events
        what = "; ".join(parts)
        need = (
            f"An event needs a 'kind' ({', '.join(sorted(KINDS))}); a tool_call, its tool's "
            "'name' and 'args'; a model or tool_result event, its 'text' (docs/FORMAT.md)."
        )
        if whole:
            reason = (
                f"nothing in this file was understood, so nothing was scanned: none of its "
                f"{self.events} events is a FORMAT.md event ({what}). {need}"
            )
        else:
            reason = (
                f"{missed} of {self.events} events are not FORMAT.md events, and the "
                f"detectors skipped them ({what}). {need}"
            )
        return InputError(self.path, None, reason, whole)


def parse_run(obj: Any, path: str = "", line: int | None = None) -> TraceRun | InputError:
    """Validate one decoded native run object."""
    if not isinstance(obj, dict):
        return InputError(path, line, f"expected a JSON object (a run), got {type(obj).__name__}")
    run_id = obj.get("run_id")
    if run_id is None or isinstance(run_id, (dict, list, bool)):
        return InputError(path, line, "run has no 'run_id' (a string is required)")
    events = obj.get("events")
    if not isinstance(events, list):
        return InputError(path, line, f"run {run_id!r} has no 'events' list")
    # A non-object event keeps its index as an unknown kind (ignored by detectors). Most
    # runs have none: the test and the copy are passes of C.
    if all(map(isinstance, events, repeat(dict))):
        events = list(events)
    else:
        events = [e if isinstance(e, dict) else {"kind": "", "value": e} for e in events]
    meta = obj.get("meta")
    extra = {k: v for k, v in obj.items() if k not in ("run_id", "events", "meta")}
    return TraceRun(str(run_id), events, meta if isinstance(meta, dict) else {}, extra, path, line)
