"""OpenTelemetry traces in OTLP JSON: GenAI semantic conventions and OpenInference.

Input: the OpenTelemetry file exporter's JSON Lines (one ``TracesData`` per
line), a single ``ExportTraceServiceRequest`` document, or one span object per
line. Ids may be hex or base64 (protobuf's JSON mapping), enums integers or
names, int64 strings or numbers, field names lowerCamelCase or snake_case.

Spans are grouped into runs by ``gen_ai.conversation.id`` (OpenInference:
``session.id``) when a trace carries one, else by trace id, rebuilt into a tree
from ``parentSpanId`` and ordered by time. The mapping:

* ``execute_tool`` / OpenInference ``TOOL``: a ``tool_call`` when the span
  starts and a ``tool_result`` when it ends (``gen_ai.tool.name``,
  ``gen_ai.tool.call.arguments`` / ``input.value`` / ``tool.parameters``,
  ``gen_ai.tool.call.result`` / ``output.value``; failed when the status is
  ERROR or ``error.type`` is set);
* ``chat`` / ``generate_content`` / ``text_completion`` / OpenInference ``LLM``:
  a ``model`` event (output messages, ``gen_ai.completion`` and its flattened
  forms, ``llm.output_messages.*``; usage tokens, ``llm.cost.total``). Tool
  calls in the output become ``tool_call`` events only in traces that have no
  tool spans (otherwise the tool spans already record them);
* ``invoke_agent`` / ``create_agent`` / OpenInference ``AGENT``: a ``span`` of
  type ``agent`` whose text is the input (recursion detection); any other
  GenAI operation or OpenInference kind: a ``span`` of that type;
* spans with no GenAI or OpenInference attributes (HTTP, database...): no
  event; they stay in the tree so that their children keep their ancestry.
"""

from __future__ import annotations

import base64
import binascii
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._common import (
    GroupingReader,
    Item,
    Node,
    as_text,
    assemble,
    input_text,
    maybe_json,
    number,
    orphan_error,
    output_text_and_calls,
)
from .base import InputError, TraceRun

__all__ = ["OtlpReader", "looks_like"]

_TOOL_OPS = frozenset({"execute_tool"})
_MODEL_OPS = frozenset({"chat", "generate_content", "text_completion", "completion"})
_AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
_CONVERSATION_KEYS = ("gen_ai.conversation.id", "session.id")
_NUMERIC_KEYS = frozenset(
    {
        "gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
        "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens",
        "llm.token_count.prompt", "llm.token_count.completion", "llm.token_count.total",
        "llm.usage.total_tokens", "llm.cost.total", "gen_ai.usage.cost",
    }
)  # fmt: skip
_STRING_KEYS = frozenset(
    {
        "gen_ai.operation.name", "gen_ai.tool.name", "gen_ai.conversation.id",
        "openinference.span.kind", "tool.name", "gen_ai.agent.name", "agent.name",
    }
)  # fmt: skip
_ALIASES_MAX = 100_000


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def looks_like(obj: Any) -> bool:
    """True for an OTLP ``TracesData`` / ``ExportTraceServiceRequest`` or a span object."""
    if isinstance(obj, list):
        return bool(obj) and looks_like(obj[0])
    if not isinstance(obj, dict):
        return False
    if "resourceSpans" in obj or "resource_spans" in obj:
        return True
    return (
        _get(obj, "traceId", "trace_id") is not None
        and (_get(obj, "spanId", "span_id") is not None)
        and ("startTimeUnixNano" in obj or "start_time_unix_nano" in obj or "attributes" in obj)
    )


# -- decoding OTLP JSON --------------------------------------------------------------------
class _Bad(ValueError):
    """A malformed piece of one span: reported, the rest of the span is still read."""


