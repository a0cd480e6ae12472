"""Recursion: an agent (or chain, or tool span) invoking itself with its own input."""

from __future__ import annotations

from typing import final

from ..events import SPAN
from ..findings import Finding
from ..fingerprints import normalise_text
from ..state import KeyedState, Record
from ..text import fingerprint
from .base import Context, Detector, preview, severity_for

_SPANS_MAX = 512  # spans remembered per run (LRU); deeper history is not needed
_DEPTH_MAX = 64  # ancestors walked at most


@final
class SpanNode(Record):
    """A span seen in the run: its label (type, name, input), parent and step."""

    __slots__ = ("label", "parent", "step")

    def __init__(self, label: str, parent: str | None, step: int) -> None:
        self.label = label  # fingerprint of type + name + normalised input
        self.parent = parent  # the parent span's id
        self.step = step  # event index


@final
class RecursionState(KeyedState[SpanNode]):
    """Spans by id (LRU, at most 512), to walk a new span's ancestors."""

    __slots__ = ()
    record = SpanNode


class Recursion(Detector):
    """A span nested under an ancestor with the same type, name and input.

    Builds the call tree from ``span`` events' ``id`` and ``parent``; the label is
    type + name + normalised input text (deepeval's ``type:name:input`` call-graph
    cycle). Siblings never count, and neither does a span that calls itself with a
    new input (a planner delegating sub-tasks to itself).

    Defaults: warn when the label occurs twice on one ancestry path (deepeval's
    rule), stop at three: a sub-agent that re-invokes itself with its own input twice
    is not going to stop by itself.
    """

    name = "recursion"
    kinds = frozenset({SPAN})

    def __init__(self, warn_at: int = 2, stop_at: int | None = 3) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at

    def observe(self, ctx: Context) -> Finding | None:
        ev = ctx.event
        spans = ctx.state.slot(self.slot_name(), RecursionState).by_key
        # A hash, not the text: span inputs can be long, and the state must stay small.
        label = (
            fingerprint(f"{ev.type or ''}\x00{ev.name or ''}\x00{normalise_text(ev.text)}")
            if ev.text_known
            else ev.text_key  # an input not recorded equals no ancestor's
        )
        depth = 1
        steps = [ctx.step]
        parent = ev.parent
        for _ in range(_DEPTH_MAX):
            if parent is None:
                break
            node = spans.get(parent)
            if node is None:
                break
            if node.label == label:
                depth += 1
                steps.append(node.step)
            parent = node.parent
        if ev.id is not None:
            spans.pop(ev.id, None)
            spans[ev.id] = SpanNode(label, ev.parent, ctx.step)
            if len(spans) > _SPANS_MAX:
                del spans[next(iter(spans))]
        severity = severity_for(depth, self.warn_at, self.stop_at)
        if severity is None:
            return None
        kind = ev.type or "span"
        return Finding(
            self.name,
            severity,
            ctx.step,
            tuple(sorted(steps)),
            f"{kind} {ev.name!r} invoked itself with the same input {preview(ev.text, 60)!r} "
            f"({depth} levels deep). Do the task here instead of delegating it to yourself.",
            label,
        )
