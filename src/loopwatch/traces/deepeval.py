"""deepeval traces: the nested span dict deepeval's metrics receive, as FORMAT.md events.

deepeval (3.x and 4.x) hands a trace-aware metric ``test_case._trace_dict``, built
by ``TraceManager.create_nested_spans_dict``: one dict per span with ``name``,
``type`` (``agent``, ``llm``, ``tool``, ``retriever`` or ``base``), ``input``,
``output``, optional ``error``, token counts on LLM spans, and ``children`` (the
nested spans, in order). Span ids are stripped, so ids here are made up from the
span's position in the tree (``s0``, ``s1``... in pre-order).

The mapping, in execution order:

* ``tool`` and ``retriever`` spans become a ``tool_call`` (name, input as args)
  when they start and a ``tool_result`` (output as text, ``error`` set when the
  span failed) when they end. A tool span with children (an agent used as a
  tool) is also a ``span`` event, so the call tree stays whole for recursion.
* ``llm`` spans become a ``model`` event (output as text, tokens) when they end;
  their children (rare) hang from the enclosing span.
* every other span (``agent``, ``base``, custom types) becomes a ``span`` event
  (type, name, input as text) when it starts; events inside an ``agent`` span
  carry that agent's name.

Nothing is lost: a child that is not a span dict keeps its place as an event of
unknown kind (ignored by the detectors, as FORMAT.md says).

The file deepeval itself writes after an evaluation is read too:
``.deepeval/.latest_test_run.json`` (``{"testRunData": <TestRun>}``), and the
``TestRun`` document of ``.latest_run_full.json`` and of the results folder's
``test_run_*.json``. Each test case's ``trace`` is a ``TraceApi``: flat lists of
spans by type (``agentSpans``, ``llmSpans``, ``toolSpans``, ``retrieverSpans``,
``baseSpans``) that point at their parent by ``parentUuid``. The tree is rebuilt
from them and read as above, one run per test case. Its times are in
milliseconds, so steps that share one are ordered by their position in their
list, alternating between lists (a model turn, then the tool it called, then the
next turn): the lists keep each kind in order, the times only order the kinds
coarsely.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from .base import InputError, TraceRun

__all__ = ["looks_like", "nest_trace", "runs_from_obj", "span_to_events"]

SPAN_TYPES: Final = frozenset({"agent", "llm", "tool", "retriever", "base"})
_CALL_TYPES: Final = frozenset({"tool", "retriever"})
# Keys deepeval's span dict may carry; a dict with ``children`` and ``type`` and one
# of these is a span (a native run has ``run_id`` and ``events`` instead).
_SPAN_KEYS: Final = frozenset({"name", "input", "output", "error", "model"})


def _text(value: Any) -> str:
    """A span input or output as text: strings as they are, a message dict's
    ``content``, anything else as canonical JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        content = value.get("content")
        if isinstance(content, str) and set(value) <= {"role", "content", "name"}:
            return content
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except TypeError:  # beyond orjson: integers over 64 bits, non-str keys...
        return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


def _tokens(span: Mapping[str, Any]) -> float:
    total = 0.0
    for key in ("input_token_count", "output_token_count", "inputTokenCount", "outputTokenCount"):
        value = span.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            total += value
    return total


def _is_span(obj: object) -> bool:
    return (
        isinstance(obj, Mapping)
        and isinstance(obj.get("children"), list)
        and isinstance(obj.get("type"), str)
        and any(key in obj for key in _SPAN_KEYS)
        and "events" not in obj
    )


def _tag(event: dict[str, Any], parent: str | None, agent: str | None) -> dict[str, Any]:
    if parent is not None:
        event["parent"] = parent
    if agent is not None and "agent" not in event:
        event["agent"] = agent
    return event