def _id(value: Any, what: str) -> str | None:
    """A trace or span id as lowercase hex; hex or base64 in, empty means none."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise _Bad(f"{what} is {type(value).__name__}, expected a hex or base64 string")
    if len(value) in (16, 32):
        try:
            bytes.fromhex(value)
            return value.lower()
        except ValueError:
            pass
    try:
        raw = base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _Bad(f"{what} {value!r} is neither hex nor base64") from None
    if len(raw) not in (8, 16):
        raise _Bad(f"{what} {value!r} decodes to {len(raw)} bytes, expected 8 or 16")
    return raw.hex()


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool):
        raise _Bad(f"{what} is a boolean")
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            raise _Bad(f"{what} {value!r} is not an integer") from None
    raise _Bad(f"{what} is {type(value).__name__}, expected an integer")


def _any_value(value: Any, key: str) -> Any:
    """Decode an OTLP ``AnyValue`` (``{"stringValue": ...}`` and friends)."""
    if not isinstance(value, dict):
        raise _Bad(f"attribute {key!r} value is {type(value).__name__}, expected an AnyValue")
    if not value:
        return None
    for camel, snake in (("stringValue", "string_value"), ("boolValue", "bool_value")):
        if camel in value or snake in value:
            return _get(value, camel, snake)
    if "intValue" in value or "int_value" in value:
        return _int(_get(value, "intValue", "int_value"), f"attribute {key!r}")
    if "doubleValue" in value or "double_value" in value:
        d = number(_get(value, "doubleValue", "double_value"))
        if d is None:
            raise _Bad(f"attribute {key!r} doubleValue is not a number")
        return d
    if "arrayValue" in value or "array_value" in value:
        inner = _get(value, "arrayValue", "array_value") or {}
        values = inner.get("values", []) if isinstance(inner, dict) else None
        if not isinstance(values, list):
            raise _Bad(f"attribute {key!r} arrayValue has no values list")
        return [_any_value(v, key) for v in values]
    if "kvlistValue" in value or "kvlist_value" in value:
        inner = _get(value, "kvlistValue", "kvlist_value") or {}
        values = inner.get("values", []) if isinstance(inner, dict) else None
        return _attributes(values, key)
    if "bytesValue" in value or "bytes_value" in value:
        return _get(value, "bytesValue", "bytes_value")
    raise _Bad(f"attribute {key!r} has an unknown value type {sorted(value)[:3]}")


def _attributes(raw: Any, where: str = "attributes") -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, list):
        raise _Bad(f"{where} is {type(raw).__name__}, expected a list of key/value pairs")
    out: dict[str, Any] = {}
    for entry in raw:
        if not isinstance(entry, dict) or not isinstance(entry.get("key"), str):
            raise _Bad(f"{where} has an entry without a string 'key'")
        key = entry["key"]
        out[key] = _any_value(entry.get("value", {}), key)
    return out


def _check_types(attrs: dict[str, Any]) -> None:
    for key in _NUMERIC_KEYS & attrs.keys():
        if number(attrs[key]) is None:
            bad = attrs.pop(key)
            raise _Bad(f"attribute {key!r} is {bad!r}, expected a number")
    for key in _STRING_KEYS & attrs.keys():
        if not isinstance(attrs[key], str):
            bad = attrs.pop(key)
            raise _Bad(f"attribute {key!r} is {bad!r}, expected a string")


@dataclass(slots=True)
class _Span:
    trace_id: str
    span_id: str
    parent_id: str | None
    name: str
    start: int
    end: int | None
    attrs: dict[str, Any]
    error: bool
    status_message: str
    events: list[tuple[str, dict[str, Any]]]
    service: str | None
    line: int | None


def _status(raw: Any) -> tuple[bool, str]:
    if not isinstance(raw, dict):
        return False, ""
    code = raw.get("code")
    is_error = code in (2, "2") or (isinstance(code, str) and code.upper().endswith("ERROR"))
    message = raw.get("message")
    return is_error, message if isinstance(message, str) else ""


def _decode_span(raw: Any, service: str | None, line: int | None) -> tuple[_Span, list[str]]:
    """Decode one span; problems in optional parts are returned, not raised."""
    if not isinstance(raw, dict):
        raise _Bad(f"a span is {type(raw).__name__}, expected an object")
    trace_id = _id(_get(raw, "traceId", "trace_id"), "traceId")
    span_id = _id(_get(raw, "spanId", "span_id"), "spanId")
    if trace_id is None or span_id is None:
        raise _Bad("a span has no traceId or spanId")
    problems: list[str] = []
    try:
        parent = _id(_get(raw, "parentSpanId", "parent_span_id"), "parentSpanId")
    except _Bad as exc:
        problems.append(str(exc))
        parent = None
    try:
        start = _int(_get(raw, "startTimeUnixNano", "start_time_unix_nano") or 0, "start time")
    except _Bad as exc:
        problems.append(str(exc))
        start = 0
    try:
        end_raw = _get(raw, "endTimeUnixNano", "end_time_unix_nano")
        end = None if end_raw in (None, 0, "0") else _int(end_raw, "end time")
    except _Bad as exc:
        problems.append(str(exc))
        end = None
    try:
        attrs = _attributes(raw.get("attributes"))
    except _Bad as exc:
        problems.append(str(exc))
        attrs = {}
    try:
        _check_types(attrs)
    except _Bad as exc:
        problems.append(str(exc))
    events: list[tuple[str, dict[str, Any]]] = []
    raw_events = raw.get("events")
    if isinstance(raw_events, list):
        for ev in raw_events:
            if isinstance(ev, dict):
                try:
                    events.append((str(ev.get("name", "")), _attributes(ev.get("attributes"))))
                except _Bad as exc:
                    problems.append(f"span event: {exc}")
    is_error, message = _status(raw.get("status"))
    name = raw.get("name")
    span = _Span(
        trace_id, span_id, parent, name if isinstance(name, str) else "", start, end, attrs,
        is_error, message, events, service, line,
    )  # fmt: skip
    return span, [f"span {span_id}: {p}" for p in problems]


def _spans_of(obj: Mapping[str, Any]) -> Iterator[tuple[Any, str | None]]:
    """Every raw span of a TracesData document, with its resource's service name."""
    resource_spans = _get(obj, "resourceSpans", "resource_spans")
    if resource_spans is None and ("traceId" in obj or "trace_id" in obj):
        yield obj, None
        return
    if not isinstance(resource_spans, list):
        raise _Bad("resourceSpans is not a list")
    for rs in resource_spans:
        if not isinstance(rs, dict):
            raise _Bad("a resourceSpans entry is not an object")
        service = None
        resource = rs.get("resource")
        if isinstance(resource, dict):
            try:
                svc = _attributes(resource.get("attributes")).get("service.name")
                service = svc if isinstance(svc, str) else None
            except _Bad:
                service = None
        scopes = _get(rs, "scopeSpans", "scope_spans")
        if scopes is None:
            scopes = _get(rs, "instrumentationLibrarySpans", "instrumentation_library_spans")
        if not isinstance(scopes, list):
            raise _Bad("scopeSpans is not a list")
        for scope in scopes:
            spans = scope.get("spans") if isinstance(scope, dict) else None
            if not isinstance(spans, list):
                raise _Bad("a scopeSpans entry has no spans list")
            for span in spans:
                yield span, service


