"""The OpenTelemetry span processor, on the real SDK and real instrumentations.

The instrumented runs are the exporter fixtures' (tests/helpers/traces_convert.py): the
OpenAI client instrumented by ``opentelemetry-instrumentation-openai-v2`` with
``opentelemetry-util-genai``'s agent and tool spans, the OpenAI Agents SDK by
``opentelemetry-instrumentation-openai-agents-v2``, and OpenInference's smolagents and
LlamaIndex instrumentors, all against scripted models. ``LoopwatchSpanProcessor`` is
added to the provider after the exporter, as a user adds it; the exported spans are
encoded by the real OTLP encoder and read back by ``loopwatch scan``'s reader.

Parity, the claim under test: per run, the events the processor gave its guard are the
ones the reader lists for the exported file, and the verdicts on them are the scan's,
step for step. The thresholds the assertions depend on are pinned
(``RepeatedCall(warn_at=2, stop_at=3)``); parity itself is also checked with the
default detector set, whatever its values.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from frameworks_a import openinference, readme_snippet, run_snippet
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.sdk.trace.id_generator import RandomIdGenerator
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, scan
from loopwatch.detectors import Detector, RepeatedCall
from loopwatch.errors import StoreUnavailable
from loopwatch.integrations.opentelemetry import LoopwatchSpanProcessor, SpanVerdict
from loopwatch.scan import Report
from loopwatch.stores.base import Store
from loopwatch.traces import InputError, TraceRun, otlp_live, read_runs

pytest.importorskip("opentelemetry.instrumentation.openai_v2")

CONFIG = Config()  # the built-in defaults on both sides (parity holds whatever they are)


def pinned() -> list[Detector]:
    return [RepeatedCall(warn_at=2, stop_at=3)]


def search(q: str) -> str:
    return f"Results for {q}: " + "; ".join(f"{q} fact {i}" for i in range(3))


LOOPING: list[tc.Turn] = [[("search", {"q": "paris weather"})] for _ in range(8)]
LOOPING += ["I could not find it."]
HEALTHY: list[tc.Turn] = [[("search", {"q": f"topic {i}"})] for i in range(5)]
HEALTHY += ["Here is what I found."]
TURNS = {"looping": LOOPING, "healthy": HEALTHY}
# the most identical calls a pinned run makes before its stop (3 with the values above;
# generous, as the defaults' "earned stop" may let a first stop-severity sign go)
STOPPED_BY = 5


# -- helpers ---------------------------------------------------------------------------------
@dataclass
class Watch:
    """A processor with a recording guard, its verdicts and its metrics."""

    processor: LoopwatchSpanProcessor
    guard: RecordingGuard
    found: list[SpanVerdict]
    metrics: InMemoryMetricReader
    detectors: Callable[[], list[Detector]] | None

    def live(self) -> dict[str, list[tuple[dict[str, Any], str]]]:
        """run id -> (event, action) as the guard saw them, in order."""
        out: dict[str, list[tuple[dict[str, Any], str]]] = {}
        for run_id, event, verdict in zip(
            self.guard.run_ids, self.guard.events, self.guard.verdicts, strict=True
        ):
            out.setdefault(run_id, []).append((event, verdict.action.value))
        return out

    def counted(self) -> dict[str, Counter[tuple[tuple[str, Any], ...]]]:
        """metric name -> {attributes: value}, read through the SDK's in-memory reader."""
        out: dict[str, Counter[tuple[tuple[str, Any], ...]]] = {}
        data = self.metrics.get_metrics_data()
        for rm in data.resource_metrics if data is not None else ():
            for sm in rm.scope_metrics:
                for metric in sm.metrics:
                    for point in metric.data.data_points:
                        key = tuple(sorted(point.attributes.items()))
                        out.setdefault(metric.name, Counter())[key] += point.value
        return out


def watch(detectors: Callable[[], list[Detector]] | None = None, **kw: Any) -> Watch:
    reader = InMemoryMetricReader()
    guard = RecordingGuard(CONFIG, detectors=detectors() if detectors else None)
    found: list[SpanVerdict] = []
    processor = LoopwatchSpanProcessor(
        guard, meter_provider=MeterProvider(metric_readers=[reader]), on_verdict=found.append, **kw
    )
    return Watch(processor, guard, found, reader, detectors)


