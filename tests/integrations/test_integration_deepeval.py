"""deepeval: the span-dict reader and LoopwatchMetric, on span dicts deepeval builds.

The span dicts come from deepeval itself: functions decorated with ``@observe`` run,
and ``trace_manager.create_nested_spans_dict`` (what deepeval hands trace metrics as
``test_case._trace_dict``) turns the root span into the nested dict.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")

import pytest
from deepeval.dataset import EvaluationDataset, Golden
from deepeval.evaluate.configs import AsyncConfig, DisplayConfig

try:  # deepeval >= 4 ships its own loop metric; 3.x does not
    from deepeval.metrics import AgentLoopDetectionMetric
except ImportError:  # pragma: no cover - depends on the installed deepeval
    AgentLoopDetectionMetric = None
from deepeval.test_case import LLMTestCase
from deepeval.tracing import observe
from deepeval.tracing.context import current_span_context
from deepeval.tracing.tracing import trace_manager
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch import Config, Guard, InputError, TraceRun, scan
from loopwatch.integrations.deepeval import LoopwatchMetric, metric_score
from loopwatch.traces import read_runs
from loopwatch.traces.deepeval import looks_like, runs_from_obj, span_to_events


def traced(body: Callable[[], Any], name: str = "researcher") -> dict[str, Any]:
    """Run ``body`` inside an observed agent span; return deepeval's span dict of it."""
    captured: dict[str, Any] = {}

    @observe(type="agent", name=name)
    def agent(question: str) -> str:
        body()
        captured["root"] = current_span_context.get()
        return "done"

    agent("What is the weather in Paris?")
    return trace_manager.create_nested_spans_dict(captured["root"])  # type: ignore[no-any-return]


@observe(type="tool")
def web_search(q: str, page: int = 1) -> str:
    return "18C cloudy" if page == 1 else f"page {page}: new results {page * 7}"


@observe(type="llm", model="scripted")
def think(step: int) -> str:
    return f"Step {step}: I will look at the next page of results."


def six_identical_calls() -> None:
    for _ in range(6):
        web_search(q="paris weather")


def paging() -> None:
    for page in (1, 2, 3):
        think(page)
        web_search(q="paris weather", page=page)


def case(trace: dict[str, Any] | None) -> LLMTestCase:
    test_case = LLMTestCase(input="What is the weather in Paris?", actual_output="done")
    test_case._trace_dict = trace
    return test_case


def test_six_identical_calls_fail_at_the_default_threshold() -> None:
    trace = traced(six_identical_calls)
    metric = LoopwatchMetric()
    assert metric.threshold == 0.5 and metric.requires_trace

    score = metric.measure(case(trace))

    assert score == metric.score < 0.5
    assert metric.is_successful() is False and metric.success is False
    assert "repeated_call" in metric.reason and "web_search" in metric.reason
    assert metric.score_breakdown["repeated_call"] < 1.0
    assert metric.score_breakdown["recursion"] == 1.0
    assert metric.report is not None and metric.report.first_stop is not None
    # deepeval's own metric lets the same trace pass: the reason this metric exists
    if AgentLoopDetectionMetric is None:
        pytest.skip("this deepeval (3.x) has no AgentLoopDetectionMetric to compare with")
    theirs = AgentLoopDetectionMetric(async_mode=False)
    theirs.measure(case(trace))
    assert theirs.success is True


def test_a_measure_gives_the_same_answer() -> None:
    trace = traced(six_identical_calls)
    sync, asynchronous = LoopwatchMetric(), LoopwatchMetric()
    sync.measure(case(trace))
    asyncio.run(asynchronous.a_measure(case(trace)))
    assert (sync.score, sync.success, sync.reason) == (
        asynchronous.score,
        asynchronous.success,
        asynchronous.reason,
    )


def test_a_clean_trace_passes_with_a_full_score() -> None:
    metric = LoopwatchMetric()
    metric.measure(case(traced(paging)))
    assert metric.score == 1.0 and metric.success is True
    assert metric.reason == "No loop patterns detected."
    assert set(metric.score_breakdown.values()) == {1.0}


def test_no_trace_fails_with_a_clear_reason() -> None:
    metric = LoopwatchMetric()
    metric.measure(case(None))
    assert metric.success is False and metric.score == 0.0
    assert "No trace data" in metric.reason


def test_strict_mode_and_configuration_keywords() -> None:
    trace = traced(lambda: [web_search(q="paris weather") for _ in range(4)])
    # the defaults tell the 3rd identical call (a short result) and stop the 4th; the
    # keywords make the 4th a warning too
    warn_first = {"warn_at": 3, "stop_at": 5}
    lenient = LoopwatchMetric(threshold=0.3, repeated_call=warn_first)  # fail only a stop
    lenient.measure(case(trace))
    assert lenient.success is True and 0.3 <= lenient.score < 0.5  # a warning only
    assert lenient.report is not None and lenient.report.first_stop is None
    strict = LoopwatchMetric(strict_mode=True, repeated_call=warn_first)
    strict.measure(case(trace))
    assert strict.threshold == 1.0 and strict.score == 0.0 and strict.success is False
    default = LoopwatchMetric(threshold=0.3)  # the same threshold, without the keywords
    default.measure(case(trace))
    assert default.success is False and default.report is not None
    assert default.report.first_stop is not None


