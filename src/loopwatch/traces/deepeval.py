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
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from typing import Any, Final

import orjson

from .base import InputError, TraceRun

__all__ = ["looks_like", "runs_from_obj", "span_to_events"]

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


def looks_like(obj: object) -> bool:
    """True for a deepeval span dict, or a non-empty list of them."""
    if isinstance(obj, list):
        return bool(obj) and all(_is_span(item) for item in obj)
    return _is_span(obj)


def _run_id(span: Mapping[str, Any], path: str, line: int | None, index: int | None) -> str:
    for key in ("uuid", "trace_uuid", "traceUuid"):
        value = span.get(key)
        if isinstance(value, str) and value:
            return value
    base = os.path.basename(path) if path and path != "-" else "deepeval"
    where = f"{base}:{line}" if line is not None else base
    return where if index is None else f"{where}[{index}]"


def runs_from_obj(obj: object, path: str, line: int | None) -> Iterator[TraceRun | InputError]:
    """One run per root span: ``obj`` is a span dict or a list of them. An item that
    is not a span is reported with its position; the others are still read."""
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