def read_back(doc: Any, tmp: Path | None = None) -> list[TraceRun]:
    """An OTLP JSON document as ``loopwatch scan`` reads it from a file."""
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "trace.json"
        path.write_text(json.dumps(doc))
        return [r for r in read_runs(str(path)) if not isinstance(r, InputError)]


def firsts(actions: list[str]) -> tuple[int | None, int | None]:
    warn = next((i for i, a in enumerate(actions) if a != "ok"), None)
    stop = next((i for i, a in enumerate(actions) if a in ("stop", "skip")), None)
    return warn, stop


def assert_parity(w: Watch, doc: Any) -> dict[str, Report]:
    """Each exported run's events are the ones the processor judged, and its verdicts
    the scan's, step for step; returns the scans by run id."""
    runs = read_back(doc)
    live = w.live()
    assert set(live) == {r.run_id for r in runs if r.events}
    reports = {}
    for run in runs:
        judged = live.get(run.run_id, [])
        assert [e for e, _ in judged] == run.events, run.run_id
        report = scan(run.to_dict(), CONFIG, w.detectors() if w.detectors else None)
        replay = Guard(CONFIG, detectors=w.detectors() if w.detectors else None)
        actions = [a for _, a in judged]
        assert actions == [replay.observe(run.run_id, e).action.value for e in run.events]
        assert firsts(actions) == (report.first_warn, report.first_stop)
        reports[run.run_id] = report
    return reports


def calls_before_stop(events: list[dict[str, Any]], report: Report) -> int:
    assert report.first_stop is not None
    return sum(e["kind"] == "tool_call" for e in events[: report.first_stop + 1])


