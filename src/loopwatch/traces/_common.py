"""Shared machinery of the span-based readers: record grouping, tree rebuilding, text.

Exported traces are flat lists of spans (observations, runs) that point at their
parent. Every span-based reader does the same three things, implemented once here:

* group records into runs as they stream in, and let a run go as soon as it is
  complete, so memory is bounded by the largest run rather than the file
  (:class:`Grouper`);
* rebuild the call tree and turn it into FORMAT.md events in the order things
  happened (:func:`assemble`);
* pull text, tool calls, JSON and numbers out of the many shapes LLM messages
  take (:func:`output_text_and_calls`, :func:`maybe_json`, ...).
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypeVar

import orjson

from ..fingerprints import maybe_json
from .base import InputError, TraceRun

__all__ = [
    "Grouper",
    "GroupingReader",
    "Node",
    "Reader",
    "as_text",
    "assemble",
    "maybe_json",
    "number",
    "output_text_and_calls",
    "parse_time",
    "tool_output",
]

Item = TraceRun | InputError
Event = dict[str, Any]
G = TypeVar("G")
G_co = TypeVar("G_co")


class Reader(abc.ABC):
    """A format's reader: fed decoded JSON records one by one, yields runs when complete.

    ``feed`` is called once per JSON Lines line (or once with a whole document);
    ``finish`` at the end of the file lets every run still buffered go.
    """

    def __init__(self, path: str) -> None:
        self.path = path

    @abc.abstractmethod
    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        """Take one decoded record (object, or list of records)."""

    def skip(self, line: int | None) -> Iterator[Item]:
        """A line that could not be decoded went by (it still counts as time passing)."""
        return iter(())

    def finish(self) -> Iterator[Item]:
        """The file ended: yield whatever is still buffered."""
        return iter(())


class GroupingReader(Reader, Generic[G_co]):
    """A reader of flat span records that belong to runs by a key (trace id, ...).

    Subclasses turn a record into buffered spans (:meth:`take_records`) and a
    completed group into runs (:meth:`build`); this class does the streaming.
    """

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.groups: Grouper[G_co] = Grouper()

    @abc.abstractmethod
    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        """Buffer the spans of one decoded record; yield errors for bad ones."""

    @abc.abstractmethod
    def build(self, key: str, records: list[G_co]) -> Iterator[Item]:
        """Turn one complete group of spans into a run (and its errors)."""

    def feed(self, obj: Any, line: int | None) -> Iterator[Item]:
        yield from self.take_records(obj, line)
        for group in self.groups.advance():
            yield from self.build(group.key, group.records)

    def skip(self, line: int | None) -> Iterator[Item]:
        for group in self.groups.advance():
            yield from self.build(group.key, group.records)

    def finish(self) -> Iterator[Item]:
        for group in self.groups.drain():
            yield from self.build(group.key, group.records)


# -- values ------------------------------------------------------------------------------
def as_text(value: Any) -> str:
    """A value as event text: strings unchanged, ``None`` empty, anything else as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return orjson.dumps(value, default=str, option=orjson.OPT_NON_STR_KEYS).decode()


def number(value: Any) -> float | None:
    """A count or a price as a float; ``None`` when it is missing or not a number."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            return None
    return None


def parse_time(value: Any) -> float | None:
    """Seconds since the epoch from an ISO-8601 string or a number; ``None`` if unreadable."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str):
        s = value.strip()
        if s.endswith("Z"):
            s = s[:-1] + "+00:00"
        try:
            return datetime.fromisoformat(s).timestamp()
        except ValueError:
            return None
    return None


# -- message text and tool calls -----------------------------------------------------------
ToolCall = dict[str, Any]  # {"name", "args", "id"}
_TEXT_PART_TYPES = frozenset({"text", "output_text", "input_text"})
_CALL_PART_TYPES = frozenset({"tool_call", "function_call", "tool_use"})


# The keys of a tool's whole output object as LlamaIndex serialises it (``ToolOutput``:
# ``blocks``, ``tool_name``, ``raw_input``, ``raw_output``, ``is_error``), which the
# OpenInference instrumentor records as a tool span's ``output.value``.
_TOOL_OUTPUT_KEYS = frozenset({"blocks", "tool_name", "raw_output", "is_error"})


