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
from collections.abc import Sequence
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


def langsmith_runs(run: dict[str, Any], *, hide: bool = False) -> list[Any]:
    """``langsmith.schemas.Run`` objects for one native run (one trace).

    ``hide``: inputs and outputs as a LangSmith client made with ``hide_inputs=True,
    hide_outputs=True`` (what ``LANGSMITH_HIDE_INPUTS`` / ``_OUTPUTS`` do) records them.
    """
    from langsmith.schemas import Run

    if hide:
        from langsmith import Client

        client = Client(
            api_url="http://127.0.0.1:9",
            api_key="test",
            hide_inputs=True,
            hide_outputs=True,
            auto_batch_tracing=False,  # nothing is sent: only its hiding is used
            info={},  # no server to ask
        )
        return [
            r.model_copy(
                update={
                    "inputs": client._hide_run_inputs(r.inputs),
                    "outputs": None if r.outputs is None else client._hide_run_outputs(r.outputs),
                }
            )
            for r in langsmith_runs(run)
        ]

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
# The observations API's field groups (GET /api/public/v2/observations?fields=...)
LANGFUSE_FIELD_GROUPS = {
    "core": {"id", "trace_id", "start_time", "end_time", "project_id", "parent_observation_id",
             "type"},
    "basic": {"name", "level", "status_message"},
    "io": {"input", "output"},
    "metadata": {"metadata"},
    "usage": {"usage_details", "cost_details", "total_cost"},
}  # fmt: skip


def langfuse_observations(
    run: dict[str, Any], *, v3: bool = False, fields: tuple[str, ...] | None = None
) -> list[dict[str, Any]]:
    """Observations of one native run made with Langfuse's API model (``ObservationV2``),
    serialised as the API does (camelCase). v5: ``input``/``output`` as JSON strings;
    v3: structured, with the v3 ``usage`` / ``calculatedTotalCost`` fields.

    ``fields``: the field groups requested from the observations API (its default is
    ``("core", "basic")``); only those fields are set, and the model's own ``.json()``
    (which leaves unset fields out) serialises them."""
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
        if fields is not None:
            keep = set().union(*(LANGFUSE_FIELD_GROUPS[g] for g in fields))
            model = ObservationV2(**{k: v for k, v in kw.items() if k in keep})
            out.append(json.loads(model.json()))
            continue
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


# -- real instrumentations ------------------------------------------------------------------
# The fixtures below are recorded by the instrumentation packages themselves, driving the
# real clients and SDKs against scripted fake models (an httpx transport that answers
# like the OpenAI API, or the Agents SDK's ScriptedModel): nothing leaves the process.
Turn = list[tuple[str, dict[str, Any]]] | str  # tool calls (name, args), or a final answer


def _otel_collector(processors: Sequence[Any] = ()) -> tuple[Any, Any]:
    """A TracerProvider whose finished spans land in a list; (provider, exporter).
    ``processors``: span processors added after the exporting one (where a user adds
    loopwatch's)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for processor in processors:
        provider.add_span_processor(processor)
    return provider, exporter


def _otlp_of(spans: Any) -> dict[str, Any]:
    """Finished SDK spans as the OTLP file exporter's JSON (hex ids, integer enums)."""
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return otlp_hex(MessageToDict(encode_spans(spans)))


def fake_openai(turns: list[Turn], id_style: str = "call_", *, asynchronous: bool = False) -> Any:
    """An ``openai.OpenAI`` (or ``AsyncOpenAI``) client whose transport answers each chat
    completion with the next scripted turn (tool calls or a final answer), like the
    OpenAI API would."""
    import httpx
    import openai

    transport = openai_transport(turns, id_style)
    if asynchronous:
        return openai.AsyncOpenAI(
            api_key="test",
            base_url="http://127.0.0.1:9/v1",
            http_client=httpx.AsyncClient(transport=transport),
            max_retries=0,
        )
    return openai.OpenAI(
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.Client(transport=transport),
        max_retries=0,
    )