def spans_of(doc: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The spans of an OTLP JSON document, attributes and event attributes as dicts."""

    def plain(attrs: list[dict[str, Any]]) -> dict[str, Any]:
        return {a["key"]: next(iter(a["value"].values()), None) for a in attrs}

    out = []
    for rs in doc["resourceSpans"]:
        for ss in rs["scopeSpans"]:
            for s in ss["spans"]:
                out.append(
                    {
                        **s,
                        "attributes": plain(s.get("attributes", [])),
                        "events": [
                            {"name": e["name"], "attributes": plain(e.get("attributes", []))}
                            for e in s.get("events", [])
                        ],
                    }
                )
    return out


# -- 1. GenAI conventions: the OpenAI client and opentelemetry-util-genai -----------------------
GENAI = {
    "tool spans": {"capture": True, "tool_spans": True},
    "calls in the model's output": {"capture": True},
    "parentless calls": {"capture": True, "agent_span": False},
    "two conversations interleaved": {"capture": True, "agent_span": False, "runs": 2},
}


@pytest.mark.parametrize("shape", list(GENAI))
@pytest.mark.parametrize("turns", list(TURNS))
def test_genai_live_verdicts_equal_the_scan_of_the_export(shape: str, turns: str) -> None:
    """The tool spans' arguments are written when the tool returns (util-genai), the
    calls of a run without tool spans are in the model's output and their results in the
    next request, parentless calls are one run by their messages: in every shape the
    processor judges the events the reader lists, with the scan's verdicts."""
    defaults, strict = watch(), watch(pinned)
    doc = tc.openai_v2_trace(
        TURNS[turns], {"search": search}, processors=[defaults.processor, strict.processor],
        **GENAI[shape],
    )  # fmt: skip
    assert_parity(defaults, doc)
    reports = assert_parity(strict, doc)
    runs = {r.run_id: r for r in read_back(doc)}
    assert len(reports) == GENAI[shape].get("runs", 1)
    if turns == "healthy":
        assert strict.found == []
        assert all(r.verdict == "ok" for r in reports.values())
        return
    for run_id, report in reports.items():
        assert report.verdict == "stop"
        assert calls_before_stop(runs[run_id].events, report) <= STOPPED_BY
        stops = [f for f in strict.found if f.run_id == run_id and f.action == "stop"]
        assert stops and "search" in stops[0].message
        assert stops[0].verdict.findings[0].detector == "repeated_call"
    if GENAI[shape].get("agent_span", True):
        # judged live: each verdict (of both processors) was written on the agent span
        # while it was still open
        (agent,) = [s for s in spans_of(doc) if s["name"].startswith("invoke_agent")]
        written = Counter(e["attributes"]["loopwatch.verdict"] for e in agent["events"])
        assert written == Counter(f.action for f in [*defaults.found, *strict.found])
    assert not strict.processor._stream.traces  # every trace ended: its bookkeeping went


def test_genai_content_not_captured_is_said_once_and_nothing_is_judged_equal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The instrumentation's default captures no message content: the model outputs are
    unknown (no model events, as in the scan), nothing is stopped, and the log says once
    which setting captures them."""
    w = watch(pinned)
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        doc = tc.openai_v2_trace(LOOPING, {"search": search}, processors=[w.processor])
    assert_parity(w, doc)
    assert w.found == []
    notes = [r.getMessage() for r in caplog.records if "not in the spans" in r.getMessage()]
    assert len(notes) == 1
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in notes[0]


def test_a_step_judged_after_its_span_ended_is_an_event_on_the_agent_span() -> None:
    """util-genai writes a tool's arguments when it returns: its call is judged when the
    span has ended, which the SDK no longer lets anyone write on, so the verdict goes on
    the enclosing agent span, still open, as a ``loopwatch.verdict`` event."""
    w = watch(pinned)
    doc = tc.openai_v2_trace(
        LOOPING, {"search": search}, capture=True, tool_spans=True, processors=[w.processor]
    )
    spans = spans_of(doc)
    (agent,) = [s for s in spans if s["attributes"].get("gen_ai.operation.name") == "invoke_agent"]
    tools = {s["spanId"]: s for s in spans if s["name"].startswith("execute_tool")}
    recorded = [e["attributes"] for e in agent["events"] if e["name"] == "loopwatch.verdict"]
    assert [r["loopwatch.verdict"] for r in recorded] == [f.action for f in w.found]
    assert recorded and {r["loopwatch.detector"] for r in recorded} == {"repeated_call"}
    assert all(r["loopwatch.event"] == "tool_call" and r["loopwatch.name"] == "search"
               for r in recorded)  # fmt: skip
    assert all("search" in r["loopwatch.message"] for r in recorded)
    stopped = [r for r in recorded if r["loopwatch.verdict"] == "stop"]
    assert stopped[0]["loopwatch.span_id"] in tools
    assert not any(k.startswith("loopwatch.") for s in tools.values() for k in s["attributes"])
    # what the processor wrote is not read back as a step
    assert_parity(w, doc)


def test_findings_and_stopped_runs_are_counted_by_detector_and_severity() -> None:
    w = watch(pinned)
    tc.openai_v2_trace(
        LOOPING, {"search": search}, capture=True, agent_span=False, runs=2,
        processors=[w.processor],
    )  # fmt: skip
    counted = w.counted()
    expected: Counter[tuple[tuple[str, Any], ...]] = Counter()
    for found in w.found:
        for f in found.verdict.findings:
            expected[(("detector", f.detector), ("severity", f.severity.value))] += 1
    assert counted["loopwatch.findings"] == expected
    assert {dict(k)["severity"] for k in expected} == {"warn", "stop"}
    assert counted["loopwatch.runs.stopped"] == Counter({(("detector", "repeated_call"),): 2})


# -- 2. the OpenAI Agents SDK and its GenAI instrumentation -------------------------------------
def _agents_tools() -> list[Any]:
    pytest.importorskip("agents")
    return tc.agents_tools(search)


AGENTS = {
    "looping": [[("lookup", {"q": "paris weather"})] for _ in range(8)] + ["Done."],
    "healthy": [[("lookup", {"q": f"topic {i}"})] for i in range(5)] + ["Done."],
}


@pytest.mark.parametrize("turns", list(AGENTS))
def test_agents_sdk_live_verdicts_equal_the_scan_of_the_export(turns: str) -> None:
    """The instrumentation names the tool and writes its arguments only when the tool
    returns, and puts a placeholder agent name on every span until the agent ends."""
    pytest.importorskip("opentelemetry.instrumentation.openai_agents")
    defaults, strict = watch(), watch(pinned)
    doc = tc.openai_agents_v2_trace(
        AGENTS[turns], _agents_tools(), processors=[defaults.processor, strict.processor]
    )
    assert_parity(defaults, doc)
    (report,) = assert_parity(strict, doc).values()
    assert report.verdict == ("stop" if turns == "looping" else "ok")
    assert bool(strict.found) is (turns == "looping")


def test_agents_sdk_chat_spans_agent_input_is_unknown_live_and_verdicts_equal() -> None:
    """With chat spans the instrumentation writes the agent span's input messages when
    the agent ends: read at its start, the agent's input is unknown (never compared),
    where the file has it. That is the only difference; the verdicts are the scan's."""
    pytest.importorskip("opentelemetry.instrumentation.openai_agents")
    w = watch()
    doc = tc.openai_agents_v2_trace(
        AGENTS["looping"], _agents_tools(), chat_model=True, processors=[w.processor]
    )
    (run,) = read_back(doc)
    judged = w.live()[run.run_id]
    live_events = [e for e, _ in judged]
    differ = [(a, b) for a, b in zip(live_events, run.events, strict=True) if a != b]
    assert len(differ) == 1
    (live_agent, filed_agent) = differ[0]
    assert live_agent["kind"] == "span" and live_agent["type"] == "agent"
    assert live_agent["unknown"] == ["text"] and filed_agent["text"] == "Research the topic"
    assert {k: v for k, v in live_agent.items() if k != "unknown"} == {
        k: v for k, v in filed_agent.items() if k != "text"
    }
    report = scan(run.to_dict(), CONFIG)
    assert firsts([a for _, a in judged]) == (report.first_warn, report.first_stop)
    assert report.verdict == "stop"


# -- 3. OpenInference ------------------------------------------------------------------------
SEARCHES: list[tc.Turn] = [[("search", {"q": "paris weather"})] for _ in range(6)]
FINAL: list[tc.Turn] = [[("final_answer", {"answer": "It is 18C and cloudy."})]]


def smolagents_search(ran: list[str]) -> Any:
    """A smolagents ``search`` tool that notes each query it runs."""
    from smolagents import tool

    @tool
    def search(q: str) -> str:
        """Search the web.

        Args:
            q: the query
        """
        ran.append(q)
        return "18C cloudy"

    return search


def smolagents_run(processors: list[Any], turns: list[tc.Turn] | None = None) -> tuple[Any, int]:
    """A smolagents ToolCallingAgent traced by OpenInference (the model: smolagents'
    ``OpenAIModel`` on the scripted transport); (the export, calls the tool ran)."""
    pytest.importorskip("openinference.instrumentation.smolagents")
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIModel, ToolCallingAgent
    from smolagents.monitoring import LogLevel

    ran: list[str] = []
    with openinference(SmolagentsInstrumentor(), processors=processors) as exporter:
        model = OpenAIModel("gpt-test", client=tc.fake_openai(turns or [*SEARCHES, *FINAL]))
        agent = ToolCallingAgent(
            tools=[smolagents_search(ran)], model=model, verbosity_level=LogLevel.OFF,
            max_steps=20,
        )  # fmt: skip
        agent.run("Weather in Paris?")
    return tc._otlp_of(exporter.get_finished_spans()), len(ran)


def test_openinference_call_is_judged_at_its_start_and_the_verdict_written_on_it() -> None:
    """OpenInference writes a tool's input when the span starts: the call is judged then,
    the span still open, and the verdict is an attribute of the tool span itself."""
    w = watch(pinned)
    doc, ran = smolagents_run([w.processor])
    assert ran == 6
    (report,) = assert_parity(w, doc).values()
    assert report.verdict == "stop"
    tools = [s for s in spans_of(doc)
             if s["attributes"].get("openinference.span.kind") == "TOOL"
             and s["attributes"].get("tool.name") == "search"]  # fmt: skip
    written = [s["attributes"].get("loopwatch.verdict") for s in tools]
    assert written[0] is None and written[1] == "warn" and "stop" in written[2:STOPPED_BY]
    for s in tools[1:]:
        assert s["attributes"]["loopwatch.detector"] == "repeated_call"
        assert "search" in s["attributes"]["loopwatch.message"]
    calls = [f for f in w.found if f.event["kind"] == "tool_call"]
    assert [f.span_id for f in calls] == [s["spanId"] for s in tools[1:]]
    assert {f.span_name for f in calls} == {"SimpleTool"}


def test_openinference_llama_index_spans_written_at_their_end() -> None:
    """LlamaIndex's instrumentor writes every attribute of a span when it ends: tool and
    model spans are read then, in order, with the scan's verdicts; the workflow steps that
    enclose them cannot be known before they end and are no events live."""
    pytest.importorskip("openinference.instrumentation.llama_index")
    from llama_index.core.agent.workflow import FunctionAgent
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor
    from test_integration_llama_index import Scripted, loops_then_answers

    def search(q: str) -> str:
        """Search the web."""
        return "18C cloudy"

    w = watch(pinned)
    with openinference(LlamaIndexInstrumentor(), processors=[w.processor]) as exporter:
        agent = FunctionAgent(tools=[search], llm=Scripted(loops_then_answers(6)).llm)

        async def main() -> Any:
            return await agent.run("Weather in Paris?")

        asyncio.run(main())
    (run,) = read_back(tc._otlp_of(exporter.get_finished_spans()))
    judged = w.live()[run.run_id]

    def steps(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in e.items() if k != "parent"} for e in events
                if e["kind"] != "span"]  # fmt: skip

    assert steps([e for e, _ in judged]) == steps(run.events)
    report = scan(run.to_dict(), CONFIG, pinned())
    live_stop = firsts([a for _, a in judged])[1]
    assert live_stop is not None and report.first_stop is not None
    # the stop falls on the same step
    assert judged[live_stop][0] | {"parent": None} == run.events[report.first_stop] | {
        "parent": None
    }
    assert len(steps(run.events)) > 12 and len(judged) < len(run.events)