def tool_output(value: Any) -> tuple[str, bool] | None:
    """The text a model was handed and whether the tool failed, when ``value`` is a
    framework's whole tool-output object rather than the result itself; else None.

    Reading the object as the result would make every result look long and detailed
    (its tool name and arguments are in it), so a short answer ("18C cloudy") would
    be taken for a detailed one and a failure for a success."""
    if isinstance(value, str):
        if not value.startswith("{") or '"raw_output"' not in value:
            return None
        value = maybe_json(value)
    if not isinstance(value, Mapping) or not value.keys() >= _TOOL_OUTPUT_KEYS:
        return None
    blocks = value.get("blocks")
    texts = (
        [b["text"] for b in blocks if isinstance(b, Mapping) and isinstance(b.get("text"), str)]
        if isinstance(blocks, list)
        else []
    )
    text = "\n".join(texts) if texts else as_text(value.get("raw_output"))
    return text, value.get("is_error") is True


def output_text_and_calls(value: Any) -> tuple[str, list[ToolCall]]:
    """The visible text and the tool calls of a model output, whatever its shape.

    Understands plain strings, OpenAI chat messages and choices, Responses API
    items, GenAI semantic-convention messages (``parts``), Anthropic content
    blocks and LangChain generations. Why one function: every export format
    stores model output in one of these shapes, and a model turn must read the
    same from all of them.
    """
    texts: list[str] = []
    calls: list[ToolCall] = []
    _walk_output(maybe_json(value), texts, calls, 0)
    return "\n".join(texts), calls


def _walk_output(value: Any, texts: list[str], calls: list[ToolCall], depth: int) -> None:
    if depth > 8 or value is None:
        return
    if isinstance(value, str):
        texts.append(value)
        return
    if isinstance(value, list):
        for item in value:
            _walk_output(item, texts, calls, depth + 1)
        return
    if not isinstance(value, dict):
        texts.append(as_text(value))
        return
    kind = value.get("type")
    if kind in _CALL_PART_TYPES or (kind is None and "function" in value and "id" in value):
        calls.append(_tool_call(value))
        return
    if kind in _TEXT_PART_TYPES or (kind is None and set(value) <= {"text", "type"}):
        text = value.get("text", value.get("content"))
        if isinstance(text, str):
            texts.append(text)
        return
    if kind == "text" and "content" in value:
        texts.append(as_text(value.get("content")))
        return
    role = value.get("role")
    if role is not None and role not in ("assistant", "ai", "model"):
        return  # input messages echoed in an output: not what the model said
    for key in (
        "parts",
        "content",
        "text",
        "output",
        "message",
        "choices",
        "generations",
        "kwargs",
    ):
        if key in value:
            _walk_output(value[key], texts, calls, depth + 1)
            break
    for key in ("tool_calls", "function_call"):
        found = value.get(key)
        if isinstance(found, list):
            calls.extend(_tool_call(c) for c in found if isinstance(c, dict))
        elif isinstance(found, dict):
            calls.append(_tool_call(found))


def _tool_call(value: Mapping[str, Any]) -> ToolCall:
    fn = value.get("function")
    src: Mapping[str, Any] = fn if isinstance(fn, dict) else value
    args = src.get("arguments", src.get("input", src.get("args")))
    ident = value.get("id", value.get("call_id"))
    return {
        "name": as_text(src.get("name")),
        "args": maybe_json(args),
        "id": None if ident is None else str(ident),
    }


def input_text(value: Any) -> str:
    """The task a span was given, as text: the last user message, else the whole input."""
    decoded = maybe_json(value)
    if isinstance(decoded, list) and decoded and all(isinstance(m, dict) for m in decoded):
        for message in reversed(decoded):
            if message.get("role") in ("user", "human"):
                body = message.get("parts", message.get("content"))
                if isinstance(body, str):
                    return body
                texts: list[str] = []
                _walk_output(body, texts, [], 0)
                return "\n".join(texts)
    if isinstance(value, str):
        return value
    return as_text(decoded)


