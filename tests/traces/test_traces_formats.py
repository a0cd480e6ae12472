"""Reading exported traces: sniffing, forcing, bad input, streaming, a real Agents SDK run."""

from __future__ import annotations

import asyncio
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from conftest import load_scenarios

from loopwatch import Config, scan
from loopwatch.traces import FORMATS, InputError, TraceRun, detect, read_runs
from loopwatch.traces._common import tool_output
from loopwatch.traces.otlp import OtlpReader
from loopwatch.traces.sniff import read_path

RUNS = load_scenarios()
THREE = [RUNS[0], RUNS[12], RUNS[8]]  # a repeat loop, a clean run, a recursion


def _otlp_lines(tmp: Path, docs: list[dict[str, Any]], name: str = "t.jsonl") -> Path:
    path = tmp / name
    path.write_text("".join(json.dumps(d) + "\n" for d in docs))
    return path


def _split(items: list[TraceRun | InputError]) -> tuple[list[TraceRun], list[InputError]]:
    return (
        [i for i in items if isinstance(i, TraceRun)],
        [i for i in items if isinstance(i, InputError)],
    )


@pytest.fixture(scope="module")
def three_docs() -> list[dict[str, Any]]:
    return [tc.otlp_hex(d) for d in tc.otlp_documents(THREE, "genai")]


# -- sniffing and forcing ---------------------------------------------------------------------
def test_formats_lists_every_reader() -> None:
    assert set(FORMATS) >= {"jsonl", "otlp", "langfuse", "langsmith", "openai_agents", "deepeval"}


@pytest.mark.parametrize(
    ("record", "expected"),
    [
        ({"run_id": "r", "events": []}, "jsonl"),
        ({"resourceSpans": []}, "otlp"),
        ({"object": "trace.span", "id": "s", "trace_id": "t", "span_data": {}}, "openai_agents"),
        ({"id": "x", "run_type": "tool", "trace_id": "t"}, "langsmith"),
        ({"id": "o", "traceId": "t", "type": "GENERATION"}, "langfuse"),
        ({"id": "t", "observations": []}, "langfuse"),
        ({"hello": "world"}, None),
    ],
)
def test_detect_recognises_each_format_from_one_record(record: Any, expected: str | None) -> None:
    assert detect(record) == expected


def test_native_files_read_the_same_through_sniffing(tmp_path: Path) -> None:
    path = tmp_path / "native.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in RUNS))
    runs, errors = _split(list(read_runs(str(path))))
    assert not errors
    assert [r.run_id for r in runs] == [r["run_id"] for r in RUNS]
    assert [r.events for r in runs] == [r["events"] for r in RUNS]


def test_forcing_the_wrong_format_reports_instead_of_guessing(tmp_path: Path) -> None:
    path = tmp_path / "native.jsonl"
    path.write_text(json.dumps(RUNS[0]) + "\n")
    runs, errors = _split(list(read_runs(str(path), format="langfuse")))
    assert not runs
    assert len(errors) == 1 and errors[0].line == 1 and "Langfuse" in errors[0].reason


def test_gzip_is_read_transparently(tmp_path: Path, three_docs: list[dict[str, Any]]) -> None:
    plain = _otlp_lines(tmp_path, three_docs)
    packed = tmp_path / "t.jsonl.gz"
    packed.write_bytes(gzip.compress(plain.read_bytes()))
    assert [r.events for r in read_runs(str(packed))] == [r.events for r in read_runs(str(plain))]


def test_deepeval_records_are_read_when_its_reader_is_present(tmp_path: Path) -> None:
    pytest.importorskip("loopwatch.traces.deepeval", reason="only meaningful without it")
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"type": "agent", "name": "a", "children": []}))
    items = list(read_runs(str(path), format="deepeval"))
    assert items and all(isinstance(i, (TraceRun, InputError)) for i in items)


def test_forcing_deepeval_without_its_reader_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import loopwatch.traces.sniff as sniff

    monkeypatch.setattr(sniff, "_deepeval", lambda: None)
    path = tmp_path / "d.json"
    path.write_text(json.dumps({"type": "agent", "name": "a", "children": []}) + "\n")
    items = list(read_runs(str(path), format="deepeval"))
    assert len(items) == 1 and isinstance(items[0], InputError)
    assert "deepeval" in items[0].reason and "not available" in items[0].reason