# -- 4. the docs page's snippet: the callback ends the run ---------------------------------------
def test_docs_snippet_cancels_the_run_from_the_callback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """docs/integrations/opentelemetry.md as written: the processor on the provider the
    instrumentor writes to, and ``on_verdict`` interrupting the smolagents agent at the
    stop; the metrics reach the meter provider given."""
    pytest.importorskip("openinference.instrumentation.smolagents")
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIModel, ToolCallingAgent
    from smolagents.monitoring import LogLevel
    from smolagents.utils import AgentError

    monkeypatch.chdir(tmp_path)  # the defaults: no loopwatch.toml around
    reader = InMemoryMetricReader()
    namespace, _ = run_snippet(
        readme_snippet("opentelemetry"), meter_provider=MeterProvider(metric_readers=[reader])
    )
    ran: list[str] = []
    try:
        turns: list[tc.Turn] = [[("search", {"q": "paris weather"})] for _ in range(20)]
        model = OpenAIModel("gpt-test", client=tc.fake_openai(turns))
        agent = ToolCallingAgent(
            tools=[smolagents_search(ran)], model=model, verbosity_level=LogLevel.OFF,
            max_steps=30,
        )  # fmt: skip
        namespace["agent"] = agent
        with pytest.raises(AgentError, match="interrupted"):
            # in a context of its own: the instrumentor leaves the interrupted run's span
            # current, which would make it every later test's parent
            contextvars.copy_context().run(agent.run, "Weather in Paris?")
    finally:
        SmolagentsInstrumentor().uninstrument()
    assert 2 <= len(ran) <= 8, "ended by the stop, not by running out of turns"
    data = reader.get_metrics_data()
    names = {m.name for rm in data.resource_metrics for sm in rm.scope_metrics for m in sm.metrics}
    assert {"loopwatch.findings", "loopwatch.runs.stopped"} <= names
    assert isinstance(namespace["provider"], TracerProvider)