# -- the reader --------------------------------------------------------------------------
class OtlpReader(GroupingReader[_Span]):
    """Streams OTLP JSON into runs (see the module docstring for the mapping)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.conversation_of: OrderedDict[str, str] = OrderedDict()  # trace id -> conversation
        self.problems: dict[str, list[tuple[int | None, str]]] = {}

    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        records = obj if isinstance(obj, list) else [obj]
        for record in records:
            if not isinstance(record, dict):
                yield InputError(self.path, line, "expected an OTLP JSON object")
                continue
            try:
                for raw, service in _spans_of(record):
                    try:
                        span, problems = _decode_span(raw, service, line)
                    except _Bad as exc:
                        yield InputError(self.path, line, f"skipped a span: {exc}")
                        continue
                    self._add(span, problems)
            except _Bad as exc:
                yield InputError(self.path, line, f"not OTLP JSON: {exc}")

    def _add(self, span: _Span, problems: list[str]) -> None:
        conversation = next(
            (c for k in _CONVERSATION_KEYS if isinstance(c := span.attrs.get(k), str) and c),
            None,
        )
        known = self.conversation_of.get(span.trace_id)
        if conversation is not None and known != conversation:
            self.conversation_of[span.trace_id] = conversation
            if len(self.conversation_of) > _ALIASES_MAX:
                self.conversation_of.popitem(last=False)
            # Spans of this trace seen before the conversation id was: move them over.
            earlier = self.groups.take(f"t:{span.trace_id}")
            if earlier is not None:
                for old in earlier.records:
                    self.groups.add(f"c:{conversation}", old, old.line, False)
                moved = self.problems.pop(f"t:{span.trace_id}", None)
                if moved:
                    self.problems.setdefault(f"c:{conversation}", []).extend(moved)
            known = conversation
        key = f"c:{known}" if known is not None else f"t:{span.trace_id}"
        # Conversations span several traces: only idleness (or the end) completes them.
        is_root = span.parent_id is None and known is None
        self.groups.add(key, span, span.line, is_root)
        if problems:
            self.problems.setdefault(key, []).extend((span.line, p) for p in problems)

    def build(self, key: str, spans: list[_Span]) -> Iterator[Item]:
        run_id = key[2:]
        problems = self.problems.pop(key, None)
        if problems:
            line, first = problems[0]
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            yield InputError(self.path, line, f"run {run_id!r}: {first}{more}; read without it")
        has_tool_spans = any(_classify(s.attrs)[0] == "tool" for s in spans)
        nodes = [
            Node(s.span_id, s.parent_id, s.start / 1e9, None if s.end is None else s.end / 1e9,
                 i, s, s.line)
            for i, s in enumerate(spans)
        ]  # fmt: skip

        def emit(node: Node, parent: str | None) -> tuple[list[Any], list[Any], str | None]:
            return _emit(node.data, parent, has_tool_spans)

        events, orphans = assemble(nodes, emit)
        if orphans:
            yield orphan_error(self.path, orphans, run_id)
        meta: dict[str, Any] = {"format": "otlp"}
        service = next((s.service for s in spans if s.service), None)
        if service:
            meta["service"] = service
        if key.startswith("c:"):
            meta["conversation_id"] = run_id
        else:
            meta["trace_id"] = run_id
        first_line = min((s.line for s in spans if s.line is not None), default=None)
        yield TraceRun(run_id, events, meta, {}, self.path, first_line)


# -- mapping spans to events ----------------------------------------------------------------
def _classify(a: Mapping[str, Any]) -> tuple[str | None, str]:
    """(what the span is: tool / model / span / None, its span type)."""
    op = a.get("gen_ai.operation.name")
    op = op.strip().lower() if isinstance(op, str) and op.strip() else None
    kind = a.get("openinference.span.kind")
    kind = kind.strip().upper() if isinstance(kind, str) and kind.strip() else None
    if op in _TOOL_OPS or kind == "TOOL":
        return "tool", "tool"
    if op in _MODEL_OPS or kind == "LLM":
        return "model", "llm"
    if op in _AGENT_OPS or kind == "AGENT":
        return "span", "agent"
    if op is not None:
        return "span", op
    if kind is not None:
        return "span", kind.lower()
    if any(k in a for k in ("gen_ai.completion", "gen_ai.output.messages", "gen_ai.system")):
        return "model", "llm"
    return None, ""


def _first(a: Mapping[str, Any], *keys: str) -> Any:
    for k in keys:
        value = a.get(k)
        if value is not None:
            return value
    return None


def _flattened(a: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Rebuild ``prefix.N.rest`` attributes (OpenInference, OpenLLMetry) into a list."""
    items: dict[int, dict[str, Any]] = {}
    plen = len(prefix) + 1
    for key, value in a.items():
        if not key.startswith(prefix + "."):
            continue
        index, _, rest = key[plen:].partition(".")
        if index.isdigit() and rest:
            items.setdefault(int(index), {})[rest] = value
    return [items[i] for i in sorted(items)]


