"""Traces recorded by the real instrumentations, read and scanned as users would.

Each fixture is made by the exporter's own package driving a real client or SDK
against a scripted fake model (tests/helpers/traces_convert.py): the OpenAI client
instrumented by ``opentelemetry-instrumentation-openai-v2``, the Agents SDK by
``opentelemetry-instrumentation-openai-agents-v2``, an agent written with the
Langfuse SDK v5, and Langfuse API observations fetched with the API's default
fields. The cases are the ones of issue 14: healthy runs that read as loops
because a value the trace does not carry was read as empty, and looping runs
that read as nothing.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwatch import Config, scan
from loopwatch.traces import InputError, TraceRun, read_runs

pytest.importorskip("opentelemetry.instrumentation.openai_v2")


_PLACES = ("harbour", "museum", "market", "bridge", "garden", "station", "library", "tower")


def search(q: str) -> str:
    """A result that says something of its own about each query, beyond echoing it: a
    result is compared without the echo of its call's arguments (``Event.forget_echoes``),
    and "Results for topic 3: topic 3 fact 0; ..." without its echo is the same for every
    query (futility warned, even stopped, the healthy runs: "outcomes you already had")."""
    start = sum(map(ord, q))
    places = [_PLACES[(start + 3 * i) % len(_PLACES)] for i in range(3)]
    return f"Results for {q}: " + "; ".join(f"near the {place}" for place in places)


HEALTHY = [[("search", {"q": f"topic {i}"})] for i in range(5)] + ["Here is what I found."]
LOOPING = [[("search", {"q": "paris weather"})] for _ in range(8)] + ["I could not find it."]


def read(tmp_path: Path, doc: Any, name: str = "trace.json") -> tuple[list[TraceRun], list[str]]:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    runs: list[TraceRun] = []
    notes: list[str] = []
    for item in read_runs(str(path)):
        if isinstance(item, InputError):
            notes.append(str(item))
        else:
            runs.append(item)
    return runs, notes


def verdict(run: TraceRun) -> str:
    return scan(run.to_dict(), Config()).verdict


# -- 1. absent is not equal -------------------------------------------------------------------
def test_genai_default_settings_healthy_run_is_not_stopped(tmp_path: Path) -> None:
    """Issue 14 (a): content capture is off by default, so every chat span lacks its
    output. Read as six empty model outputs, the healthy run was stopped
    (stagnation, spend velocity); the outputs are unknown, not empty."""
    runs, notes = read(tmp_path, tc.openai_v2_trace(HEALTHY, {"search": search}))
    assert len(runs) == 1
    run = runs[0]
    assert not any(e["kind"] == "model" and not e.get("text") for e in run.events)
    assert run.meta["unknown"] == {"model_text": 6, "span_inputs": 1}
    assert verdict(run) == "ok"
    assert len(notes) == 1
    assert "6 model outputs not in the trace" in notes[0]
    assert "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT" in notes[0]


def test_genai_tool_spans_without_content_mark_arguments_and_results_unknown(
    tmp_path: Path,
) -> None:
    runs, notes = read(tmp_path, tc.openai_v2_trace(HEALTHY, {"search": search}, tool_spans=True))
    (run,) = runs
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    results = [e for e in run.events if e["kind"] == "tool_result"]
    assert len(calls) == len(results) == 5
    for call in calls:
        assert "args" not in call and call["unknown"] == ["args"]
    for result in results:
        assert "text" not in result and result["unknown"] == ["text"]
    assert run.meta["unknown"]["tool_args"] == 5
    assert "5 tool arguments, 5 tool results" in notes[0]


def test_genai_tool_spans_without_content_healthy_run_is_not_stopped(tmp_path: Path) -> None:
    runs, _ = read(tmp_path, tc.openai_v2_trace(HEALTHY, {"search": search}, tool_spans=True))
    assert verdict(runs[0]) == "ok"


def test_genai_with_content_captured_reads_the_same_run_fully(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs, notes = read(
        tmp_path, tc.openai_v2_trace(LOOPING, {"search": search}, capture=True, tool_spans=True)
    )
    (run,) = runs
    assert "unknown" not in run.meta or set(run.meta["unknown"]) == {"span_inputs"}
    assert [e["args"] for e in run.events if e["kind"] == "tool_call"][:2] == [
        {"q": "paris weather"},
        {"q": "paris weather"},
    ]
    assert verdict(run) == "stop"
    assert notes == []


LANGFUSE_HEALTHY = {
    "run_id": "lf-healthy",
    "events": [
        {"kind": "span", "name": "researcher", "type": "agent", "id": "a", "text": "find"},
        *[
            e
            for i in range(6)
            for e in (
                {"kind": "model", "text": f"I will look up source {i}.", "parent": "a"},
                {
                    "kind": "tool_call",
                    "name": "web_search",
                    "args": {"q": f"query {i}"},
                    "id": f"c{i}",
                    "parent": "a",
                },
                {
                    "kind": "tool_result",
                    "name": "web_search",
                    "id": f"c{i}",
                    "text": f"source {i} says {i * 7}",
                    "parent": "a",
                },
            )
        ],
        {"kind": "model", "text": "Summary of the six sources.", "parent": "a"},
    ],
}


def test_langfuse_observations_with_default_fields_are_unknown_not_null(
    tmp_path: Path,
) -> None:
    """Issue 14 (e): the observations API returns no input/output unless asked; the six
    different queries read as ``web_search(null)`` six times."""
    observations = tc.langfuse_observations(LANGFUSE_HEALTHY, fields=("core", "basic"))
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in observations))
    items = list(read_runs(str(path)))
    notes = [str(i) for i in items if isinstance(i, InputError)]
    (run,) = [i for i in items if isinstance(i, TraceRun)]
    assert [e["kind"] for e in run.events] == ["span"] + ["tool_call", "tool_result"] * 6
    for e in run.events[1:]:
        assert e["unknown"] == (["args"] if e["kind"] == "tool_call" else ["text"])
        assert "args" not in e and "text" not in e
    assert run.meta["unknown"] == {
        "model_text": 7,
        "span_inputs": 1,
        "tool_args": 6,
        "tool_results": 6,
    }
    assert len(notes) == 1 and "fields=" in notes[0]


def test_langfuse_observations_with_io_read_fully(tmp_path: Path) -> None:
    observations = tc.langfuse_observations(
        LANGFUSE_HEALTHY, fields=("core", "basic", "io", "usage")
    )
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in observations))
    items = list(read_runs(str(path)))
    assert not [i for i in items if isinstance(i, InputError)]
    (run,) = items
    assert isinstance(run, TraceRun)
    assert "unknown" not in run.meta
    assert verdict(run) == "ok"


def test_langfuse_default_fields_healthy_run_is_not_stopped(tmp_path: Path) -> None:
    observations = tc.langfuse_observations(LANGFUSE_HEALTHY, fields=("core", "basic"))
    path = tmp_path / "obs.jsonl"
    path.write_text("".join(json.dumps(o) + "\n" for o in observations))
    runs = [i for i in read_runs(str(path)) if isinstance(i, TraceRun)]
    assert verdict(runs[0]) == "ok"


def test_agents_sdk_without_sensitive_data_marks_unknown(tmp_path: Path) -> None:
    """``trace_include_sensitive_data=False``: function spans export no input/output."""
    agents = pytest.importorskip("agents")
    from agents.testing import ScriptedModel, assistant_message, function_call

    collected: list[dict[str, Any]] = []

    class Collect(agents.tracing.TracingProcessor):
        def on_trace_start(self, trace: Any) -> None:
            collected.append(trace.export())

        def on_trace_end(self, trace: Any) -> None:
            pass

        def on_span_start(self, span: Any) -> None:
            pass

        def on_span_end(self, span: Any) -> None:
            collected.append(span.export())

        def shutdown(self) -> None:
            pass

        def force_flush(self) -> None:
            pass

    @agents.function_tool
    def lookup(q: str) -> str:
        """Look something up."""
        return search(q)

    steps = [[function_call("lookup", {"q": f"topic {i}"}, call_id=f"c{i}")] for i in range(5)]
    model = ScriptedModel([*steps, [assistant_message("done")]])
    agents.tracing.set_trace_processors([Collect()])
    agents.tracing.get_trace_provider().set_disabled(False)
    try:
        agents.Runner.run_sync(
            agents.Agent(name="researcher", model=model, tools=[lookup]),
            "research",
            run_config=agents.RunConfig(trace_include_sensitive_data=False),
        )
    finally:
        agents.tracing.set_trace_processors([])
    path = tmp_path / "agents.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in collected if r))
    runs = [i for i in read_runs(str(path)) if isinstance(i, TraceRun)]
    (run,) = runs
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    assert len(calls) == 5
    assert all(c["unknown"] == ["args"] and "args" not in c for c in calls)


# -- 2. openai-agents-v2 instrumentation -------------------------------------------------------
def _agents_tools() -> list[Any]:
    pytest.importorskip("agents")
    return tc.agents_tools(search)


AGENTS_HEALTHY = [[("lookup", {"q": f"topic {i}"})] for i in range(5)] + ["Done."]
AGENTS_LOOPING = [[("lookup", {"q": "paris weather"})] for _ in range(8)] + ["Done."]


def test_agents_v2_bookkeeping_spans_are_not_agent_steps(tmp_path: Path) -> None:
    """Issue 14: the task / turn spans the instrumentation names ``unknown`` nest in
    each other; read as spans, every run warned ``unknown 'unknown' invoked itself``."""
    pytest.importorskip("opentelemetry.instrumentation.openai_agents")
    doc = tc.openai_agents_v2_trace(AGENTS_HEALTHY, _agents_tools())
    attrs = [
        {a["key"]: a["value"] for a in s.get("attributes", [])}
        for rs in doc["resourceSpans"]
        for ss in rs["scopeSpans"]
        for s in ss["spans"]
    ]
    assert any(a.get("gen_ai.operation.name") == {"stringValue": "unknown"} for a in attrs)
    (run,) = read(tmp_path, doc)[0]
    assert not any(e.get("name") == "unknown" for e in run.events)
    assert [e["args"] for e in run.events if e["kind"] == "tool_call"] == [
        {"q": f"topic {i}"} for i in range(5)
    ]
    report = scan(run.to_dict(), Config())
    assert (report.verdict, report.findings) == ("ok", [])


def test_agents_v2_looping_run_still_stops(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.instrumentation.openai_agents")
    (run,) = read(tmp_path, tc.openai_agents_v2_trace(AGENTS_LOOPING, _agents_tools()))[0]
    report = scan(run.to_dict(), Config())
    assert report.verdict == "stop"
    assert {f.detector for f in report.findings} >= {"repeated_call"}
    assert "recursion" not in {f.detector for f in report.findings}


def test_agents_v2_chat_spans_read_as_the_agents_turns(tmp_path: Path) -> None:
    """With a real chat model the instrumentation adds chat spans; it names every one
    after its own placeholder agent ("OpenAI Agent") and writes the output message as
    a Python repr in a text part. The turns belong to the agent that ran them and
    carry no repr text."""
    pytest.importorskip("opentelemetry.instrumentation.openai_agents")
    doc = tc.openai_agents_v2_trace(AGENTS_HEALTHY, _agents_tools(), chat_model=True)
    (run,) = read(tmp_path, doc)[0]
    models = [e for e in run.events if e["kind"] == "model"]
    assert len(models) == 6
    assert {m["agent"] for m in models} == {"researcher"}
    assert [m["text"] for m in models] == [""] * 5 + ["Done."]
    assert verdict(run) == "ok"
    (looping,) = read(
        tmp_path, tc.openai_agents_v2_trace(AGENTS_LOOPING, _agents_tools(), chat_model=True)
    )[0]
    assert verdict(looping) == "stop"


# -- 3. Langfuse SDK v5 (OpenTelemetry spans through span_exporter=) ---------------------------
LF_HEALTHY = [[("web_search", {"q": f"topic {i}"})] for i in range(6)] + ["Summary."]
LF_LOOPING = [[("web_search", {"q": "paris weather"})] for _ in range(8)] + ["Gave up."]


def web_search(q: str) -> str:
    return search(q)


def test_langfuse_v5_spans_are_read(tmp_path: Path) -> None:
    """Issue 14: Langfuse v5 spans carry ``langfuse.observation.*`` attributes and no
    GenAI ones; a looping run read as 0 events and scanned ``ok``."""
    (run,) = read(tmp_path, tc.langfuse_v5_trace(LF_LOOPING, {"web_search": web_search}))[0]
    kinds = [e["kind"] for e in run.events]
    assert kinds[0] == "span" and kinds.count("tool_call") == 8 and kinds.count("model") == 9
    assert run.events[0]["text"] == "Research the topic"
    call = next(e for e in run.events if e["kind"] == "tool_call")
    assert call["args"] == {"q": "paris weather"}  # @observe's {"args", "kwargs"} unwrapped
    report = scan(run.to_dict(), Config())
    assert report.verdict == "stop"
    assert report.findings[0].detector == "repeated_call"


def test_langfuse_v5_healthy_run_is_ok(tmp_path: Path) -> None:
    (run,) = read(tmp_path, tc.langfuse_v5_trace(LF_HEALTHY, {"web_search": web_search}))[0]
    assert sum(e["kind"] == "tool_call" for e in run.events) == 6
    assert verdict(run) == "ok"


def test_a_run_with_nothing_to_scan_is_not_silent(tmp_path: Path) -> None:
    """Spans that are no agent step at all (plain HTTP spans) make a run of 0 events:
    said on stderr, not scanned as a clean run without a word."""
    from opentelemetry import trace as otel_trace

    provider, exporter = tc._otel_collector()
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("GET /health", kind=otel_trace.SpanKind.SERVER):
        pass
    runs, notes = read(tmp_path, tc._otlp_of(exporter.get_finished_spans()))
    assert len(runs) == 1 and runs[0].events == []
    assert len(notes) == 1 and "no events to scan" in notes[0]


# -- 4. GenAI calls with no enclosing span ------------------------------------------------------
def test_parentless_calls_are_joined_by_their_conversation(tmp_path: Path) -> None:
    """Issue 14: without an enclosing span every LLM call is its own trace; a looping
    agent read as 9 runs of one call each, none of them a loop."""
    doc = tc.openai_v2_trace(LOOPING, {"search": search}, capture=True, agent_span=False)
    traces = {
        s["traceId"] for rs in doc["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]
    }
    assert len(traces) == 9
    runs, notes = read(tmp_path, doc)
    assert notes == []
    (run,) = runs
    assert run.meta["traces"] == 9
    assert sum(e["kind"] == "model" for e in run.events) == 9
    report = scan(run.to_dict(), Config())
    assert report.verdict == "stop"
    assert "got the same result" in report.findings[0].message


def test_tool_results_are_read_from_the_next_calls_input(tmp_path: Path) -> None:
    """No tool spans: a call's results come back in the next call's input messages
    (``tool_call_response`` parts); they are the run's tool_result events."""
    doc = tc.openai_v2_trace(HEALTHY, {"search": search}, capture=True)
    (run,) = read(tmp_path, doc)[0]
    kinds = [e["kind"] for e in run.events]
    assert kinds == ["span"] + ["model", "tool_call", "tool_result"] * 5 + ["model"]
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    results = [e for e in run.events if e["kind"] == "tool_result"]
    assert [r["id"] for r in results] == [c["id"] for c in calls]
    assert [r["text"] for r in results] == [search(f"topic {i}") for i in range(5)]
    assert run.events[-1]["text"] == "Here is what I found."
    assert verdict(run) == "ok"