# -- 5. hand-made runs on the real SDK: what an instrumentation may throw at it ----------------
@contextmanager
def sdk(*processors: Any, ids: Any = None) -> Iterator[tuple[Any, InMemorySpanExporter]]:
    """A real TracerProvider: the exporter first, then ``processors``."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider(id_generator=ids) if ids is not None else TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    for p in processors:
        provider.add_span_processor(p)
    try:
        yield provider.get_tracer("tests"), exporter
    finally:
        provider.shutdown()


def tool_call(tracer: Any, name: str, args: Any, result: str, **attrs: Any) -> None:
    """A GenAI ``execute_tool`` span with its arguments at its start."""
    start = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name,
             "gen_ai.tool.call.arguments": json.dumps(args), **attrs}  # fmt: skip
    with tracer.start_as_current_span(f"execute_tool {name}", attributes=start) as span:
        span.set_attribute("gen_ai.tool.call.result", result)


def agent_span(tracer: Any, name: str = "researcher", **attrs: Any) -> Any:
    start = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": name, **attrs}
    return tracer.start_as_current_span(f"invoke_agent {name}", attributes=start)


def test_spans_without_attributes_or_with_odd_ones_are_no_steps_and_break_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    w = watch(pinned)
    with caplog.at_level(logging.WARNING, logger="loopwatch"), sdk(w.processor) as (tracer, out):
        with tracer.start_as_current_span("http GET"), tracer.start_as_current_span("db"):
            pass
        with tracer.start_as_current_span("empty", attributes={}):
            tracer.start_span("never-named").end()
        odd = {"gen_ai.operation.name": 7, "gen_ai.tool.name": ["a", "b"],
               "gen_ai.usage.input_tokens": "many", "session.id": ""}  # fmt: skip
        with agent_span(tracer, **odd):
            tool_call(tracer, "search", {"q": 1}, "r", **{"gen_ai.tool.call.id": 5})
        spans = out.get_finished_spans()
    assert len(spans) == 6, "every span still reached the exporter"
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert_parity(w, tc._otlp_of(spans))


class _Fixed(RandomIdGenerator):
    def generate_trace_id(self) -> int:
        return 0x5EED


def test_a_trace_id_reused_across_runs_keeps_every_step() -> None:
    """An id generator that repeats itself: two agent runs in one trace id. Both are one
    run to the reader; the processor loses no step of either, and its bookkeeping of
    the first went when its root ended."""
    w = watch(pinned)
    with sdk(w.processor, ids=_Fixed()) as (tracer, out):
        for _ in range(2):
            with agent_span(tracer):
                for _ in range(2):
                    tool_call(tracer, "search", {"q": "paris"}, "18C")
            assert not w.processor._stream.traces
        doc = tc._otlp_of(out.get_finished_spans())
    (report,) = assert_parity(w, doc).values()
    ((run_id, judged),) = w.live().items()
    assert run_id == f"{0x5EED:032x}" and len(judged) == 2 * (1 + 2 * 2)
    assert report.verdict == "stop"


def test_a_conversation_id_on_a_later_span_takes_the_trace_into_the_conversation() -> None:
    """The root has no conversation id, the spans inside it have one: the reader moves
    the whole trace into the conversation, and so does the processor, replaying what it
    judged under the trace into the conversation's run (the trace's own run forgotten)."""
    w = watch(pinned)
    with sdk(w.processor) as (tracer, out):
        for _ in range(3):  # three traces of one conversation
            with agent_span(tracer) as root:
                trace_id = f"{root.get_span_context().trace_id:032x}"
                tool_call(tracer, "search", {"q": "paris"}, "18C", **{"session.id": "conv-1"})
        doc = tc._otlp_of(out.get_finished_spans())
    assert set(w.live()) >= {"conv-1"}
    runs = read_back(doc)
    assert [r.run_id for r in runs] == ["conv-1"]
    conversation = [e for r, e in zip(w.guard.run_ids, w.guard.events, strict=True)
                    if r == "conv-1"]  # fmt: skip
    assert conversation[-len(runs[0].events):] == runs[0].events  # fmt: skip
    assert w.guard.state(trace_id) is None
    stops = [f for f in w.found if f.action == "stop"]
    assert stops and stops[0].run_id == "conv-1"


class _Broken(Guard):
    def observe(self, run_id: Any, event: Any) -> Any:
        raise RuntimeError("a bug in loopwatch")


class _Down(Store):
    """A store that is never reachable."""

    def apply(self, run_id: str, fn: Any, factory: Any) -> Any:
        raise StoreUnavailable("connection refused")

    def get(self, run_id: str) -> Any:
        raise StoreUnavailable("connection refused")

    def reset(self, run_id: str) -> None:
        raise StoreUnavailable("connection refused")

    def __len__(self) -> int:
        return 0


@pytest.mark.parametrize("what", ["a bug", "a store that raises", "a callback that raises"])
def test_nothing_reaches_the_sdk_and_every_span_is_exported(
    what: str, caplog: pytest.LogCaptureFixture
) -> None:
    def callback(found: SpanVerdict) -> None:
        raise ValueError("the application's callback failed")

    if what == "a bug":
        processor = LoopwatchSpanProcessor(_Broken(CONFIG))
    elif what == "a store that raises":
        processor = LoopwatchSpanProcessor(
            Guard(CONFIG, detectors=pinned(), store=_Down(), on_store_error="raise")
        )
    else:
        processor = LoopwatchSpanProcessor(Guard(CONFIG, detectors=pinned()), on_verdict=callback)
    with caplog.at_level(logging.ERROR, logger="loopwatch"), sdk(processor) as (tracer, out):
        for _ in range(3):
            with agent_span(tracer):
                for _ in range(4):
                    tool_call(tracer, "search", {"q": "paris"}, "18C")
        assert len(out.get_finished_spans()) == 3 * 5
    errors = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, "logged once per kind of error"
    assert "the span goes on" in errors[0].getMessage()


def test_bookkeeping_goes_when_traces_end_and_is_bounded_when_they_never_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(otlp_live, "_TRACES_MAX", 5)
    monkeypatch.setattr(otlp_live, "_RUNS_MAX", 8)
    w = watch(pinned)
    stream = w.processor._stream
    with sdk(w.processor) as (tracer, _):
        for _ in range(20):
            with agent_span(tracer):
                tool_call(tracer, "search", {"q": "paris"}, "18C")
        assert not stream.traces and len(stream.runs) <= 8
        leaked = [tracer.start_span("invoke_agent x", attributes={
            "gen_ai.operation.name": "invoke_agent"}) for _ in range(20)]  # fmt: skip
        assert len(stream.traces) <= 5 and len(stream.runs) <= 8
        for span in leaked:  # ending spans the stream let go of is no error either
            span.end()
        assert not stream.traces


def test_a_trace_that_never_ends_keeps_being_read_within_its_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A session's root span open for the server's life: its ended spans are forgotten
    when the bound is reached, and the steps after that are still judged."""
    monkeypatch.setattr(otlp_live, "_SPANS_MAX", 10)
    w = watch(pinned)
    with sdk(w.processor) as (tracer, _), agent_span(tracer):
        for _ in range(30):
            tool_call(tracer, "search", {"q": "paris"}, "18C")
        (trace,) = w.processor._stream.traces.values()
        assert len(trace.spans) <= 10
    assert len(w.guard.events) == 1 + 30 * 2
    assert [f.action for f in w.found][-1] == "stop"