def test_the_metric_runs_inside_deepevals_own_evaluation_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # deepeval writes its run cache in the working directory
    metric = LoopwatchMetric()

    @observe(type="agent", name="researcher")
    def agent(question: str) -> str:
        six_identical_calls()
        return "done"

    dataset = EvaluationDataset(goldens=[Golden(input="What is the weather in Paris?")])
    for golden in dataset.evals_iterator(
        metrics=[metric],
        async_config=AsyncConfig(run_async=False),
        display_config=DisplayConfig(show_indicator=False, print_results=False),
    ):
        agent(golden.input)
    assert metric.success is False and metric.report is not None
    # span, then call/result pairs: the defaults tell the 3rd identical call (a short
    # result) and stop the 4th
    assert (metric.report.first_warn, metric.report.first_stop) == (5, 7)


def test_span_to_events_maps_each_span_type() -> None:
    @observe(type="retriever", embedder="e")
    def retrieve(query: str) -> list[str]:
        return ["doc a", "doc b"]

    @observe(type="tool")
    def broken(path: str) -> str:
        raise FileNotFoundError(path)

    @observe(type="agent", name="helper")
    def helper(task: str) -> str:
        think(9)
        return "ok"

    def body() -> None:
        think(1)
        retrieve("paris")
        with pytest.raises(FileNotFoundError):
            broken("/missing")
        helper("sub task")

    events = span_to_events(traced(body))
    kinds = [(e["kind"], e.get("name")) for e in events]
    assert kinds == [
        ("span", "researcher"),
        ("model", None),
        ("tool_call", "retrieve"),
        ("tool_result", "retrieve"),
        ("tool_call", "broken"),
        ("tool_result", "broken"),
        ("span", "helper"),
        ("model", None),
    ]
    root, first_model = events[0], events[1]
    assert root["type"] == "agent" and "Paris" in root["text"]
    assert first_model["text"] == "Step 1: I will look at the next page of results."
    assert first_model["parent"] == root["id"] and first_model["agent"] == "researcher"
    assert events[2]["args"] == {"query": "paris"} and events[3]["id"] == events[2]["id"]
    assert events[3]["text"] == '["doc a","doc b"]'
    assert events[5]["error"] is True and "/missing" in events[5]["text"]
    assert events[7]["agent"] == "helper" and events[7]["parent"] == events[6]["id"]


def nest(depth: int, text: str = "same task") -> dict[str, Any]:
    span: dict[str, Any] = {"name": "planner", "type": "agent", "input": text, "children": []}
    root = span
    for _ in range(depth - 1):
        child = {"name": "planner", "type": "agent", "input": text, "children": []}
        span["children"].append(child)
        span = child
    return root


def test_an_agent_delegating_to_itself_is_caught_even_very_deep() -> None:
    report = scan(span_to_events(nest(3)), config=Config())
    assert report.first_stop == 2 and report.findings[-1].detector == "recursion"
    deep = span_to_events(nest(20_000))  # no RecursionError
    assert len(deep) == 20_000


def test_looks_like_tells_span_dicts_from_other_json() -> None:
    span = traced(six_identical_calls)
    assert looks_like(span) and looks_like([span, span])
    assert not looks_like([])
    assert not looks_like({"run_id": "r", "events": []})
    assert not looks_like({"name": "x", "type": "agent"})  # no children
    assert not looks_like([span, {"run_id": "r", "events": []}])
    assert not looks_like({"resourceSpans": []})
    assert not looks_like("text")


def test_runs_from_obj_reports_bad_items_and_keeps_the_rest() -> None:
    span = traced(six_identical_calls)
    out = list(runs_from_obj([span, 42, span], "traces.json", 3))
    assert isinstance(out[0], TraceRun) and isinstance(out[2], TraceRun)
    assert isinstance(out[1], InputError)
    assert str(out[1]).startswith("traces.json:3: item 1: expected a deepeval span")
    assert out[0].run_id == "traces.json:3[0]" and out[2].run_id == "traces.json:3[2]"
    assert out[0].events == span_to_events(span)
    assert out[0].meta == {"format": "deepeval", "name": "researcher"}
    single = list(runs_from_obj(dict(span, uuid="u-1"), "t.json", None))
    assert [r.run_id for r in single if isinstance(r, TraceRun)] == ["u-1"]
    bad = list(runs_from_obj({"events": []}, "t.json", 1))
    assert len(bad) == 1 and isinstance(bad[0], InputError)


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=8))
span_type = st.sampled_from(["agent", "llm", "tool", "retriever", "base", "custom"])
spans = st.recursive(
    st.fixed_dictionaries(
        {"name": st.sampled_from(["a", "b", "search"]), "type": span_type, "input": json_leaf},
        optional={"output": json_leaf, "error": st.sampled_from([None, "boom"])},
    ).map(lambda d: {**d, "children": []}),
    lambda children: st.tuples(
        st.fixed_dictionaries(
            {"name": st.sampled_from(["a", "b"]), "type": span_type, "input": json_leaf}
        ),
        st.lists(st.one_of(children, json_leaf), max_size=4),
    ).map(lambda pair: {**pair[0], "children": pair[1]}),
    max_leaves=25,
)