# -- bad input: one clear error, nothing else lost ---------------------------------------------
def _assert_three_read(runs: list[TraceRun], expected_ids: list[str]) -> None:
    assert sorted(r.run_id for r in runs) == sorted(expected_ids)
    by_id = {r.run_id: r for r in runs}
    for native in THREE:
        if native["run_id"] in by_id:
            report = scan(by_id[native["run_id"]].to_dict(), Config())
            assert report.verdict == scan(native, Config()).verdict


def test_truncated_json_is_one_error_at_its_line(
    tmp_path: Path, three_docs: list[dict[str, Any]]
) -> None:
    path = _otlp_lines(tmp_path, three_docs)
    lines = path.read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]
    path.write_text("\n".join(lines) + "\n")
    runs, errors = _split(list(read_runs(str(path))))
    assert len(errors) == 1
    assert str(errors[0]).startswith(f"{path}:2: invalid JSON")
    _assert_three_read(runs, [THREE[0]["run_id"], THREE[2]["run_id"]])


def test_a_truncated_document_is_one_error_with_its_position(
    tmp_path: Path, three_docs: list[dict[str, Any]]
) -> None:
    path = tmp_path / "doc.json"
    text = json.dumps(
        {"resourceSpans": [rs for d in three_docs for rs in d["resourceSpans"]]}, indent=2
    )
    path.write_text(text[: len(text) // 2])
    good = _otlp_lines(tmp_path, three_docs, "good.jsonl")
    runs, errors = _split(list(read_runs([str(path), str(good)])))
    assert len(errors) == 1 and errors[0].path == str(path)
    assert errors[0].line is not None and errors[0].line > 1 and "invalid JSON" in errors[0].reason
    _assert_three_read(runs, [r["run_id"] for r in THREE])


def test_a_span_whose_parent_is_missing_is_one_error_and_the_run_is_still_read(
    tmp_path: Path, three_docs: list[dict[str, Any]]
) -> None:
    docs = json.loads(json.dumps(three_docs))
    spans = docs[2]["resourceSpans"][0]["scopeSpans"][0]["spans"]
    child = next(s for s in spans if s.get("parentSpanId"))
    child["parentSpanId"] = "00000000deadbeef"
    path = _otlp_lines(tmp_path, docs)
    runs, errors = _split(list(read_runs(str(path))))
    assert len(errors) == 1
    assert errors[0].line == 3 and "deadbeef" in errors[0].reason
    assert "not in the input" in errors[0].reason
    _assert_three_read(runs, [r["run_id"] for r in THREE])


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda span: span.__setitem__("attributes", {"gen_ai.operation.name": "chat"}),
        lambda span: span["attributes"].append(
            {"key": "gen_ai.usage.output_tokens", "value": {"stringValue": "lots"}}
        ),
        lambda span: span["attributes"].append({"key": "x", "value": {"intValue": "1.5e"}}),
        lambda span: span["attributes"].append({"value": {"stringValue": "no key"}}),
    ],
    ids=["attributes-object", "tokens-string", "int-not-int", "entry-without-key"],
)
def test_attributes_of_the_wrong_type_are_one_error_and_the_run_is_still_read(
    tmp_path: Path, three_docs: list[dict[str, Any]], corrupt: Any
) -> None:
    docs = json.loads(json.dumps(three_docs))
    corrupt(docs[1]["resourceSpans"][0]["scopeSpans"][0]["spans"][0])
    path = _otlp_lines(tmp_path, docs)
    runs, errors = _split(list(read_runs(str(path))))
    assert len(errors) == 1, [str(e) for e in errors]
    assert errors[0].path == str(path) and errors[0].line == 2
    assert "attribute" in errors[0].reason
    _assert_three_read(runs, [r["run_id"] for r in THREE])


def test_an_unknown_format_is_one_error_and_the_next_file_is_read(
    tmp_path: Path, three_docs: list[dict[str, Any]]
) -> None:
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text('{"hello": "world"}\n{"hello": "again"}\n')
    good = _otlp_lines(tmp_path, three_docs)
    runs, errors = _split(list(read_runs([str(unknown), str(good)])))
    assert len(errors) == 1 and errors[0].path == str(unknown)
    assert "unknown trace format" in errors[0].reason
    _assert_three_read(runs, [r["run_id"] for r in THREE])