def test_parentless_healthy_calls_make_one_clean_run(tmp_path: Path) -> None:
    doc = tc.openai_v2_trace(HEALTHY, {"search": search}, capture=True, agent_span=False)
    (run,) = read(tmp_path, doc)[0]
    assert [e["args"] for e in run.events if e["kind"] == "tool_call"] == [
        {"q": f"topic {i}"} for i in range(5)
    ]
    assert verdict(run) == "ok"


def test_interleaved_conversations_stay_apart(tmp_path: Path) -> None:
    """Two agents calling the same client turn by turn: two runs, each its own chain."""
    doc = tc.openai_v2_trace(LOOPING, {"search": search}, capture=True, agent_span=False, runs=2)
    runs, _ = read(tmp_path, doc)
    assert len(runs) == 2
    assert [run.meta["traces"] for run in runs] == [9, 9]
    assert [verdict(run) for run in runs] == ["stop", "stop"]


# -- LangSmith with hidden inputs and outputs ---------------------------------------------------
def test_langsmith_hidden_inputs_and_outputs_are_unknown(tmp_path: Path) -> None:
    """``LANGSMITH_HIDE_INPUTS`` / ``_OUTPUTS`` record ``{}``: six different searches
    must not read as one call with empty arguments and an empty result."""
    runs = tc.langsmith_runs(LANGFUSE_HEALTHY, hide=True)
    path = tmp_path / "ls.jsonl"
    path.write_text("".join(json.dumps(tc.langsmith_dict(r)) + "\n" for r in runs))
    items = list(read_runs(str(path)))
    notes = [str(i) for i in items if isinstance(i, InputError)]
    (run,) = [i for i in items if isinstance(i, TraceRun)]
    assert [e["kind"] for e in run.events] == ["span"] + ["tool_call", "tool_result"] * 6
    assert all("unknown" in e for e in run.events)
    assert not any("args" in e or "text" in e for e in run.events)
    assert run.meta["unknown"] == {
        "model_text": 7, "span_inputs": 1, "tool_args": 6, "tool_results": 6
    }  # fmt: skip
    assert len(notes) == 1 and "LANGSMITH_HIDE_INPUTS" in notes[0]
    shown = [tc.langsmith_dict(r) for r in tc.langsmith_runs(LANGFUSE_HEALTHY)]
    path.write_text("".join(json.dumps(r) + "\n" for r in shown))
    (full,) = list(read_runs(str(path)))
    assert isinstance(full, TraceRun) and "unknown" not in full.meta
    assert verdict(full) == "ok"