def span_to_events(span: dict[str, Any]) -> list[dict[str, Any]]:
    """The FORMAT.md events of a deepeval span tree, in execution order.

    Iterative (a deep tree, the very thing recursion detection looks for, must not
    hit Python's recursion limit).
    """
    events: list[dict[str, Any]] = []
    counter = 0
    # Work items: ("enter", node, parent id, agent name) or ("exit", event dict).
    stack: list[tuple[str, Any, str | None, str | None]] = [("enter", span, None, None)]
    while stack:
        action, node, parent, agent = stack.pop()
        if action == "exit":
            events.append(node)
            continue
        if not isinstance(node, Mapping):
            events.append({"kind": "", "value": node})
            continue
        sid = f"s{counter}"
        counter += 1
        kind = node.get("type")
        kind = kind if isinstance(kind, str) else "base"
        name = node.get("name")
        name = None if name is None else str(name)
        children = node.get("children")
        children = children if isinstance(children, list) else []
        child_agent = agent
        child_parent = parent  # children hang from the nearest span event emitted
        closing: dict[str, Any] | None = None

        if kind in _CALL_TYPES:
            args = node.get("input")
            events.append(
                _tag({"kind": "tool_call", "name": name, "args": args, "id": sid}, parent, agent)
            )
            error = node.get("error")
            result: dict[str, Any] = {
                "kind": "tool_result",
                "name": name,
                "id": sid,
                "text": _text(node.get("output")) if not error else str(error),
            }
            if error:
                result["error"] = True
            closing = _tag(result, parent, agent)
            if children:
                events.append(
                    _tag(
                        {
                            "kind": "span",
                            "type": kind,
                            "name": name,
                            "id": sid,
                            "text": _text(args),
                        },
                        parent,
                        agent,
                    )
                )
                child_parent = sid
        elif kind == "llm":
            model: dict[str, Any] = {"kind": "model", "text": _text(node.get("output"))}
            tokens = _tokens(node)
            if tokens:
                model["tokens"] = tokens
            closing = _tag(model, parent, agent)
        else:
            if kind == "agent" and name is not None:
                child_agent = name
            events.append(
                _tag(
                    {
                        "kind": "span",
                        "type": kind,
                        "name": name,
                        "id": sid,
                        "text": _text(node.get("input")),
                    },
                    parent,
                    agent,
                )
            )
            child_parent = sid
        if closing is not None:
            stack.append(("exit", closing, None, None))
        for child in reversed(children):
            stack.append(("enter", child, child_parent, child_agent))
    return events


# -- deepeval's own test-run files ---------------------------------------------------------
_SPAN_LISTS: Final = (
    ("agentSpans", "agent"),
    ("llmSpans", "llm"),
    ("toolSpans", "tool"),
    ("retrieverSpans", "retriever"),
    ("baseSpans", "base"),
)


def _test_run(obj: object) -> Mapping[str, Any] | None:
    """The ``TestRun`` of a test-run file (``.latest_test_run.json`` wraps it), or None."""
    if not isinstance(obj, Mapping):
        return None
    inner = obj.get("testRunData")
    run = inner if isinstance(inner, Mapping) else obj
    cases = run.get("testCases")
    if isinstance(cases, list) and ("testRunData" in obj or "testPassed" in run):
        return run
    return None


def _is_trace_api(obj: object) -> bool:
    return isinstance(obj, Mapping) and any(
        isinstance(obj.get(key), list) for key, _ in _SPAN_LISTS
    )


