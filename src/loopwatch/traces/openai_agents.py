"""OpenAI Agents SDK traces: the trace and span objects its tracing processors export.

Input: ``Trace.export()`` / ``Span.export()`` dicts (``"object": "trace"`` /
``"trace.span"``), one per line, in arrays, or in the exporter's
``{"data": [...]}`` batches. One run per ``trace_id``; the tree comes from
``parent_id``. The mapping:

* ``function`` spans: a ``tool_call`` (``input``, JSON-decoded) and, when the
  span ends, a ``tool_result`` (``output``; failed when the span has an ``error``);
* ``generation`` spans: a ``model`` event (the output messages' text; usage
  tokens), attributed to the enclosing agent when the trace has several agents;
* ``response`` spans: a ``model`` event only when the export carries the output
  (the SDK's own export keeps just the response id: an empty model event would
  read as the model saying nothing);
* ``agent`` spans: a ``span`` of type ``agent``; its text is ``metadata.input``
  when present, else the last user message its first model call received;
* ``custom`` spans (other than the SDK's own task/turn bookkeeping): a ``span``
  whose type is ``data.type`` (default ``custom``) and text ``data.input``;
* handoff, guardrail, speech, MCP listing spans: no event (they stay in the tree).

Absent is not equal (docs/FORMAT.md, ``unknown``): with
``trace_include_sensitive_data=False`` the SDK exports no inputs or outputs. A
function span without its input gives a tool call with no ``args`` and
``"unknown": ["args"]``, one without output (and no error) a result with no
``text`` and ``"unknown": ["text"]``; a generation without output gives no model
event; an agent span whose input cannot be found has ``"unknown": ["text"]``.
``meta["unknown"]`` counts what was missing and one ``InputError`` line says so.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..content import media_only
from ._common import (
    GroupingReader,
    Item,
    Node,
    as_text,
    assemble,
    input_text,
    maybe_json,
    missing_note,
    number,
    orphan_error,
    output_text_and_calls,
    parse_time,
)
from .base import InputError, TraceRun

__all__ = ["OpenAIAgentsReader", "looks_like"]

_Record = tuple[Mapping[str, Any], int | None]  # (record, line)
_HINT = "the SDK exports inputs and outputs unless trace_include_sensitive_data is False"


def looks_like(obj: Any) -> bool:
    """True for an exported trace or span object, or a batch / list of them."""
    if isinstance(obj, list):
        return bool(obj) and looks_like(obj[0])
    if not isinstance(obj, dict):
        return False
    if isinstance(obj.get("data"), list) and obj["data"] and "meta" not in obj:
        return looks_like(obj["data"][0])
    return obj.get("object") in ("trace", "trace.span") or (
        "span_data" in obj and "trace_id" in obj
    )


class OpenAIAgentsReader(GroupingReader[_Record]):
    """Streams OpenAI Agents SDK exports into runs, one per trace."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.trace_meta: dict[str, dict[str, Any]] = {}

    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        if isinstance(obj, dict) and isinstance(obj.get("data"), list):
            obj = obj["data"]
        for record in obj if isinstance(obj, list) else [obj]:
            if not isinstance(record, dict):
                yield InputError(self.path, line, "skipped a record that is not an object")
            elif record.get("object") == "trace" and record.get("id") is not None:
                meta = {
                    k: record[k]
                    for k in ("workflow_name", "group_id", "metadata")
                    if record.get(k) is not None
                }
                self.trace_meta[str(record["id"])] = meta
                if len(self.trace_meta) > 100_000:
                    del self.trace_meta[next(iter(self.trace_meta))]
            elif isinstance(record.get("span_data"), dict) and record.get("id") is not None:
                trace = record.get("trace_id")
                if trace is None:
                    yield InputError(self.path, line, f"skipped span {record['id']!r}: no trace_id")
                    continue
                self.groups.add(str(trace), (record, line), line, record.get("parent_id") is None)
            else:
                yield InputError(self.path, line, "skipped a record that is not a trace or span")

    def build(self, key: str, records: list[_Record]) -> Iterator[Item]:
        nodes: list[Node] = []
        for i, (span, line) in enumerate(records):
            start = parse_time(span.get("started_at"))
            end = parse_time(span.get("ended_at"))
            parent = span.get("parent_id")
            nodes.append(
                Node(str(span["id"]), None if parent is None else str(parent), start or 0.0, end,
                     i, span, line)
            )  # fmt: skip
        by_id = {n.id: n for n in nodes}
        kids: dict[str, list[Node]] = {}
        for n in nodes:
            if n.parent is not None:
                kids.setdefault(n.parent, []).append(n)
        agents = {
            n.data["span_data"].get("name")
            for n in nodes
            if n.data["span_data"].get("type") == "agent"
        }
        context = _Context(by_id, kids, multi_agent=len(agents) > 1)
        events, orphans = assemble(nodes, context.emit)
        if orphans:
            yield orphan_error(self.path, orphans, key)
        meta: dict[str, Any] = {"format": "openai_agents", "trace_id": key}
        meta.update(self.trace_meta.pop(key, {}))
        missing = context.missing
        if missing:
            meta["unknown"] = dict(sorted(missing.items()))
        lines = [ln for _, ln in records if ln is not None]
        first = min(lines) if lines else None
        note = missing_note(key, missing, len(events), len(records), _HINT)
        if note is not None:
            yield InputError(self.path, first, note)
        yield TraceRun(key, events, meta, {}, self.path, first)