# -- robustness --------------------------------------------------------------------------------
_KEYS = [
    "gen_ai.operation.name", "gen_ai.input.messages", "gen_ai.output.messages",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result", "gen_ai.agent.name",
    "gen_ai.agent.id", "gen_ai.prompt", "langfuse.observation.type",
    "langfuse.observation.input", "langfuse.observation.output",
    "langfuse.observation.usage_details", "langfuse.observation.cost_details",
    "langfuse.observation.level", "llm.input_messages.0.message.role",
    "llm.input_messages.0.message.tool_call_id",
]  # fmt: skip
_JSONISH = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
    max_leaves=8,
)
_VALUES = (
    st.text(max_size=30)
    | st.integers()
    | st.booleans()
    | st.lists(st.text(max_size=10), max_size=3)
    | _JSONISH.map(json.dumps)
    | st.sampled_from(["unknown", "chat", "execute_tool", "tool", "generation", "{'role': 1}"])
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.dictionaries(st.sampled_from(_KEYS), _VALUES, max_size=6), max_size=4))
def test_odd_attribute_values_never_crash_the_reader(attrs: list[dict[str, Any]]) -> None:
    """Any values under the keys the new mappings read (messages, Langfuse attributes,
    agent names...), on parentless spans and in a tree: reading never raises."""
    provider, exporter = tc._otel_collector()
    tracer = provider.get_tracer("fuzz")
    with tracer.start_as_current_span("root", attributes={"gen_ai.operation.name": "chat"}):
        for a in attrs:
            tracer.start_span("child", attributes=a).end()
    for a in attrs:  # parentless: each its own trace, candidates for chaining
        from opentelemetry import context as otel_context

        tracer.start_span("call", context=otel_context.Context(), attributes=a).end()
    doc = tc._otlp_of(exporter.get_finished_spans())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "fuzz.json"
        path.write_text(json.dumps(doc))
        for item in read_runs(str(path)):
            if isinstance(item, TraceRun):
                scan(item.to_dict(), Config())