# -- grouping records into runs ------------------------------------------------------------


@dataclass
class Group(Generic[G]):
    """The buffered records of one run."""

    key: str
    records: list[G] = field(default_factory=list)
    first_line: int | None = None
    last_tick: int = 0
    rooted: bool = False


class Grouper(Generic[G]):
    """Buffers records by run key and releases runs once they are complete.

    A run is complete when its root has arrived and nothing more came for it for
    ``grace`` feeds (exporters write a trace's root last: it ends last), or, root
    or not, when nothing came for it for ``idle`` feeds, or at the end of the
    file. Two insertion-ordered maps (rooted, waiting) ordered by last activity
    make each check O(1) amortised. Memory: the largest run plus whatever
    arrives in ``idle`` feeds.
    """

    def __init__(self, grace: int = 4, idle: int = 2000) -> None:
        self.grace = grace
        self.idle = idle
        self.tick = 0
        self._rooted: OrderedDict[str, Group[G]] = OrderedDict()
        self._waiting: OrderedDict[str, Group[G]] = OrderedDict()

    def add(self, key: str, record: G, line: int | None, is_root: bool) -> None:
        group = self._rooted.pop(key, None) or self._waiting.pop(key, None)
        if group is None:
            group = Group(key, first_line=line)
        group.records.append(record)
        group.last_tick = self.tick
        group.rooted = group.rooted or is_root
        (self._rooted if group.rooted else self._waiting)[key] = group

    def take(self, key: str) -> Group[G] | None:
        """Remove and return a buffered group (to merge it into another)."""
        return self._rooted.pop(key, None) or self._waiting.pop(key, None)

    def advance(self) -> Iterator[Group[G]]:
        """One feed is done: release the runs that are now complete."""
        self.tick += 1
        for groups, wait in ((self._rooted, self.grace), (self._waiting, self.idle)):
            while groups:
                group = next(iter(groups.values()))
                if self.tick - group.last_tick < wait:
                    break
                del groups[group.key]
                yield group

    def drain(self) -> Iterator[Group[G]]:
        """End of input: release everything, in order of first appearance."""
        rest = [*self._rooted.values(), *self._waiting.values()]
        self._rooted.clear()
        self._waiting.clear()
        rest.sort(key=lambda g: (g.first_line is None, g.first_line or 0))
        yield from rest


# -- rebuilding the tree --------------------------------------------------------------------
@dataclass(slots=True)
class Node:
    """One span of a run: its place in the tree and in time, and the format's data."""

    id: str
    parent: str | None
    start: float
    end: float | None
    order: Any  # tie-break between spans that start together (input position, dotted order)
    data: Any
    line: int | None = None


# emit(node, parent_span_event_id) -> (events at start, events at end, id children use as parent)
Emit = Callable[[Node, "str | None"], tuple[list[Event], list[Event], "str | None"]]


