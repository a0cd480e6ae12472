"""Langfuse exports: v3 traces with their observations, and v5 (v2 API) observations.

Input: ``TraceWithFullDetails`` objects (``GET /api/public/traces/{id}``: a
trace with an ``observations`` list), observation objects one per line, or an
API page ``{"data": [...], "meta": {...}}`` of either. ``input`` / ``output``
strings holding JSON are decoded (the v5 API returns them as strings). One run
per trace; the tree comes from ``parentObservationId``. The mapping:

* ``TOOL``: a ``tool_call`` (arguments: the input) and, when it ends, a
  ``tool_result`` (the output; failed when ``level`` is ``ERROR``);
* ``GENERATION``: a ``model`` event (the output's text; tokens from
  ``usageDetails`` / ``usage``, cost from ``totalCost`` / ``costDetails`` /
  ``calculatedTotalCost``; the agent from ``metadata.agent_name``);
* ``AGENT``, ``SPAN``, ``CHAIN``, ``RETRIEVER``, ... : a ``span`` of that type
  (lowercased) whose text is the input;
* ``EVENT`` (a point-in-time log line): no event, but it stays in the tree.

Absent is not equal (docs/FORMAT.md, ``unknown``). The observations API returns
``input`` and ``output`` only when asked (``fields=...,io``); without them, and
for observations recorded without input or output, a ``null`` or missing value
is not captured, not empty: a tool call gets no ``args`` and
``"unknown": ["args"]``, a result or span input no ``text`` and
``"unknown": ["text"]``, and a generation without output gives no model event
(an empty one would read as the model saying nothing). ``meta["unknown"]``
counts what was missing and one ``InputError`` line per run says so.
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
    call_input,
    input_text,
    maybe_json,
    missing_note,
    number,
    orphan_error,
    output_text_and_calls,
    parse_time,
)
from .base import InputError, TraceRun

__all__ = ["LangfuseReader", "looks_like"]

_AGENT_KEYS = ("agent_name", "agent", "lc_agent_name")
_OBSERVATION_TYPES = frozenset(
    {"SPAN", "GENERATION", "EVENT", "AGENT", "TOOL", "CHAIN", "RETRIEVER", "EVALUATOR",
     "EMBEDDING", "GUARDRAIL"}
)  # fmt: skip


def _is_observation(obj: Any) -> bool:
    return (
        isinstance(obj, dict)
        and "id" in obj
        and ("traceId" in obj or "trace_id" in obj)
        and str(obj.get("type", "")).upper() in _OBSERVATION_TYPES
    )


def _is_trace(obj: Any) -> bool:
    return isinstance(obj, dict) and "id" in obj and isinstance(obj.get("observations"), list)


_Record = tuple[Mapping[str, Any], int | None]  # (record, line)
_HINT = (
    "fetch observations with their input and output (the observations API's "
    "fields=core,basic,io,usage,metadata; its default leaves them out)"
)


def looks_like(obj: Any) -> bool:
    """True for a Langfuse trace with observations, an observation, or an API page of them."""
    if isinstance(obj, list):
        return bool(obj) and looks_like(obj[0])
    if isinstance(obj, dict) and isinstance(obj.get("data"), list) and "meta" in obj:
        return bool(obj["data"]) and looks_like(obj["data"][0])
    return _is_trace(obj) or _is_observation(obj)


def _field(obs: Mapping[str, Any], camel: str, snake: str) -> Any:
    value = obs.get(camel)
    return obs.get(snake) if value is None else value


class LangfuseReader(GroupingReader[_Record]):
    """Streams Langfuse traces / observations into runs, one per trace."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.trace_meta: dict[str, dict[str, Any]] = {}

    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        if isinstance(obj, dict) and isinstance(obj.get("data"), list) and "meta" in obj:
            obj = obj["data"]
        for record in obj if isinstance(obj, list) else [obj]:
            if _is_trace(record):
                yield from self._trace(record, line)
            elif _is_observation(record):
                trace = str(_field(record, "traceId", "trace_id"))
                parent = _field(record, "parentObservationId", "parent_observation_id")
                self.groups.add(trace, (record, line), line, parent is None)
            else:
                yield InputError(
                    self.path, line, "skipped a record that is not a Langfuse trace or observation"
                )

    def _trace(self, trace: Mapping[str, Any], line: int | None) -> Iterator[Item]:
        """A whole trace in one record: a run of its own, no need to wait for more."""
        key = str(trace["id"])
        meta: dict[str, Any] = {}
        for k in ("name", "sessionId", "userId"):
            if isinstance(trace.get(k), str):
                meta[k] = trace[k]
        self.trace_meta[key] = meta
        buffered = self.groups.take(key)
        records = buffered.records if buffered is not None else []
        for obs in trace["observations"]:
            if _is_observation(obs):
                records.append((obs, line))
            else:
                yield InputError(self.path, line, f"trace {key!r}: skipped a malformed observation")
        yield from self.build(key, records)

    def build(self, key: str, records: list[_Record]) -> Iterator[Item]:
        nodes: list[Node] = []
        for i, (obs, line) in enumerate(records):
            start = parse_time(_field(obs, "startTime", "start_time"))
            end = parse_time(_field(obs, "endTime", "end_time"))
            parent = _field(obs, "parentObservationId", "parent_observation_id")
            nodes.append(
                Node(str(obs["id"]), None if parent is None else str(parent), start or 0.0, end, i,
                     obs, line)
            )  # fmt: skip
        missing: dict[str, int] = {}

        def emit(node: Node, parent: str | None) -> tuple[list[Any], list[Any], str | None]:
            return _emit(node, parent, missing)

        events, orphans = assemble(nodes, emit)
        if orphans:
            yield orphan_error(self.path, orphans, key)
        meta: dict[str, Any] = {"format": "langfuse", "trace_id": key}
        meta.update(self.trace_meta.pop(key, {}))
        if missing:
            meta["unknown"] = dict(sorted(missing.items()))
        lines = [ln for _, ln in records if ln is not None]
        first = min(lines) if lines else None
        note = missing_note(key, missing, len(events), len(records), _HINT)
        if note is not None:
            yield InputError(self.path, first, note)
        yield TraceRun(key, events, meta, {}, self.path, first)


