"""Convert native runs into exported-trace formats with the real libraries.

Each native run is first laid out as a plan of spans on a timeline (event i
happens at millisecond i): a tool_call and its tool_result become one tool span
from the call to the result, a model event one model span, a span event an
agent (or other) span enclosing the events that name it as parent. Each format
then records that plan through its own library (OpenTelemetry SDK + OTLP
protobuf encoding, langsmith.schemas.Run, Langfuse API models, the OpenAI
Agents SDK tracing API), so that the fixtures are what those libraries emit.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
import uuid
from dataclasses import dataclass, field
from typing import Any

BASE_NS = 1_700_000_000_000_000_000
STEP_NS = 1_000_000  # one millisecond per native event


class NotConvertible(ValueError):
    """The run uses something the plan cannot express (e.g. a result without a call)."""


@dataclass
class PlanSpan:
    key: str
    kind: str  # tool | model | span
    parent: str | None  # key of the enclosing span
    start: int  # ns
    end: int  # ns
    event: dict[str, Any]
    result: dict[str, Any] | None = None
    children: list[str] = field(default_factory=list)


def plan(run: dict[str, Any]) -> list[PlanSpan]:
    """Lay a native run out as spans on a timeline (see the module docstring)."""
    events = run["events"]
    spans: list[PlanSpan] = []
    by_native_id: dict[str, PlanSpan] = {}
    pending: dict[str, PlanSpan] = {}
    for i, ev in enumerate(events):
        t = BASE_NS + i * STEP_NS
        kind = ev["kind"]
        parent_span = by_native_id.get(ev.get("parent")) if ev.get("parent") else None
        if ev.get("parent") and parent_span is None:
            raise NotConvertible(f"event {i}: parent {ev['parent']!r} is not a span")
        parent = parent_span.key if parent_span else None
        if kind == "tool_call":
            s = PlanSpan(f"n{i}", "tool", parent, t, t, ev)
            pending[ev.get("id") or f"#{ev.get('name')}"] = s
        elif kind == "tool_result":
            s_or_none = pending.pop(ev.get("id") or f"#{ev.get('name')}", None)
            if s_or_none is None:
                raise NotConvertible(f"event {i}: a result without its call")
            s_or_none.result = ev
            s_or_none.end = t
            continue
        elif kind == "model":
            s = PlanSpan(f"n{i}", "model", parent, t, t + STEP_NS // 4, ev)
        elif kind == "span":
            s = PlanSpan(f"n{i}", "span", parent, t, t + STEP_NS // 4, ev)
            by_native_id[ev["id"]] = s
        else:
            raise NotConvertible(f"event {i}: kind {kind!r}")
        spans.append(s)
    if pending:
        raise NotConvertible("a tool call without its result")
    keyed = {s.key: s for s in spans}
    for s in spans:  # an enclosing span lasts until its last descendant ends
        p = s.parent
        while p is not None:
            keyed[p].end = max(keyed[p].end, s.end + STEP_NS // 4)
            p = keyed[p].parent
    return spans


# -- OpenTelemetry ---------------------------------------------------------------------------
def otlp_documents(runs: list[dict[str, Any]], convention: str) -> list[dict[str, Any]]:
    """One OTLP ``ExportTraceServiceRequest`` (as protobuf JSON) per run.

    ``convention``: ``genai`` (current GenAI names), ``genai_old`` (gen_ai.system,
    prompt/completion tokens, gen_ai.prompt / gen_ai.completion) or
    ``openinference``. Spans are made by the OpenTelemetry SDK and encoded by
    the OTLP exporter's protobuf encoder, then ``MessageToJson``.
    """
    from google.protobuf.json_format import MessageToDict
    from opentelemetry import trace as otel_trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter, SpanExportResult
    from opentelemetry.sdk.trace.id_generator import RandomIdGenerator

    class Collect(SpanExporter):
        def __init__(self) -> None:
            self.spans: list[Any] = []

        def export(self, spans: Any) -> SpanExportResult:
            self.spans.extend(spans)
            return SpanExportResult.SUCCESS

    class RunTraceIds(RandomIdGenerator):
        trace_id = 0

        def generate_trace_id(self) -> int:
            return self.trace_id

    ids = RunTraceIds()
    collect = Collect()
    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}), id_generator=ids)
    provider.add_span_processor(SimpleSpanProcessor(collect))
    tracer = provider.get_tracer("loopwatch-tests")
    docs = []
    for n, run in enumerate(runs):
        ids.trace_id = int(uuid.uuid5(uuid.NAMESPACE_URL, run["run_id"]).hex, 16) or n + 1
        collect.spans.clear()
        live: dict[str, Any] = {}
        todo = plan(run)
        for s in todo:
            ctx = otel_trace.set_span_in_context(live[s.parent]) if s.parent else None
            name, attrs = _otel_attributes(s, convention, run["run_id"])
            span = tracer.start_span(name, context=ctx, start_time=s.start, attributes=attrs)
            if convention == "genai_old" and s.kind == "model":
                completion = json.dumps([{"role": "assistant", "content": s.event.get("text", "")}])
                span.add_event("gen_ai.content.completion", {"gen_ai.completion": completion})
            if s.result is not None and s.result.get("error"):
                span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, s.result["text"]))
                if convention == "openinference":
                    span.add_event("exception", {"exception.message": s.result["text"]})
            live[s.key] = span
        for s in sorted(todo, key=lambda s: s.end):  # end in time order, like a real run
            live[s.key].end(end_time=s.end)
        docs.append(MessageToDict(encode_spans(collect.spans)))
    provider.shutdown()
    return docs


def _otel_attributes(s: PlanSpan, convention: str, run_id: str) -> tuple[str, dict[str, Any]]:
    from openinference.semconv.trace import (
        MessageAttributes,
        OpenInferenceSpanKindValues,
        SpanAttributes,
    )

    ev = s.event
    attrs: dict[str, Any] = {}
    if convention == "openinference":
        attrs[SpanAttributes.SESSION_ID] = run_id
        if s.kind == "tool":
            attrs[SpanAttributes.OPENINFERENCE_SPAN_KIND] = OpenInferenceSpanKindValues.TOOL.value
            attrs[SpanAttributes.TOOL_NAME] = ev["name"]
            attrs[SpanAttributes.INPUT_VALUE] = json.dumps(ev.get("args"))
            attrs[SpanAttributes.OUTPUT_VALUE] = s.result["text"] if s.result else ""
            return ev["name"], attrs
        if s.kind == "model":
            attrs[SpanAttributes.OPENINFERENCE_SPAN_KIND] = OpenInferenceSpanKindValues.LLM.value
            prefix = f"{SpanAttributes.LLM_OUTPUT_MESSAGES}.0."
            attrs[prefix + MessageAttributes.MESSAGE_ROLE] = "assistant"
            attrs[prefix + MessageAttributes.MESSAGE_CONTENT] = ev.get("text", "")
            if ev.get("tokens"):
                attrs[SpanAttributes.LLM_TOKEN_COUNT_TOTAL] = int(ev["tokens"])
            if ev.get("cost"):
                attrs[SpanAttributes.LLM_COST_TOTAL] = float(ev["cost"])
            if ev.get("agent"):
                attrs[SpanAttributes.AGENT_NAME] = ev["agent"]
            return "ChatCompletion", attrs
        kinds = {k.value.lower(): k.value for k in OpenInferenceSpanKindValues}
        span_type = ev.get("type") or "chain"
        if span_type in kinds and span_type not in ("tool", "llm"):
            attrs[SpanAttributes.OPENINFERENCE_SPAN_KIND] = kinds[span_type]
        else:  # a type OpenInference has no kind for: the GenAI operation name carries it
            attrs["gen_ai.operation.name"] = span_type
        attrs[SpanAttributes.INPUT_VALUE] = ev.get("text", "")
        if span_type == "agent":
            attrs[SpanAttributes.AGENT_NAME] = ev["name"]
        return ev["name"], attrs

    old = convention == "genai_old"
    if old:
        attrs["gen_ai.system"] = "openai"
    else:
        attrs["gen_ai.provider.name"] = "openai"
        attrs["gen_ai.conversation.id"] = run_id
    if s.kind == "tool":
        attrs["gen_ai.operation.name"] = "execute_tool"
        attrs["gen_ai.tool.name"] = ev["name"]
        attrs["gen_ai.tool.call.id"] = ev.get("id") or s.key
        attrs["gen_ai.tool.call.arguments"] = json.dumps(ev.get("args"))
        if s.result is not None:
            attrs["gen_ai.tool.call.result"] = s.result["text"]
            if s.result.get("error"):
                attrs["error.type"] = "ToolError"
        return f"execute_tool {ev['name']}", attrs
    if s.kind == "model":
        attrs["gen_ai.operation.name"] = "chat"
        if not old:
            attrs["gen_ai.output.messages"] = json.dumps(
                [
                    {
                        "role": "assistant",
                        "parts": [{"type": "text", "content": ev.get("text", "")}],
                        "finish_reason": "stop",
                    }
                ]
            )
        if ev.get("tokens"):
            key = "gen_ai.usage.completion_tokens" if old else "gen_ai.usage.output_tokens"
            attrs[key] = int(ev["tokens"])
        if ev.get("agent"):
            attrs["gen_ai.agent.name"] = ev["agent"]
        return "chat gpt-test", attrs
    span_type = ev.get("type") or "chain"
    text = ev.get("text", "")
    if span_type == "agent":
        attrs["gen_ai.operation.name"] = "invoke_agent"
        attrs["gen_ai.agent.name"] = ev["name"]
        name = f"invoke_agent {ev['name']}"
    else:
        attrs["gen_ai.operation.name"] = span_type
        name = ev["name"]
    if old:
        attrs["gen_ai.prompt"] = text
    else:
        attrs["gen_ai.input.messages"] = json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": text}]}]
        )
    return name, attrs


def otlp_hex(doc: dict[str, Any]) -> dict[str, Any]:
    """The OTLP/JSON spelling of a protobuf-JSON document: hex ids, integer enums and
    int64 numbers (what the OpenTelemetry file exporter writes)."""
    kinds = {"SPAN_KIND_INTERNAL": 1, "SPAN_KIND_SERVER": 2, "SPAN_KIND_CLIENT": 3}
    codes = {"STATUS_CODE_UNSET": 0, "STATUS_CODE_OK": 1, "STATUS_CODE_ERROR": 2}

    def fix(value: Any, key: str = "") -> Any:
        if isinstance(value, dict):
            return {k: fix(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [fix(v) for v in value]
        if key in ("traceId", "spanId", "parentSpanId") and isinstance(value, str):
            return base64.b64decode(value).hex()
        if key == "kind" and isinstance(value, str):
            return kinds.get(value, 0)
        if key == "code" and isinstance(value, str):
            return codes[value]
        if key in ("startTimeUnixNano", "endTimeUnixNano", "timeUnixNano", "intValue"):
            return int(value)
        return value

    fixed: dict[str, Any] = fix(doc)
    return fixed


# -- LangSmith -----------------------------------------------------------------------------
def _dt(ns: int) -> dt.datetime:
    return dt.datetime.fromtimestamp(ns / 1e9, tz=dt.timezone.utc)


def langsmith_runs(run: dict[str, Any]) -> list[Any]:
    """``langsmith.schemas.Run`` objects for one native run (one trace)."""
    from langsmith.schemas import Run

    trace_id = uuid.uuid5(uuid.NAMESPACE_URL, "ls:" + run["run_id"])
    out: list[Run] = []
    ids: dict[str, uuid.UUID] = {}
    dotted: dict[str, str] = {}
    for s in plan(run):
        rid = uuid.uuid5(trace_id, s.key)
        ids[s.key] = rid
        start = _dt(s.start)
        segment = f"{start:%Y%m%dT%H%M%S%fZ}{rid}"
        dotted[s.key] = f"{dotted[s.parent]}.{segment}" if s.parent else segment
        ev = s.event
        common: dict[str, Any] = {
            "id": rid,
            "name": ev.get("name") or "ChatOpenAI",
            "start_time": start,
            "end_time": _dt(s.end),
            "trace_id": trace_id,
            "parent_run_id": ids[s.parent] if s.parent else None,
            "dotted_order": dotted[s.key],
        }
        if s.kind == "tool":
            assert s.result is not None
            error = s.result["text"] if s.result.get("error") else None
            outputs = None if error else {"output": s.result["text"]}
            out.append(
                Run(
                    run_type="tool",
                    inputs=ev.get("args") or {},
                    outputs=outputs,
                    error=error,
                    **common,
                )
            )
        elif s.kind == "model":
            metadata = {"lc_agent_name": ev["agent"]} if ev.get("agent") else {}
            out.append(
                Run(
                    run_type="llm",
                    inputs={"messages": []},
                    name=common.pop("name"),
                    outputs={"generations": [[{"text": ev.get("text", "")}]]},
                    extra={"metadata": metadata},
                    total_tokens=int(ev.get("tokens") or 0) or None,
                    **common,
                )
            )
        else:
            span_type = ev.get("type") or "chain"
            metadata = {"lc_agent_name": ev["name"]} if span_type == "agent" else {}
            run_type = span_type if span_type in ("chain", "retriever", "prompt") else "chain"
            out.append(
                Run(
                    run_type=run_type,
                    inputs={"input": ev.get("text", "")},
                    outputs={},
                    extra={"metadata": metadata},
                    **common,
                )
            )
    return out


def langsmith_dict(r: Any) -> dict[str, Any]:
    return json.loads(r.model_dump_json())  # type: ignore[no-any-return]


# -- Langfuse ------------------------------------------------------------------------------
def langfuse_observations(run: dict[str, Any], *, v3: bool = False) -> list[dict[str, Any]]:
    """Observations of one native run made with Langfuse's API model (``ObservationV2``),
    serialised as the API does (camelCase). v5: ``input``/``output`` as JSON strings;
    v3: structured, with the v3 ``usage`` / ``calculatedTotalCost`` fields."""
    from langfuse.api.commons.types.observation_v2 import ObservationV2

    trace_id = uuid.uuid5(uuid.NAMESPACE_URL, "lf:" + run["run_id"]).hex
    out = []
    for s in plan(run):
        ev = s.event
        kw: dict[str, Any] = {
            "id": f"{trace_id[:8]}-{s.key}",
            "trace_id": trace_id,
            "start_time": _dt(s.start),
            "end_time": _dt(s.end),
            "project_id": "tests",
            "parent_observation_id": f"{trace_id[:8]}-{s.parent}" if s.parent else None,
            "name": ev.get("name") or "llm",
        }
        extra: dict[str, Any] = {}
        if s.kind == "tool":
            assert s.result is not None
            kw.update(type="TOOL", input=ev.get("args"), output=s.result["text"])
            if s.result.get("error"):
                kw.update(level="ERROR", status_message=s.result["text"])
        elif s.kind == "model":
            kw.update(
                type="GENERATION", output={"role": "assistant", "content": ev.get("text", "")}
            )
            if ev.get("agent"):
                kw["metadata"] = {"agent_name": ev["agent"]}
            if ev.get("tokens"):
                kw["usage_details"] = {"total": int(ev["tokens"])}
                extra["usage"] = {"total": int(ev["tokens"]), "unit": "TOKENS"}
            if ev.get("cost"):
                kw["total_cost"] = float(ev["cost"])
                extra["calculatedTotalCost"] = float(ev["cost"])
        else:
            span_type = (ev.get("type") or "span").upper()
            kind = span_type if span_type in ("AGENT", "CHAIN", "RETRIEVER", "SPAN") else "SPAN"
            kw.update(type=kind, input=ev.get("text", ""))
        if not v3:  # the v5 API returns input and output as (JSON) strings
            for k in ("input", "output"):
                if k in kw and not isinstance(kw[k], str):
                    kw[k] = json.dumps(kw[k])
        obs = ObservationV2(**kw).model_dump(mode="json", by_alias=True)
        if v3:
            obs.update(extra)
        out.append(obs)
    return out


def langfuse_trace_v3(run: dict[str, Any]) -> dict[str, Any]:
    """A v3 ``TraceWithFullDetails`` object around the run's observations."""
    observations = langfuse_observations(run, v3=True)
    return {
        "id": observations[0]["traceId"] if observations else run["run_id"],
        "timestamp": _dt(BASE_NS).isoformat(),
        "name": run["run_id"],
        "sessionId": None,
        "htmlPath": "/project/tests/traces/x",
        "latency": 1.0,
        "totalCost": 0.0,
        "observations": observations,
        "scores": [],
    }