def openai_transport(turns: list[Turn], id_style: str = "call_") -> Any:
    """An ``httpx`` transport that answers each chat completion with the next scripted
    turn (tool calls or a final answer), like the OpenAI API would: for clients that
    build their own ``openai`` client from an ``http_client``."""
    import httpx

    state = {"n": 0, "calls": 0}

    def answer(request: httpx.Request) -> httpx.Response:
        turn = turns[min(state["n"], len(turns) - 1)]
        state["n"] += 1
        if isinstance(turn, str):
            message: dict[str, Any] = {"role": "assistant", "content": turn}
            finish = "stop"
        else:
            calls = []
            for name, args in turn:
                state["calls"] += 1
                ident = f"{id_style}{uuid.uuid5(uuid.NAMESPACE_URL, str(state['calls'])).hex[:24]}"
                calls.append(
                    {"id": ident, "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}
                )  # fmt: skip
            message = {"role": "assistant", "content": None, "tool_calls": calls}
            finish = "tool_calls"
        return httpx.Response(
            200,
            json={
                "id": f"chatcmpl-{state['n']}", "object": "chat.completion", "created": 1,
                "model": "gpt-test",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 40, "completion_tokens": 12, "total_tokens": 52},
            },
        )  # fmt: skip

    return httpx.MockTransport(answer)


def openai_v2_trace(
    turns: list[Turn],
    tools: dict[str, Any],
    *,
    capture: bool = False,
    agent_span: bool = True,
    tool_spans: bool = False,
    runs: int = 1,
    processors: Sequence[Any] = (),
) -> dict[str, Any]:
    """An agent loop over the OpenAI client instrumented by
    ``opentelemetry-instrumentation-openai-v2``, as one OTLP document.

    ``capture``: message content captured on spans (the instrumentation's default is
    not to). ``agent_span``: the loop runs inside an ``invoke_agent`` span and
    ``tool_spans``: each tool inside an ``execute_tool`` span, both made with
    ``opentelemetry-util-genai``'s handler (what agent frameworks' instrumentations
    use); without ``agent_span`` every model call is a trace of its own.
    ``runs``: how many times the whole conversation is run (interleaved call by call).
    ``processors``: more span processors on the provider (see :func:`_otel_collector`).
    """
    import os

    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.util.genai.handler import TelemetryHandler

    env = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
    saved = os.environ.pop(env, None)
    if capture:
        os.environ[env] = "span_only"
    provider, exporter = _otel_collector(processors)
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        handler = TelemetryHandler(tracer_provider=provider)
        states = []
        for r in range(runs):
            client = fake_openai(turns)
            messages: list[Any] = [{"role": "user", "content": f"Research task {r}: find facts"}]
            agent = handler.invoke_local_agent(agent_name="researcher") if agent_span else None
            states.append({"client": client, "messages": messages, "agent": agent, "done": False})
        while not all(s["done"] for s in states):
            for s in states:
                if not s["done"]:
                    _one_turn(s, tools, handler, tool_spans)
        for s in states:
            if s["agent"] is not None:
                s["agent"].stop()
    finally:
        instrumentor.uninstrument()
        os.environ.pop(env, None)
        if saved is not None:
            os.environ[env] = saved
    doc = _otlp_of(exporter.get_finished_spans())
    provider.shutdown()
    return doc


def _one_turn(state: dict[str, Any], tools: dict[str, Any], handler: Any, tool_spans: bool) -> None:
    from opentelemetry import context as otel_context
    from opentelemetry import trace as otel_trace

    agent = state["agent"]
    token = (
        otel_context.attach(otel_trace.set_span_in_context(agent.span))
        if agent is not None
        else None
    )
    try:
        reply = state["client"].chat.completions.create(
            model="gpt-test",
            messages=state["messages"],
            tools=[
                {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}
                for n in tools
            ],
        )
        message = reply.choices[0].message
        state["messages"].append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            state["done"] = True
            return
        for call in message.tool_calls:
            args = json.loads(call.function.arguments)
            if tool_spans:
                with handler.tool(call.function.name, tool_call_id=call.id) as inv:
                    result = tools[call.function.name](**args)
                    inv.arguments = args
                    inv.tool_result = result
            else:
                result = tools[call.function.name](**args)
            state["messages"].append({"role": "tool", "tool_call_id": call.id, "content": result})
    finally:
        if token is not None:
            otel_context.detach(token)