@settings(max_examples=150, deadline=None)
@given(spans)
def test_span_tree_events_are_well_formed(span: dict[str, Any]) -> None:
    events = span_to_events(span)
    seen_ids: set[str] = set()
    open_calls: dict[str, int] = {}
    for index, event in enumerate(events):
        parent = event.get("parent")
        assert parent is None or parent in seen_ids, "a parent always comes first"
        if event["kind"] == "tool_call":
            open_calls[event["id"]] = index
        if event["kind"] == "tool_result":
            assert event["id"] in open_calls, "a result follows its call"
            del open_calls[event["id"]]
        if "id" in event:
            seen_ids.add(event["id"])
    assert not open_calls, "every call has its result"
    # the metric's verdict equals a guard fed the same events one by one
    guard = Guard(Config())
    stops = [i for i, e in enumerate(events) if guard.observe("p", e).action == "stop"]
    assert (stops[0] if stops else None) == scan(events, config=Config()).first_stop


# -- the score: verdict bands (issue 14) --------------------------------------------------------
def test_the_score_bands_follow_the_guards_verdict() -> None:
    """Clean 1.0; warned below 0.5 (fails the default threshold); stopped below 0.3."""
    three = traced(lambda: [web_search(q="paris weather") for _ in range(3)])
    scores = {}
    for name, trace in (("ok", traced(paging)), ("warn", three),
                        ("stop", traced(six_identical_calls))):  # fmt: skip
        # pinned: the bands are under test, not the default ladder
        metric = LoopwatchMetric(repeated_call={"warn_at": 3, "stop_at": 5})
        metric.measure(case(trace))
        assert metric.report is not None and metric.report.verdict == name
        scores[name] = metric.score
        assert metric.success is (name == "ok")
    assert scores["ok"] == 1.0
    assert 0.3 <= scores["warn"] < 0.5
    assert 0.0 <= scores["stop"] < 0.3


def test_within_a_band_the_scans_score_orders_runs() -> None:
    five = LoopwatchMetric()
    five.measure(case(traced(lambda: [web_search(q="paris weather") for _ in range(5)])))
    twelve = LoopwatchMetric()
    twelve.measure(case(traced(lambda: [web_search(q="paris weather") for _ in range(12)])))
    assert five.report is not None and twelve.report is not None
    assert five.report.verdict == twelve.report.verdict == "stop"
    assert twelve.report.score <= five.report.score
    assert twelve.score <= five.score < 0.3
    assert metric_score(five.report) == five.score


# -- deepeval's own test-run file --------------------------------------------------------------
def test_scan_reads_the_test_run_file_deepeval_writes(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``evals_iterator`` leaves ``.deepeval/.latest_test_run.json``; ``loopwatch scan
    --format deepeval`` (and sniffing) reads one run per test case from it, in the
    order the live metric saw."""
    monkeypatch.chdir(tmp_path)

    @observe(type="agent", name="researcher")
    def agent(question: str) -> str:
        for step in range(6):
            # The file orders spans only by start times in milliseconds, converted from
            # perf_counter with the wall clock read anew each time: spans under a few ms
            # apart can swap on a loaded machine. Real steps are farther apart.
            time.sleep(0.005)
            think(step)
            time.sleep(0.005)
            web_search(q="paris weather")
        return "done"

    live = LoopwatchMetric()
    dataset = EvaluationDataset(
        goldens=[Golden(input="What is the weather in Paris?"), Golden(input="And in Rome?")]
    )
    for golden in dataset.evals_iterator(
        metrics=[live],
        async_config=AsyncConfig(run_async=False),
        display_config=DisplayConfig(show_indicator=False, print_results=False),
    ):
        agent(golden.input)
    path = tmp_path / ".deepeval" / ".latest_test_run.json"
    assert path.exists()
    for fmt in (None, "deepeval"):
        items = list(read_runs(str(path), fmt))
        runs = [i for i in items if isinstance(i, TraceRun)]
        assert [i for i in items if isinstance(i, InputError)] == []
        assert [r.meta["input"] for r in runs] == [g.input for g in dataset.goldens]
        for run in runs:
            kinds = [e["kind"] for e in run.events]
            assert kinds == ["span"] + ["model", "tool_call", "tool_result"] * 6
            report = scan(run.to_dict(), Config())
            assert live.report is not None
            assert (report.verdict, report.first_stop) == ("stop", live.report.first_stop)