def test_an_unknown_format_name_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps(RUNS[0]) + "\n")
    items = list(read_runs(str(path), format="zipkin"))
    assert len(items) == 1 and isinstance(items[0], InputError)
    assert "unknown format 'zipkin'" in items[0].reason


def test_text_that_is_not_json_is_one_error(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_text("these are not traces\njust text\n")
    items = list(read_runs(str(path)))
    assert len(items) == 1 and isinstance(items[0], InputError) and items[0].path == str(path)


# -- streaming ----------------------------------------------------------------------------------
def test_otlp_runs_are_released_before_the_file_ends(three_docs: list[dict[str, Any]]) -> None:
    """A trace whose root has arrived goes out a few lines later, not at the end of the file."""
    reader = OtlpReader("stream")
    filler = json.dumps({"resourceSpans": []})
    released_at: dict[str, int] = {}
    lines = [json.dumps(d) for d in three_docs] + [filler] * 20
    for number, raw in enumerate(lines, 1):
        for item in reader.feed(json.loads(raw), number):
            assert isinstance(item, TraceRun)
            released_at[item.run_id] = number
    assert set(released_at) == set()  # conversations wait for idleness, not for roots
    # Without a conversation id, traces go as soon as their root is in.
    docs = [tc.otlp_hex(d) for d in tc.otlp_documents(THREE, "genai_old")]
    reader = OtlpReader("stream")
    lines = [json.dumps(d) for d in docs] + [filler] * 20
    for number, raw in enumerate(lines, 1):
        for item in reader.feed(json.loads(raw), number):
            released_at[item.run_id] = number
    assert len(released_at) == 3 and max(released_at.values()) < len(lines)
    assert list(reader.finish()) == []


def test_read_runs_is_lazy(tmp_path: Path, three_docs: list[dict[str, Any]]) -> None:
    docs = [tc.otlp_hex(d) for d in tc.otlp_documents(THREE, "genai_old")]
    filler = json.dumps({"resourceSpans": []})
    path = tmp_path / "big.jsonl"
    path.write_text("".join(json.dumps(d) + "\n" for d in docs) + (filler + "\n") * 5000)
    stream: Iterator[Any] = read_path(str(path))
    first = next(stream)
    assert isinstance(first, TraceRun)
    stream.close()  # type: ignore[attr-defined]


# -- values an OpenInference trace does not carry ----------------------------------------------
SEARCHES = {
    "run_id": "oi-healthy",
    "events": [
        {"kind": "span", "name": "researcher", "type": "agent", "id": "a", "text": "find"},
        *[
            e
            for i in range(6)
            for e in (
                {"kind": "model", "text": f"I will read page {i}.", "parent": "a"},
                {"kind": "tool_call", "name": "web_search", "args": {"q": "paris", "page": i},
                 "id": f"c{i}", "parent": "a"},
                {"kind": "tool_result", "name": "web_search", "id": f"c{i}",
                 "text": f"page {i}: {i * 7} results", "parent": "a"},
            )
        ],
        {"kind": "model", "text": "Six pages read.", "parent": "a"},
    ],
}  # fmt: skip


def _openinference_with(edit: Any) -> dict[str, Any]:
    """SEARCHES as OpenInference spans (made by the SDK, encoded by the OTLP encoder), each
    span's attributes passed through ``edit(kind, {key: value})`` first."""
    [doc] = [tc.otlp_hex(d) for d in tc.otlp_documents([SEARCHES], "openinference")]
    for rs in doc["resourceSpans"]:
        for scope in rs["scopeSpans"]:
            for span in scope["spans"]:
                attrs = {a["key"]: a["value"] for a in span["attributes"]}
                kind = attrs.get("openinference.span.kind", {}).get("stringValue")
                edit(kind, attrs)
                span["attributes"] = [{"key": k, "value": v} for k, v in attrs.items()]
    return doc


def _read_one(tmp_path: Path, doc: dict[str, Any]) -> tuple[TraceRun, list[InputError]]:
    runs, errors = _split(list(read_runs(str(_otlp_lines(tmp_path, [doc])))))
    assert len(runs) == 1
    return runs[0], errors


def test_openinference_redacted_values_are_unknown_not_the_same_value(tmp_path: Path) -> None:
    """OpenInference's trace config (``OPENINFERENCE_HIDE_INPUTS``, ``_OUTPUTS``,
    ``_OUTPUT_TEXT``) writes ``__REDACTED__`` in place of what it hides. Read as values,
    six different searches were one call with one result and six model turns one
    restated output: the healthy run was stopped. They are unknown."""
    hidden = {"stringValue": "__REDACTED__"}

    def redact(kind: str | None, attrs: dict[str, Any]) -> None:
        for key in attrs:
            if key in ("input.value", "output.value") and kind == "TOOL":
                attrs[key] = hidden
            if key.startswith("llm.output_messages.") and key.endswith(".message.content"):
                attrs[key] = hidden

    run, errors = _read_one(tmp_path, _openinference_with(redact))
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    results = [e for e in run.events if e["kind"] == "tool_result"]
    assert len(calls) == len(results) == 6
    assert all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert all("text" not in r and r["unknown"] == ["text"] for r in results)
    assert not any(e["kind"] == "model" for e in run.events)
    assert run.meta["unknown"] == {"model_text": 7, "tool_args": 6, "tool_results": 6}
    assert any("OPENINFERENCE_HIDE_INPUTS" in e.reason for e in errors)
    assert scan(run.to_dict(), Config()).verdict == "ok"
    # the same spans unredacted: every value read, still a healthy run
    full, _ = _read_one(tmp_path, _openinference_with(lambda kind, attrs: None))
    assert "unknown" not in full.meta
    assert [e.get("args") for e in full.events if e["kind"] == "tool_call"] == [
        {"q": "paris", "page": i} for i in range(6)
    ]
    assert scan(full.to_dict(), Config()).verdict == "ok"


def test_openinference_tool_parameters_are_the_schema_not_the_arguments(tmp_path: Path) -> None:
    """OpenInference's ``tool.parameters`` is the tool's parameter schema (CrewAI's
    instrumentor writes it on every call): a tool span without ``input.value`` has
    unknown arguments, not the schema, which is the same on every call."""
    schema = {"stringValue": json.dumps({"properties": {"q": {"type": "string"}}})}

    def schema_only(kind: str | None, attrs: dict[str, Any]) -> None:
        if kind == "TOOL":
            del attrs["input.value"]
            attrs["tool.parameters"] = schema

    run, _ = _read_one(tmp_path, _openinference_with(schema_only))
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    assert len(calls) == 6
    assert all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert run.meta["unknown"]["tool_args"] == 6
    assert scan(run.to_dict(), Config()).verdict == "ok"


# -- a real OpenAI Agents SDK run with a scripted model ---------------------------------------
def test_openai_agents_run_with_a_scripted_model_is_read_and_stopped() -> None:
    agents = pytest.importorskip("agents")
    import agents.tracing as tracing
    from agents.items import ModelResponse
    from agents.models.interface import Model
    from agents.usage import Usage
    from openai.types.responses import (
        ResponseFunctionToolCall,
        ResponseOutputMessage,
        ResponseOutputText,
    )

    class ScriptedModel(Model):
        """Calls web_search with the same query every turn (a stuck agent)."""

        def __init__(self) -> None:
            self.turn = 0

        async def get_response(
            self, system_instructions: Any, input: Any, *a: Any, **k: Any
        ) -> Any:
            self.turn += 1
            if self.turn <= 8:
                item: Any = ResponseFunctionToolCall(
                    type="function_call",
                    name="web_search",
                    call_id=f"call_{self.turn}",
                    arguments='{"q": "paris weather"}',
                    id=f"fc_{self.turn}",
                )
                output = [
                    {
                        "role": "assistant",
                        "content": None,
                        "tool_calls": [
                            {
                                "id": f"call_{self.turn}",
                                "type": "function",
                                "function": {
                                    "name": "web_search",
                                    "arguments": '{"q": "paris weather"}',
                                },
                            }
                        ],
                    }
                ]
            else:
                item = ResponseOutputMessage(
                    id="m",
                    type="message",
                    role="assistant",
                    status="completed",
                    content=[ResponseOutputText(type="output_text", text="18C", annotations=[])],
                )
                output = [{"role": "assistant", "content": "18C"}]
            messages = [{"role": "user", "content": input}] if isinstance(input, str) else input
            with tracing.generation_span(
                input=messages,
                output=output,
                model="scripted",
                usage={"input_tokens": 10, "output_tokens": 5},
            ):
                pass
            return ModelResponse(output=[item], usage=Usage(), response_id=None)

        def stream_response(self, *a: Any, **k: Any) -> Any:
            raise NotImplementedError

    @agents.function_tool
    def web_search(q: str) -> str:
        """Search the web."""
        return "18C, cloudy"

    exported: list[dict[str, Any]] = []

    class Collector(tracing.TracingProcessor):
        def on_trace_start(self, trace: Any) -> None:
            exported.append(trace.export())

        def on_trace_end(self, trace: Any) -> None: ...
        def on_span_start(self, span: Any) -> None: ...

        def on_span_end(self, span: Any) -> None:
            exported.append(span.export())

        def shutdown(self) -> None: ...
        def force_flush(self) -> None: ...

    tracing.set_trace_processors([Collector()])
    tracing.get_trace_provider().set_disabled(False)  # process-global; may be off
    try:
        agent = agents.Agent(name="researcher", tools=[web_search], model=ScriptedModel())
        result = asyncio.run(agents.Runner.run(agent, "weather in paris?", max_turns=20))
    finally:
        tracing.set_trace_processors([])
    assert result.final_output == "18C"

    from loopwatch.traces.openai_agents import OpenAIAgentsReader

    reader = OpenAIAgentsReader("agents")
    items = [*reader.feed({"data": exported}, 1), *reader.finish()]
    runs, errors = _split(items)
    assert not errors and len(runs) == 1
    events = runs[0].events
    calls = [e for e in events if e["kind"] == "tool_call"]
    results = [e for e in events if e["kind"] == "tool_result"]
    assert len(calls) == len(results) == 8
    assert all(c["name"] == "web_search" and c["args"] == {"q": "paris weather"} for c in calls)
    assert all(r["text"] == "18C, cloudy" for r in results)
    assert events[0]["kind"] == "span" and events[0]["name"] == "researcher"
    assert events[0]["text"] == "weather in paris?"
    assert [e["text"] for e in events if e["kind"] == "model"][-1] == "18C"
    report = scan(runs[0].to_dict(), Config())
    assert report.verdict == "stop"
    # the guard replaying this run would have told the 3rd identical call (skipped: a short
    # result) and stopped the 4th before it ran
    assert report.first_warn is not None and report.first_stop is not None
    assert events[report.first_warn] is calls[2]
    assert events[report.first_stop] is calls[3]


# -- what real OpenInference instrumentations write ------------------------------------------
# Spans made with the OpenTelemetry SDK and written by the OTLP exporter's own encoder, with
# the attributes the OpenInference instrumentations of smolagents, LlamaIndex and AutoGen
# AgentChat write (seen in their runs: tests/integrations/test_integration_{smolagents,llama_index,
# autogen}.py scan those runs whole).
REDACTED = "__REDACTED__"  # openinference.instrumentation.config.REDACTED_VALUE


def _oi_run(tmp_path: Path, steps: int, step: Any) -> tuple[TraceRun, list[InputError]]:
    """``steps`` model/tool steps under one agent span: ``step(tracer, i)`` makes each;
    the one run read back, and the notes."""
    provider, exporter = tc._otel_collector()
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("agent", attributes={"openinference.span.kind": "AGENT"}):
        for i in range(steps):
            step(tracer, i)
    path = tmp_path / "trace.json"
    path.write_text(json.dumps(tc._otlp_of(exporter.get_finished_spans())))
    runs, errors = _split(list(read_runs(str(path))))
    assert len(runs) == 1, errors
    return runs[0], errors


def _oi_tool(tracer: Any, attrs: dict[str, Any], inner: dict[str, Any] | None = None) -> None:
    tool = {"openinference.span.kind": "TOOL", "tool.name": "search", **attrs}
    with tracer.start_as_current_span("Tool.__call__", attributes=tool):
        if inner is not None:
            with tracer.start_as_current_span("execute_tool search", attributes=inner):
                pass


def test_a_tool_recorded_by_two_nested_spans_is_one_call(tmp_path: Path) -> None:
    """A wrapper tool around the tool it wraps (loopwatch's own, a retry wrapper), or
    OpenInference's span around a framework's ``execute_tool`` span: one call each time,
    with the values of whichever layer carries them. Read as two, four identical calls
    looked like eight, and the loop was told and stopped a call early (then: at its
    third call, of a stop at the fifth)."""

    def step(tracer: Any, i: int) -> None:
        outer = {"input.value": '{"q": "paris weather"}', "output.value": "18C cloudy"}
        inner = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                 "gen_ai.tool.call.id": f"call-{i}"}  # fmt: skip
        _oi_tool(tracer, outer, inner)

    run, _ = _oi_run(tmp_path, 4, step)
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    results = [e for e in run.events if e["kind"] == "tool_result"]
    assert [c["id"] for c in calls] == [f"call-{i}" for i in range(4)]
    assert all(c["args"] == {"q": "paris weather"} and "unknown" not in c for c in calls)
    assert [r["text"] for r in results] == ["18C cloudy"] * 4
    report = scan(run.to_dict(), Config())
    # the defaults tell the 3rd identical call (a short result) and stop the 4th; read as
    # two calls each, the 2nd would be told and stopped
    assert report.verdict == "stop"
    assert report.first_warn is not None and report.first_stop is not None
    assert run.events[report.first_warn] is calls[2]
    assert run.events[report.first_stop] is calls[3]