def assemble(nodes: list[Node], emit: Emit) -> tuple[list[Event], list[Node]]:
    """Rebuild the tree and turn it into events in the order they happened.

    Each span contributes events when it starts (a tool call, a model turn, a span)
    and may contribute events when it ends (the tool's result). All events are
    merged by time; ties fall back to tree order (parent before children, a
    span's end after everything inside it), which is also the order when times
    are missing. Parallel tool calls therefore read call, call, result, result,
    as they happened.

    Returns the events and the nodes whose parent is not in the run (read as
    roots), which the caller reports.
    """
    by_id: dict[str, Node] = {}
    for n in nodes:
        by_id.setdefault(n.id, n)
    children: dict[str, list[Node]] = {}
    roots: list[Node] = []
    orphans: list[Node] = []
    for n in nodes:
        if by_id.get(n.id) is not n:
            continue  # a duplicate span id: the first one wins
        parent = n.parent
        if parent is None or parent == n.id:
            roots.append(n)
        elif parent in by_id:
            children.setdefault(parent, []).append(n)
        else:
            roots.append(n)
            orphans.append(n)

    def sort_key(n: Node) -> tuple[float, Any]:
        return (n.start, n.order)

    keyed: list[tuple[float, float, int, Event]] = []
    visited: set[str] = set()
    counter = 0
    seq = 0

    def walk(root: Node, parent_event: str | None) -> None:
        nonlocal counter, seq
        # (node, parent span event id, exiting, tail events, node time)
        stack: list[tuple[Node, str | None, bool, list[Event]]] = [(root, parent_event, False, [])]
        subtree_max: dict[str, float] = {}
        while stack:
            node, pev, exiting, tail = stack.pop()
            if exiting:
                latest = subtree_max.pop(node.id, node.start)
                end = node.end if node.end is not None and node.end >= node.start else latest
                for ev in tail:
                    keyed.append((end, counter - 0.5, seq, ev))
                    seq += 1
                if node.parent in subtree_max:
                    subtree_max[node.parent] = max(subtree_max[node.parent], latest, end)
                continue
            if node.id in visited:
                continue
            visited.add(node.id)
            head, tail, own = emit(node, pev)
            for ev in head:
                keyed.append((node.start, float(counter), seq, ev))
                seq += 1
            counter += 1
            subtree_max[node.id] = max(node.start, node.end or node.start)
            stack.append((node, pev, True, tail))
            child_parent = own if own is not None else pev
            for child in sorted(children.get(node.id, ()), key=sort_key, reverse=True):
                stack.append((child, child_parent, False, []))

    for root in sorted(roots, key=sort_key):
        walk(root, None)
    if len(visited) < len(by_id):  # parent pointers that form a cycle: never reached
        stranded = sorted((n for n in by_id.values() if n.id not in visited), key=sort_key)
        for n in stranded:
            if n.id not in visited:
                orphans.append(n)
                walk(n, None)
    keyed.sort(key=lambda k: (k[0], k[1], k[2]))
    return [k[3] for k in keyed], orphans


def orphan_error(path: str, orphans: list[Node], run_id: str) -> InputError:
    """One error line for a run with spans whose parent is not in the file."""
    first = orphans[0]
    more = f" (and {len(orphans) - 1} more)" if len(orphans) > 1 else ""
    return InputError(
        path,
        first.line,
        f"run {run_id!r}: span {first.id!r} has parent {first.parent!r}, which is not in "
        f"the input{more}; read as a top-level span",
    )


# -- shared by the readers of exporters that can leave values out ---------------------
_NOTES_MAX = 20
_MISSING_WORDS = {
    "model_text": "model outputs",
    "tool_args": "tool arguments",
    "tool_results": "tool results",
}


def missing_note(
    run_id: str, missing: Mapping[str, int], events: int, spans: int, hint: str = ""
) -> str | None:
    """One line saying what a run's spans did not carry (or that nothing was read), and
    how to capture it (``hint``); shared by the span-based readers."""
    parts = [f"{missing[k]} {words}" for k, words in _MISSING_WORDS.items() if missing.get(k)]
    if parts:
        what = ", ".join(parts)
        left = (
            " (model turns without their output are left out)" if missing.get("model_text") else ""
        )
        how = f"; {hint}" if hint else ""
        return f"run {run_id!r}: {what} not in the trace, read as unknown{left}{how}"
    if events == 0:
        return (
            f"run {run_id!r}: none of its {spans} spans is an agent step loopwatch reads "
            "(model, tool or agent span): no events to scan"
        )
    return None


def call_input(value: Any) -> Any:
    """A decorated function's recorded input as the call's arguments.

    Langfuse's ``@observe`` records ``{"args": [...], "kwargs": {...}}``, and
    OpenInference instrumentations record the bound arguments of a ``(*args, **kwargs)``
    method, where an empty one is left out (LlamaIndex's tools: ``{"kwargs": {...}}``).
    The tool's arguments are the keyword arguments when there are no positional ones,
    or the one positional argument when there are no keyword ones. Anything else
    unchanged.
    """
    value = maybe_json(value)
    if isinstance(value, Mapping) and value and set(value) <= {"args", "kwargs"}:
        args, kwargs = value.get("args") or [], value.get("kwargs") or {}
        if isinstance(args, list) and isinstance(kwargs, Mapping):
            if not args:
                return dict(kwargs)
            if not kwargs and len(args) == 1:
                return args[0]
    return value