class _Context:
    """What mapping one span needs to know about the rest of its trace."""

    def __init__(
        self, by_id: dict[str, Node], kids: dict[str, list[Node]], multi_agent: bool
    ) -> None:
        self.by_id = by_id
        self.kids = kids
        self.multi_agent = multi_agent
        self.missing: dict[str, int] = {}

    def _count(self, what: str) -> None:
        self.missing[what] = self.missing.get(what, 0) + 1

    def _agent_of(self, node: Node) -> str | None:
        parent = node.parent
        for _ in range(64):
            if parent is None or parent not in self.by_id:
                return None
            data = self.by_id[parent].data["span_data"]
            if data.get("type") == "agent":
                name = data.get("name")
                return name if isinstance(name, str) else None
            parent = self.by_id[parent].parent
        return None

    def _first_input(self, node: Node) -> str | None:
        """The last user message of the first model call under an agent span (None when
        no model call under it carries its input)."""
        queue = sorted(self.kids.get(node.id, ()), key=lambda n: (n.start, n.order))
        while queue:
            child = queue.pop(0)
            data = child.data["span_data"]
            if data.get("type") in ("generation", "response") and data.get("input") is not None:
                return input_text(data["input"])
            if data.get("type") != "agent":
                queue.extend(sorted(self.kids.get(child.id, ()), key=lambda n: (n.start, n.order)))
        return None

    def emit(self, node: Node, parent: str | None) -> tuple[list[Any], list[Any], str | None]:
        span: Mapping[str, Any] = node.data
        data: Mapping[str, Any] = span["span_data"]
        kind = data.get("type")

        def at(event: dict[str, Any]) -> dict[str, Any]:
            if parent is not None:
                event["parent"] = parent
            return event

        if kind == "function":
            name = as_text(data.get("name"))
            error = span.get("error")
            output = data.get("output")
            if output is None and isinstance(error, dict):
                output = error.get("message")
            result = at({"kind": "tool_result", "name": name, "id": node.id})
            if output is None:
                self._count("tool_results")
                result["unknown"] = ["text"]
            elif media_only(output):
                result["unknown"] = ["text"]  # a screenshot: the screen is the result
            else:
                result["text"] = output if isinstance(output, str) else as_text(output)
            if error:
                result["error"] = True
            call = at({"kind": "tool_call", "name": name, "id": node.id})
            if data.get("input") is None:
                self._count("tool_args")
                call["unknown"] = ["args"]
            else:
                call["args"] = maybe_json(data.get("input"))
            return [call], [result], None
        if kind in ("generation", "response"):
            output = data.get("output")
            if kind == "response" and output is None:
                response = data.get("response")
                output = response.get("output") if isinstance(response, dict) else None
                if output is None:
                    return [], [], None
            if output is None:  # not exported (sensitive data off): not an empty output
                self._count("model_text")
                return [], [], None
            text, _calls = output_text_and_calls(output)
            event: dict[str, Any] = {"kind": "model", "text": text}
            usage = data.get("usage")
            if isinstance(usage, dict):
                i = number(usage.get("input_tokens", usage.get("prompt_tokens")))
                o = number(usage.get("output_tokens", usage.get("completion_tokens")))
                if i or o:
                    event["tokens"] = (i or 0.0) + (o or 0.0)
            if self.multi_agent:
                agent = self._agent_of(node)
                if agent is not None:
                    event["agent"] = agent
            return [at(event)], [], None
        if kind == "agent":
            meta = span.get("metadata")
            given = meta.get("input") if isinstance(meta, dict) else None
            found = input_text(given) if given is not None else self._first_input(node)
            name = as_text(data.get("name"))
            ev: dict[str, Any] = {"kind": "span", "name": name, "type": "agent", "id": node.id}
            if found is None:
                self._count("span_inputs")
                ev["unknown"] = ["text"]
            else:
                ev["text"] = found
            return [at(ev)], [], node.id
        if kind == "custom":
            inner = data.get("data")
            inner = inner if isinstance(inner, dict) else {}
            if "sdk_span_type" in inner:
                return [], [], None  # the SDK's task / turn bookkeeping
            span_type = inner.get("type")
            ev = {"kind": "span", "name": as_text(data.get("name")),
                  "type": span_type if isinstance(span_type, str) else "custom",
                  "id": node.id, "text": input_text(inner.get("input"))
                  if inner.get("input") is not None else ""}  # fmt: skip
            return [at(ev)], [], node.id
        return [], [], None