def test_a_tool_nested_in_a_different_tool_stays_two_calls(tmp_path: Path) -> None:
    def step(tracer: Any, i: int) -> None:
        inner = {"openinference.span.kind": "TOOL", "tool.name": "fetch",
                 "input.value": '{"url": "u"}', "output.value": "page"}  # fmt: skip
        _oi_tool(tracer, {"input.value": '{"q": "x"}', "output.value": "r"}, inner)

    run, _ = _oi_run(tmp_path, 1, step)
    assert [e["name"] for e in run.events if e["kind"] == "tool_call"] == ["search", "fetch"]


def test_openinference_redacted_values_are_unknown_never_equal(tmp_path: Path) -> None:
    """``TraceConfig(hide_inputs=True, hide_outputs=True)`` writes ``__REDACTED__`` for
    every tool's arguments and result, and keeps ``tool.parameters``, the tool's schema:
    read as values, six different searches were six identical calls with the same result
    (a stop). Neither is the call's arguments."""
    schema = json.dumps({"q": {"type": "string", "description": "the query"}})

    def step(tracer: Any, i: int) -> None:
        _oi_tool(tracer, {"input.value": REDACTED, "output.value": REDACTED,
                          "tool.parameters": schema})  # fmt: skip

    run, notes = _oi_run(tmp_path, 6, step)
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    results = [e for e in run.events if e["kind"] == "tool_result"]
    assert len(calls) == 6 and all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert all("text" not in r and r["unknown"] == ["text"] for r in results)
    assert run.meta["unknown"] == {"span_inputs": 1, "tool_args": 6, "tool_results": 6}
    assert any("6 tool arguments" in n.reason for n in notes)
    assert scan(run.to_dict(), Config()).verdict != "stop"