# -- OpenAI Agents SDK ---------------------------------------------------------------------
def openai_agents_records(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Trace and span exports of the runs, recorded through the Agents SDK's tracing API
    and collected by a TracingProcessor (what a file-writing processor would write).

    Native model events' ``agent`` is not expressible (generation spans carry no
    agent; the SDK nests them in agent spans), so it is dropped here.
    """
    import agents.tracing as tracing
    from agents.tracing.span_data import AgentSpanData

    collected: list[dict[str, Any]] = []

    class Collector(tracing.TracingProcessor):
        def on_trace_start(self, trace: Any) -> None:
            collected.append(trace.export())

        def on_trace_end(self, trace: Any) -> None:
            pass

        def on_span_start(self, span: Any) -> None:
            pass

        def on_span_end(self, span: Any) -> None:
            exported = span.export()
            if exported:
                collected.append(exported)

        def shutdown(self) -> None:
            pass

        def force_flush(self) -> None:
            pass

    tracing.set_trace_processors([Collector()])
    provider = tracing.get_trace_provider()
    provider.set_disabled(False)  # tracing is process-global: another test may have turned it off
    try:
        for run in runs:
            with tracing.trace(workflow_name=run["run_id"]) as tr:
                live: dict[str, Any] = {}
                todo = plan(run)
                for s in todo:
                    # first finish everything whose end has come, in time order
                    for other in sorted(todo, key=lambda o: o.end):
                        if (
                            other.key in live
                            and other.end <= s.start
                            and not _done(live[other.key])
                        ):
                            _finish(other, live[other.key])
                    parent = live[s.parent] if s.parent else tr
                    ev = s.event
                    if s.kind == "tool":
                        span = tracing.function_span(
                            name=ev["name"], input=json.dumps(ev.get("args")), parent=parent
                        )
                    elif s.kind == "model":
                        usage = (
                            {"input_tokens": 0, "output_tokens": int(ev["tokens"])}
                            if ev.get("tokens")
                            else None
                        )
                        span = tracing.generation_span(
                            output=[{"role": "assistant", "content": ev.get("text", "")}],
                            model="fake",
                            usage=usage,
                            parent=parent,
                        )
                    elif (ev.get("type") or "agent") == "agent":
                        span = provider.create_span(
                            span_data=AgentSpanData(
                                name=ev["name"], metadata={"input": ev.get("text", "")}
                            ),
                            parent=parent,
                        )
                    else:
                        span = tracing.custom_span(
                            name=ev["name"],
                            data={"type": ev.get("type"), "input": ev.get("text", "")},
                            parent=parent,
                        )
                    span.start()
                    live[s.key] = span
                for other in sorted(todo, key=lambda o: o.end):
                    if not _done(live[other.key]):
                        _finish(other, live[other.key])
    finally:
        tracing.set_trace_processors([])
    return collected


def _done(span: Any) -> bool:
    return span.ended_at is not None


def _finish(s: PlanSpan, span: Any) -> None:
    if s.result is not None:
        span.span_data.output = s.result["text"]
        if s.result.get("error"):
            from agents.tracing import SpanError

            span.set_error(SpanError(message=s.result["text"], data=None))
    span.finish()