def agents_tools(search: Any) -> list[Any]:
    """The Agents SDK function tool ``lookup(q)``, answering with ``search(q)``."""
    import agents

    @agents.function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return str(search(q))

    return [lookup]


def openai_agents_v2_trace(
    turns: list[Turn],
    tools: list[Any],
    *,
    chat_model: bool = False,
    processors: Sequence[Any] = (),
) -> dict[str, Any]:
    """An OpenAI Agents SDK run recorded by
    ``opentelemetry-instrumentation-openai-agents-v2``, as one OTLP document.

    The SDK's ScriptedModel answers (no model spans), or, with ``chat_model``, its
    ``OpenAIChatCompletionsModel`` over the fake OpenAI client (chat spans too).
    ``processors``: more span processors on the provider (see :func:`_otel_collector`).
    """
    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from agents.testing import ScriptedModel, assistant_message, function_call
    from agents.tracing import set_trace_processors
    from opentelemetry.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    provider, exporter = _otel_collector(processors)
    instrumentor = OpenAIAgentsInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    n = 0
    steps: list[Any] = []
    for turn in turns:
        if isinstance(turn, str):
            steps.append([assistant_message(turn)])
            continue
        calls = []
        for name, args in turn:
            n += 1
            calls.append(function_call(name, args, call_id=f"call_{n}"))
        steps.append(calls)
    model: Any = ScriptedModel(steps)
    if chat_model:
        client = fake_openai(turns, asynchronous=True)
        model = OpenAIChatCompletionsModel(model="gpt-test", openai_client=client)
    try:
        agent = Agent(name="researcher", model=model, tools=tools)
        Runner.run_sync(agent, "Research the topic", max_turns=len(turns) + 2)
    finally:
        instrumentor.uninstrument()
        set_trace_processors([])  # the SDK's default processor would try to upload
    doc = _otlp_of(exporter.get_finished_spans())
    provider.shutdown()
    return doc


def langfuse_v5_trace(turns: list[Turn], tools: dict[str, Any]) -> dict[str, Any]:
    """An agent written with the Langfuse Python SDK v5's ``@observe`` (agent,
    generation and tool observations), its spans written through ``span_exporter=``
    (what a user does to keep them in a file), as one OTLP document."""
    from langfuse import Langfuse, observe

    provider, exporter = _otel_collector()
    del provider  # Langfuse builds its own provider around the exporter
    key = f"pk-lf-{uuid.uuid4().hex}"  # a client per key: each fixture gets a fresh one
    client = Langfuse(
        public_key=key,
        secret_key="sk-lf-test",
        base_url="http://127.0.0.1:9",
        span_exporter=exporter,
        flush_at=1,
    )
    wrapped = {name: observe(as_type="tool", name=name)(fn) for name, fn in tools.items()}

    @observe(as_type="generation", name="llm")
    def llm(turn: Turn) -> Any:
        if isinstance(turn, str):
            return {"role": "assistant", "content": turn}
        return {"role": "assistant", "content": f"Calling {', '.join(n for n, _ in turn)}."}

    @observe(as_type="agent", name="researcher")
    def agent(task: str) -> str:
        for turn in turns:
            llm(turn, langfuse_public_key=key)
            if isinstance(turn, str):
                return turn
            for name, args in turn:
                wrapped[name](**args, langfuse_public_key=key)
        return "out of turns"

    agent("Research the topic", langfuse_public_key=key)
    client.flush()
    doc = _otlp_of(exporter.get_finished_spans())
    client.shutdown()
    return doc