def test_concurrent_runs_on_threads_each_equal_their_scan() -> None:
    w = watch(pinned)
    with sdk(w.processor) as (tracer, out):

        def agent(n: int) -> None:
            with agent_span(tracer, name=f"agent-{n}"):
                for i in range(6):
                    tool_call(tracer, "search", {"q": "paris" if n % 2 else f"q{i}"}, "18C")

        threads = [threading.Thread(target=agent, args=(n,)) for n in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        doc = tc._otlp_of(out.get_finished_spans())
    reports = assert_parity(w, doc)
    assert sorted(r.verdict for r in reports.values()) == ["ok"] * 3 + ["stop"] * 3


def test_without_a_meter_provider_it_judges_and_shutdown_lets_go() -> None:
    processor = LoopwatchSpanProcessor(detectors=pinned())
    with sdk(processor) as (tracer, _):
        with agent_span(tracer):
            for _ in range(4):
                tool_call(tracer, "search", {"q": "paris"}, "18C")
        assert processor.guard.store and len(processor.guard.store) == 1
    # the provider's shutdown shut the processor down: its state and its guard's are gone
    assert not processor._stream.runs


# -- 6. any run of agent, model and tool spans: the live verdicts are the scan's ---------------
_NAMES = st.sampled_from(["search", "fetch"])
_ARGS = st.fixed_dictionaries({"q": st.sampled_from(["paris", "rome", "oslo"])})
_TEXT = st.sampled_from(["18C", "cloudy", "no result", ""])


def tool_steps(draw: Any, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"kind": "tool", "name": name, "args": args, "result": draw(_TEXT),
            "error": draw(st.booleans()), "late": draw(st.booleans())}  # fmt: skip


@st.composite
def agent_runs(draw: Any, depth: int = 0) -> dict[str, Any]:
    """An agent's steps: model turns, each followed by the tools it asked for (as an
    agent loop runs them), tools run by the program itself, sub-agents."""
    steps: list[Any] = []
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["tool", "model", "agent"] if depth < 1 else ["tool", "model"]))
        if kind == "tool":
            steps.append(tool_steps(draw, draw(_NAMES), draw(_ARGS)))
        elif kind == "model":
            calls = draw(st.lists(st.tuples(_NAMES, _ARGS), max_size=2))
            steps.append({"kind": "model", "text": draw(_TEXT), "calls": calls})
            steps += [tool_steps(draw, name, args) for name, args in calls]
        else:
            steps.append({"kind": "agent", **draw(agent_runs(depth + 1))})
    return {"name": draw(st.sampled_from(["planner", "worker"])), "steps": steps}