def nest_trace(trace: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A ``TraceApi``'s flat span lists as nested span dicts (the roots, in order).

    The children of a span are merged from the per-type lists, each already in
    order: the earliest start first, and among starts in the same millisecond the
    list after the one last taken from (a model turn, its tool, the next turn...;
    see the module docstring).
    """
    by_parent: dict[str | None, dict[str, list[tuple[str, dict[str, Any]]]]] = {}
    nodes: dict[str, dict[str, Any]] = {}
    for key, kind in _SPAN_LISTS:
        for raw in trace.get(key) or ():
            if not isinstance(raw, Mapping):
                continue
            node = {k: v for k, v in raw.items() if k not in ("uuid", "parentUuid")}
            node["type"] = raw["type"] if isinstance(raw.get("type"), str) else kind
            node["children"] = []
            uuid = raw.get("uuid")
            if uuid is not None:
                nodes[str(uuid)] = node
            parent = raw.get("parentUuid")
            lists = by_parent.setdefault(None if parent is None else str(parent), {})
            lists.setdefault(kind, []).append((str(raw.get("startTime") or ""), node))
    roots: list[dict[str, Any]] = []
    for parent, lists in by_parent.items():
        holder = nodes.get(parent) if parent is not None else None
        target = holder["children"] if holder is not None else roots
        target.extend(_merge(lists))
    return roots


def _merge(lists: dict[str, list[tuple[str, dict[str, Any]]]]) -> list[dict[str, Any]]:
    """Interleave per-type lists of (start, span): earliest first, ties alternating."""
    order = [kind for _key, kind in _SPAN_LISTS if lists.get(kind)]
    heads = dict.fromkeys(order, 0)
    out: list[dict[str, Any]] = []
    last: str | None = None
    while True:
        live = [k for k in order if heads[k] < len(lists[k])]
        if not live:
            return out
        first = min(lists[k][heads[k]][0] for k in live)
        tied = [k for k in live if lists[k][heads[k]][0] == first]
        pick = tied[0]
        if last in tied and len(tied) > 1:
            pick = tied[(tied.index(last) + 1) % len(tied)]
        out.append(lists[pick][heads[pick]][1])
        heads[pick] += 1
        last = pick


def _test_run_runs(run: Mapping[str, Any], path: str) -> Iterator[TraceRun | InputError]:
    for index, case in enumerate(run.get("testCases") or ()):
        name = case.get("name") if isinstance(case, Mapping) else None
        label = name if isinstance(name, str) else f"test case {index}"
        trace = case.get("trace") if isinstance(case, Mapping) else None
        if not _is_trace_api(trace):
            yield InputError(path, None, f"{label}: no trace (run it under @observe)")
            continue
        assert isinstance(trace, Mapping)
        roots = nest_trace(trace)
        events: list[dict[str, Any]] = []
        for root in roots:
            offset = len(events)
            for event in span_to_events(root):
                if offset:  # ids made up per tree: keep them unique across trees
                    for field in ("id", "parent"):
                        if isinstance(event.get(field), str):
                            event[field] = f"t{offset}.{event[field]}"
                events.append(event)
        meta: dict[str, Any] = {"format": "deepeval", "test_case": label}
        if isinstance(case.get("input"), str):
            meta["input"] = case["input"]
        uuid = trace.get("uuid")
        yield TraceRun(
            run_id=str(uuid) if uuid else label, events=events, meta=meta, path=path, line=None
        )


def looks_like(obj: object) -> bool:
    """True for a deepeval span dict, a non-empty list of them, or a test-run file."""
    if isinstance(obj, list):
        return bool(obj) and all(_is_span(item) for item in obj)
    return _is_span(obj) or _test_run(obj) is not None


def _run_id(span: Mapping[str, Any], path: str, line: int | None, index: int | None) -> str:
    for key in ("uuid", "trace_uuid", "traceUuid"):
        value = span.get(key)
        if isinstance(value, str) and value:
            return value
    base = os.path.basename(path) if path and path != "-" else "deepeval"
    where = f"{base}:{line}" if line is not None else base
    return where if index is None else f"{where}[{index}]"


def runs_from_obj(obj: object, path: str, line: int | None) -> Iterator[TraceRun | InputError]:
    """One run per root span: ``obj`` is a span dict or a list of them, or one run per
    test case of a test-run file. An item that is not a span is reported with its
    position; the others are still read."""
    test_run = _test_run(obj)
    if test_run is not None:
        yield from _test_run_runs(test_run, path)
        return
    items: list[Any]
    if isinstance(obj, list):
        items, indexed = obj, True
    else:
        items, indexed = [obj], False
    for index, item in enumerate(items):
        if not _is_span(item):
            where = f"item {index}: " if indexed else ""
            got = type(item).__name__
            yield InputError(
                path,
                line,
                f"{where}expected a deepeval span (an object with 'type', 'children' and "
                f"'name'/'input'/'output'), got {got}",
            )
            continue
        span = dict(item)
        meta: dict[str, Any] = {"format": "deepeval"}
        if span.get("name") is not None:
            meta["name"] = span["name"]
        yield TraceRun(
            run_id=_run_id(span, path, line, index if indexed else None),
            events=span_to_events(span),
            meta=meta,
            path=path,
            line=line,
        )