def _model_output(a: Mapping[str, Any], events: list[tuple[str, dict[str, Any]]]) -> Any:
    found = _first(a, "gen_ai.output.messages", "gen_ai.completion")
    if found is not None:
        return found
    for name, attrs in events:  # older conventions: content in span events
        if name in ("gen_ai.content.completion", "gen_ai.choice") and attrs:
            return _first(attrs, "gen_ai.completion", "message", "body") or ""
    messages = _flattened(a, "llm.output_messages")
    if messages:
        out = []
        for m in messages:
            calls = [
                {"id": c.get("tool_call.id"), "name": c.get("tool_call.function.name"),
                 "arguments": c.get("tool_call.function.arguments"), "type": "tool_call"}
                for c in _flattened(m, "message.tool_calls")
            ]  # fmt: skip
            content = m.get("message.content")
            if content is None:
                parts = _flattened(m, "message.contents")
                content = [{"type": "text", "text": p.get("message_content.text", "")}
                           for p in parts if p.get("message_content.text") is not None]  # fmt: skip
            out.append({"role": m.get("message.role", "assistant"), "content": content,
                        "tool_calls": calls})  # fmt: skip
        return out
    completions = _flattened(a, "gen_ai.completion")
    if completions:
        return [
            {"role": c.get("role", "assistant"), "content": c.get("content"),
             "tool_calls": [{"id": t.get("id"), "name": t.get("name"),
                             "arguments": t.get("arguments"), "type": "tool_call"}
                            for t in _flattened(c, "tool_calls")]}
            for c in completions
        ]  # fmt: skip
    return a.get("output.value")