def _play(tracer: Any, run: dict[str, Any], oi: bool, tool_spans: bool, n: list[int]) -> None:
    """Write a run's spans as a GenAI or OpenInference instrumentation would: kinds at
    the start, values at the start or the end."""
    if oi:
        start = {"openinference.span.kind": "AGENT", "agent.name": run["name"],
                 "input.value": f"task of {run['name']}"}  # fmt: skip
    else:
        start = {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": run["name"],
                 "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                     {"type": "text", "content": f"task of {run['name']}"}]}])}  # fmt: skip
    with tracer.start_as_current_span(f"invoke_agent {run['name']}", attributes=start):
        for step in run["steps"]:
            n[0] += 1
            if step["kind"] == "agent":
                _play(tracer, step, oi, tool_spans, n)
            elif step["kind"] == "tool" and tool_spans:
                _tool(tracer, step, oi, n[0])
            elif step["kind"] == "model":
                _model(tracer, step, oi, tool_spans, n[0])


def _tool(tracer: Any, step: dict[str, Any], oi: bool, n: int) -> None:
    args = json.dumps(step["args"])
    if oi:
        start: dict[str, Any] = {"openinference.span.kind": "TOOL", "tool.name": step["name"]}
        arg_key, result_key = "input.value", "output.value"
    else:
        start = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": step["name"],
                 "gen_ai.tool.call.id": f"call-{n}"}  # fmt: skip
        arg_key, result_key = "gen_ai.tool.call.arguments", "gen_ai.tool.call.result"
    if not step["late"]:
        start[arg_key] = args
    with tracer.start_as_current_span(step["name"], attributes=start) as span:
        if step["late"]:
            span.set_attribute(arg_key, args)
        span.set_attribute(result_key, step["result"])
        if step["error"]:
            span.set_status(otel_trace.Status(otel_trace.StatusCode.ERROR, "failed"))