def test_a_model_turn_whose_text_is_hidden_keeps_its_tool_calls(tmp_path: Path) -> None:
    """``hide_output_text`` redacts the text of each output message and keeps its tool
    calls: the text is unknown (no model event, not an empty one), the calls are read."""

    def step(tracer: Any, i: int) -> None:
        out = "llm.output_messages.0.message."
        attrs = {
            "openinference.span.kind": "LLM",
            out + "role": "assistant",
            out + "content": REDACTED,
            out + "tool_calls.0.tool_call.id": f"call-{i}",
            out + "tool_calls.0.tool_call.function.name": "search",
            out + "tool_calls.0.tool_call.function.arguments": json.dumps({"q": f"page {i}"}),
            "llm.token_count.total": 50,
        }
        with tracer.start_as_current_span("chat", attributes=attrs):
            pass

    run, _ = _oi_run(tmp_path, 3, step)
    assert [e["kind"] for e in run.events if e["kind"] != "span"] == ["tool_call"] * 3
    assert [e["args"] for e in run.events if e["kind"] == "tool_call"] == [
        {"q": f"page {i}"} for i in range(3)
    ]
    assert run.meta["unknown"]["model_text"] == 3


def _chat_and_prepare(messages: bool) -> Any:
    """Each step: a request preparation span (LLM kind, its ``output.value`` the request)
    and the chat span, with its output as messages or as ``output.value`` only."""
    history: list[str] = []

    def step(tracer: Any, i: int) -> None:
        history.append(f"ChatMessage(role='user', content='Weather in Paris? ({i})')")
        prepare = {"openinference.span.kind": "LLM", "llm.model_name": "unknown",
                   "output.value": json.dumps({"messages": history})}  # fmt: skip
        with tracer.start_as_current_span("LLM._prepare_chat_with_tools", attributes=prepare):
            pass
        chat: dict[str, Any] = {"openinference.span.kind": "LLM"}
        if messages:
            chat["llm.output_messages.0.message.role"] = "assistant"
            chat["llm.output_messages.0.message.content"] = f"It rains ({i})."
        else:
            chat["output.value"] = f"It rains ({i})."
        with tracer.start_as_current_span("LLM.achat", attributes=chat):
            pass

    return step


