"""Decoding OTLP JSON into spans: ids in hex or base64, enums as integers or names,
int64 as strings or numbers, lowerCamelCase or snake_case field names, typed
attribute values. What the spans mean (GenAI, OpenInference, Langfuse) is
:mod:`loopwatch.traces.otlp`'s business; this module only reads their shape."""

from __future__ import annotations

import base64
import binascii
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from ._common import number

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
        "langfuse.observation.type",
    }
)  # fmt: skip


def _get(obj: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


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
    # attributes the instrumentation wrote as a redaction placeholder (see otlp.py): taken
    # out of ``attrs``, remembered by key so that a hidden output is not read as empty
    hidden: frozenset[str] = frozenset()


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