def _model(tracer: Any, step: dict[str, Any], oi: bool, tool_spans: bool, n: int) -> None:
    calls = step["calls"]  # events only in a run without tool spans (the reader's rule)
    if oi:
        with tracer.start_as_current_span(
            "llm", attributes={"openinference.span.kind": "LLM"}
        ) as span:
            p = "llm.output_messages.0.message."
            span.set_attribute(p + "role", "assistant")
            span.set_attribute(p + "content", step["text"])
            for i, (name, args) in enumerate(calls):
                c = f"{p}tool_calls.{i}.tool_call."
                span.set_attribute(c + "id", f"c{n}.{i}")
                span.set_attribute(c + "function.name", name)
                span.set_attribute(c + "function.arguments", json.dumps(args))
        return
    parts: list[dict[str, Any]] = [{"type": "text", "content": step["text"]}]
    parts += [{"type": "tool_call", "id": f"c{n}.{i}", "name": name, "arguments": args}
              for i, (name, args) in enumerate(calls)]  # fmt: skip
    with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}) as span:
        span.set_attribute("gen_ai.output.messages",
                           json.dumps([{"role": "assistant", "parts": parts}]))  # fmt: skip


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(runs=st.lists(agent_runs(), min_size=1, max_size=3), oi=st.booleans(),
       tool_spans=st.booleans())  # fmt: skip
def test_any_run_written_as_it_happens_is_judged_like_its_export(
    runs: list[dict[str, Any]], oi: bool, tool_spans: bool
) -> None:
    """Agent, model and tool spans in any order and nesting, values written at a span's
    start or end, tool calls in tool spans or only in the model's output: the live events
    and verdicts are the scan's of the export."""
    w = watch(pinned)
    with sdk(w.processor) as (tracer, out):
        n = [0]
        for run in runs:
            _play(tracer, run, oi, tool_spans, n)
        doc = tc._otlp_of(out.get_finished_spans())
    assert_parity(w, doc)
    assert not w.processor._stream.traces