# -- every exporter's fixture: the guard replaying it agrees with the scan ---------------------
def _fixtures() -> dict[str, Any]:
    return {
        "openai-v2 default, healthy": lambda: tc.openai_v2_trace(HEALTHY, {"search": search}),
        "openai-v2 tool spans, healthy": lambda: tc.openai_v2_trace(
            HEALTHY, {"search": search}, tool_spans=True
        ),
        "openai-v2 captured, looping": lambda: tc.openai_v2_trace(
            LOOPING, {"search": search}, capture=True, tool_spans=True
        ),
        "openai-v2 parentless, looping": lambda: tc.openai_v2_trace(
            LOOPING, {"search": search}, capture=True, agent_span=False
        ),
        "agents-v2 healthy": lambda: tc.openai_agents_v2_trace(AGENTS_HEALTHY, _agents_tools()),
        "agents-v2 looping": lambda: tc.openai_agents_v2_trace(AGENTS_LOOPING, _agents_tools()),
        "langfuse v5 looping": lambda: tc.langfuse_v5_trace(LF_LOOPING, {"web_search": web_search}),
        "langfuse v5 healthy": lambda: tc.langfuse_v5_trace(LF_HEALTHY, {"web_search": web_search}),
    }


@pytest.mark.parametrize("name", list(_fixtures()))
def test_guard_replay_agrees_with_the_scan_on_every_exporter_fixture(
    tmp_path: Path, name: str
) -> None:
    from loopwatch import Guard

    runs, _ = read(tmp_path, _fixtures()[name]())
    assert runs
    for run in runs:
        report = scan(run.to_dict(), Config())
        guard = Guard(Config())
        actions = [guard.observe(run.run_id, ev).action.value for ev in run.events]
        first_warn = next((i for i, a in enumerate(actions) if a != "ok"), None)
        first_stop = next((i for i, a in enumerate(actions) if a in ("stop", "skip")), None)
        assert (first_warn, first_stop) == (report.first_warn, report.first_stop), name
        # healthy runs stay clean, looping ones are stopped
        assert (report.verdict == "ok") is ("healthy" in name), (name, report.to_dict())