def _tokens(a: Mapping[str, Any]) -> float | None:
    pairs = (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),
        ("llm.token_count.prompt", "llm.token_count.completion"),
    )
    total = number(_first(a, "llm.token_count.total", "llm.usage.total_tokens"))
    if total is not None:
        return total
    for inp, out in pairs:
        i, o = number(a.get(inp)), number(a.get(out))
        if i is not None or o is not None:
            return (i or 0.0) + (o or 0.0)
    return None


def _with_parent(event: dict[str, Any], parent: str | None) -> dict[str, Any]:
    if parent is not None:
        event["parent"] = parent
    return event


def _emit(
    span: _Span, parent: str | None, has_tool_spans: bool
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    a = span.attrs
    what, span_type = _classify(a)
    if what == "tool":
        name = _first(a, "gen_ai.tool.name", "tool.name")
        if not isinstance(name, str):
            name = span.name.removeprefix("execute_tool ").strip() or span.name
        ident = as_text(_first(a, "gen_ai.tool.call.id", "tool_call.id") or span.span_id)
        args = maybe_json(_first(a, "gen_ai.tool.call.arguments", "input.value", "tool.parameters"))
        failed = span.error or a.get("error.type") is not None
        result = _first(a, "gen_ai.tool.call.result", "output.value")
        if result is None and failed:
            result = span.status_message or next(
                (e.get("exception.message") for n, e in span.events if n == "exception"),
                a.get("error.type"),
            )
        call = _with_parent({"kind": "tool_call", "name": name, "args": args, "id": ident}, parent)
        res: dict[str, Any] = {"kind": "tool_result", "name": name, "id": ident}
        res["text"] = as_text(maybe_json(result)) if not isinstance(result, str) else result
        if failed:
            res["error"] = True
        return [call], [_with_parent(res, parent)], None
    if what == "model":
        text, calls = output_text_and_calls(_model_output(a, span.events))
        event: dict[str, Any] = {"kind": "model", "text": text}
        tokens = _tokens(a)
        if tokens:
            event["tokens"] = tokens
        cost = number(_first(a, "llm.cost.total", "gen_ai.usage.cost"))
        if cost:
            event["cost"] = cost
        agent = _first(a, "gen_ai.agent.name", "agent.name")
        if isinstance(agent, str):
            event["agent"] = agent
        head = [_with_parent(event, parent)]
        if not has_tool_spans:
            for i, c in enumerate(calls):
                ident = c["id"] or f"{span.span_id}.{i}"
                head.append(
                    _with_parent(
                        {"kind": "tool_call", "name": c["name"], "args": c["args"], "id": ident},
                        parent,
                    )
                )
        return head, [], None
    if what == "span":
        name = _first(a, "gen_ai.agent.name", "agent.name") if span_type == "agent" else None
        if not isinstance(name, str):
            name = span.name
            for prefix in ("invoke_agent ", "create_agent "):
                name = name.removeprefix(prefix)
        raw_input = _first(a, "gen_ai.input.messages", "gen_ai.prompt", "input.value")
        ev = {"kind": "span", "name": name, "type": span_type, "id": span.span_id,
              "text": input_text(raw_input) if raw_input is not None else ""}  # fmt: skip
        return [_with_parent(ev, parent)], [], span.span_id
    return [], [], None