def _tokens(obs: Mapping[str, Any]) -> float | None:
    details = _field(obs, "usageDetails", "usage_details")
    usage = obs.get("usage")
    for source in (details, usage):
        if isinstance(source, dict):
            total = number(source.get("total"))
            if total is not None:
                return total
            i = number(source.get("input", source.get("promptTokens")))
            o = number(source.get("output", source.get("completionTokens")))
            if i is not None or o is not None:
                return (i or 0.0) + (o or 0.0)
    return number(_field(obs, "totalTokens", "total_tokens"))


def _cost(obs: Mapping[str, Any]) -> float | None:
    names = (("totalCost", "total_cost"), ("calculatedTotalCost", "calculated_total_cost"))
    for camel, snake in names:
        value = number(_field(obs, camel, snake))
        if value is not None:
            return value
    details = _field(obs, "costDetails", "cost_details")
    if isinstance(details, dict):
        return number(details.get("total"))
    return None


def _count(missing: dict[str, int], what: str) -> None:
    missing[what] = missing.get(what, 0) + 1


def _emit(
    node: Node, parent: str | None, missing: dict[str, int]
) -> tuple[list[Any], list[Any], str | None]:
    obs: Mapping[str, Any] = node.data
    kind = str(obs.get("type", "SPAN")).upper()
    name = as_text(obs.get("name"))

    def at(event: dict[str, Any]) -> dict[str, Any]:
        if parent is not None:
            event["parent"] = parent
        return event

    if kind == "TOOL":
        output = maybe_json(obs.get("output"))
        failed = str(obs.get("level", "")).upper() == "ERROR"
        if output is None and failed:
            output = _field(obs, "statusMessage", "status_message")
        result = at({"kind": "tool_result", "name": name, "id": node.id})
        if output is None:
            _count(missing, "tool_results")
            result["unknown"] = ["text"]
        elif media_only(output):
            result["unknown"] = ["text"]  # a screenshot: the screen is the result
        else:
            result["text"] = as_text(output)
        if failed:
            result["error"] = True
        call = at({"kind": "tool_call", "name": name, "id": node.id})
        args = call_input(obs.get("input"))
        if args is None:
            _count(missing, "tool_args")
            call["unknown"] = ["args"]
        else:
            call["args"] = args
        return [call], [result], None
    if kind == "GENERATION":
        if obs.get("output") is None:
            _count(missing, "model_text")
            return [], [], None
        text, _calls = output_text_and_calls(obs.get("output"))
        event: dict[str, Any] = {"kind": "model", "text": text}
        tokens, cost = _tokens(obs), _cost(obs)
        if tokens:
            event["tokens"] = tokens
        if cost:
            event["cost"] = cost
        meta = obs.get("metadata")
        if isinstance(meta, dict):
            agent = next((meta[k] for k in _AGENT_KEYS if isinstance(meta.get(k), str)), None)
            if agent is not None:
                event["agent"] = agent
        return [at(event)], [], None
    if kind == "EVENT":
        return [], [], None
    raw = obs.get("input")
    span = at({"kind": "span", "name": name, "type": kind.lower(), "id": node.id})
    if raw is None:
        _count(missing, "span_inputs")
        span["unknown"] = ["text"]
    else:
        span["text"] = input_text(call_input(raw))
    return [span], [], node.id