def test_an_llm_span_that_made_no_model_call_is_no_model_turn(tmp_path: Path) -> None:
    """OpenInference marks every method of a model class LLM: LlamaIndex's request
    preparation returns the messages about to be sent, as ``output.value``. Read as
    model outputs they were a growing history that restated itself (stagnation); where
    model calls are recorded as messages, a span without any made no call."""
    run, notes = _oi_run(tmp_path, 4, _chat_and_prepare(messages=True))
    models = [e for e in run.events if e["kind"] == "model"]
    assert [m["text"] for m in models] == [f"It rains ({i})." for i in range(4)]
    assert "model_text" not in run.meta.get("unknown", {}) and not notes
    assert scan(run.to_dict(), Config()).verdict == "ok"


def test_plain_output_values_stay_model_outputs_without_output_messages(tmp_path: Path) -> None:
    """``@tracer.llm`` records a model call as ``input.value`` / ``output.value`` only:
    with no output messages anywhere in the run, nothing tells a call from a
    preparation, and every LLM span's output is read."""
    run, _ = _oi_run(tmp_path, 2, _chat_and_prepare(messages=False))
    assert [e["kind"] for e in run.events if e["kind"] != "span"] == ["model"] * 4


@pytest.mark.parametrize(
    ("recorded", "args"),
    [
        ({"kwargs": {"q": "x"}}, {"q": "x"}),  # OpenInference, LlamaIndex: empty *args left out
        ({"args": [], "kwargs": {"q": "x"}}, {"q": "x"}),  # Langfuse @observe
        ({"args": ["x"]}, "x"),
        ({"args": ["x"], "kwargs": {}}, "x"),
        ({"args": ["x", "y"]}, {"args": ["x", "y"]}),  # no one argument: as recorded
        ({"kwargs": "q=x"}, {"kwargs": "q=x"}),
    ],
)
def test_bound_python_arguments_read_as_the_calls_arguments(recorded: Any, args: Any) -> None:
    from loopwatch.traces._common import call_input

    assert call_input(json.dumps(recorded)) == args


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        # LlamaIndex's ToolOutput as OpenInference records it (output.value, JSON)
        (
            '{"blocks":[{"block_type":"text","text":"18C cloudy"}],"tool_name":"search",'
            '"raw_input":{"args":[],"kwargs":{"q":"paris"}},"raw_output":"18C cloudy",'
            '"is_error":false}',
            ("18C cloudy", False),
        ),
        (
            {"blocks": [], "tool_name": "run", "raw_output": "exit 1", "is_error": True},
            ("exit 1", True),
        ),
        # a result that merely looks like JSON is the result itself
        ('{"raw_output": "x"}', None),
        ("18C cloudy", None),
        ({"temperature": 18}, None),
    ],
)
def test_a_frameworks_whole_tool_output_is_read_as_what_the_model_got(
    value: Any, expected: tuple[str, bool] | None
) -> None:
    assert tool_output(value) == expected
