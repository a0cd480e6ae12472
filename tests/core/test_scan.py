"""The offline report: score, verdict, iteration metrics (Needlr's semantics)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from runs import model, run, tool
from test_parity import on_loops, runs

from loopwatch import Config, read_runs, scan
from loopwatch.scan import score_of

# The score's bands (docs/concepts/verdicts.md): the verdict decides the band.
BANDS = {"ok": (1.0, 1.0), "warn": (0.5000001, 0.8), "stop": (0.0, 0.4)}


def test_six_identical_calls_score_clearly_below_half() -> None:
    events: list[dict[str, Any]] = []
    for _ in range(6):
        events += tool("web_search", {"q": "paris weather"}, "18C cloudy")
    report = scan(run(events), Config())
    assert report.verdict == "stop"
    assert report.score < 0.4  # deepeval's metric passes this run at its 0.5 threshold
    assert report.breakdown["repeated_call"] < 0.5


def test_clean_run_scores_one_and_warn_only_stays_above_half() -> None:
    assert scan(run([model("hello"), *tool("a", {}, "b")]), Config()).score == 1.0
    # a call that gave the same detailed answer twice: told, a warning only
    answer = "Paris: 18C, cloudy, light wind from the west, no rain until Friday."
    events: list[dict[str, Any]] = []
    for _ in range(2):
        events += tool("web_search", {"q": "x"}, answer)
    report = scan(run(events), Config())
    assert report.verdict == "warn" and 0.5 < report.score < 1.0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_events=runs, on_loop=on_loops)
def test_the_score_is_in_the_band_of_the_verdict(
    run_events: list[dict[str, Any]], on_loop: str
) -> None:
    """Any stopped run scores below any warned run, which scores below any clean run,
    whatever the detectors found and whatever on_loop turns stop findings into."""
    report = scan(run(run_events), Config.from_mapping({"on_loop": on_loop}))
    low, high = BANDS[report.verdict]
    assert low <= report.score <= high, (report.verdict, report.score, report.breakdown)


def test_many_warning_detectors_still_score_above_any_stop() -> None:
    # 0.8 per warning detector multiplied used to fall below a stop's 0.4 at 4 detectors
    breakdown = {f"d{i}": 0.8 for i in range(10)}
    assert 0.5 < score_of("warn", breakdown) < score_of("warn", {"d": 0.8}) == 0.8
    assert score_of("stop", {"d": 0.4}) == 0.4
    # under on_loop = "warn" a stop-level finding is a warning: still in the warn band
    assert 0.5 < score_of("warn", {"d": 0.4}) < 0.8


def test_scan_says_what_it_takes(tmp_path: Any) -> None:
    path = tmp_path / "traces.jsonl"
    call = {"kind": "tool_call", "name": "s", "args": {"q": 1}}
    events = [call, {"kind": "tool_result", "name": "s", "text": "same"}] * 6
    path.write_text(json.dumps({"run_id": "r", "events": events}) + "\n")
    for wrong in (str(path), path, str(path).encode()):
        with pytest.raises(TypeError, match=r"not a path .*read_runs"):
            scan(wrong, Config())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"scan\(\) takes one run.*not int"):
        scan(42, Config())  # type: ignore[arg-type]
    with pytest.raises(TypeError, match=r"no 'events' .*keys: args, kind, name"):
        scan(call, Config())
    with pytest.raises(TypeError, match="'events' of type str"):
        scan({"run_id": "r", "events": "oops"}, Config())
    (item,) = list(read_runs(str(path)))
    assert scan(item, Config()).verdict == "stop"  # what the message tells you to do
    (bad,) = list(read_runs(str(tmp_path / "missing.jsonl")))
    with pytest.raises(TypeError, match="not an InputError"):
        scan(bad, Config())  # type: ignore[arg-type]


def test_score_decreases_as_the_loop_goes_on() -> None:
    scores = []
    for n in (3, 5, 8, 12):
        events: list[dict[str, Any]] = []
        for _ in range(n):
            events += tool("s", {"q": "x"}, "same")
        scores.append(scan(run(events), Config()).score)
    assert scores == sorted(scores, reverse=True) and scores[0] > scores[-1]


def test_iteration_metrics() -> None:
    events = [
        model("Let me look."),
        *tool("read", {"p": 1}, "text"),
        model(""),  # an empty iteration: no text, no tool call
        model(""),  # empty output followed by a tool call: a tool-only iteration
        *tool("read", {"p": 2}, "more"),
        model("Same answer."),
        model("same   answer."),
    ]
    metrics = scan(run(events), Config()).metrics
    assert metrics == {
        "iteration_count": 5,
        "empty_outputs": 1,
        "terminated_coherently": True,
        "efficiency_ratio": 0.8,
        "degenerate_loop": True,
        "max_iterations_hit": False,
        "outcome": None,
    }


def test_not_terminated_coherently_when_ending_on_a_tool_call_or_at_the_cap() -> None:
    events = [model("start"), *tool("x", {}, "y")]
    assert scan(run(events), Config()).metrics["terminated_coherently"] is False
    capped = Config.from_mapping({"max_iterations": 3})
    metrics = scan(run([model(f"t{i}") for i in range(3)]), capped).metrics
    assert metrics["max_iterations_hit"] is True and metrics["terminated_coherently"] is False
    no_cap = Config.from_mapping({"iteration_cap": {"enabled": False}})
    assert (
        scan(run([model(f"t{i}") for i in range(300)]), no_cap).metrics["max_iterations_hit"]
        is False
    )


def test_report_dict_follows_the_format_contract() -> None:
    events: list[dict[str, Any]] = []
    for _ in range(5):
        events += tool("s", {"q": "x"}, "same")
    out = scan(run(events, "r-17"), Config()).to_dict()
    assert out["run_id"] == "r-17" and out["verdict"] == "stop"
    assert out["first_warn"] <= out["first_stop"]
    steps = [f["step"] for f in out["findings"]]
    assert steps == sorted(steps)
    for finding in out["findings"]:
        assert set(finding) == {
            "detector", "severity", "step", "steps", "message", "count", "last_step"
        }  # fmt: skip
        assert finding["severity"] in ("warn", "stop")
        assert all(0 <= s <= finding["step"] for s in finding["steps"])
        assert finding["count"] >= 1 and finding["last_step"] >= finding["step"]


def test_unknown_kinds_keep_their_index() -> None:
    events: list[dict[str, Any]] = []
    for i in range(5):
        events.append({"kind": "heartbeat", "n": i})
        events += tool("s", {"q": "x"}, "same")
    report = scan(run(events), Config())
    # calls at 1, 4, 7, 10: the third is told, the fourth stopped (heartbeats counted)
    assert report.first_warn == 7 and report.first_stop == 10


def test_a_recorded_outcome_decides_whether_the_run_ended_well() -> None:
    events = [model("start"), *tool("x", {}, "y"), model("Here is the answer.")]
    assert scan(run(events), Config()).metrics["terminated_coherently"] is True
    for outcome, coherent in (("failed", False), ("cancelled", False), ("succeeded", True)):
        report = scan({**run(events), "outcome": outcome}, Config())
        assert report.metrics["outcome"] == outcome
        assert report.metrics["terminated_coherently"] is coherent
    # from meta, in the words exporters use; anything else is not recorded
    assert scan({**run(events), "meta": {"outcome": "ERROR"}}, Config()).metrics["outcome"] == (
        "failed"
    )
    assert scan({**run(events), "outcome": "maybe"}, Config()).metrics["outcome"] is None


def test_scan_takes_what_read_runs_returns(tmp_path: Any) -> None:
    from loopwatch import TraceRun, read_runs

    path = tmp_path / "runs.jsonl"
    events = [model("go"), *[e for _ in range(6) for e in tool("s", {"q": 1}, "same")]]
    path.write_text(json.dumps({"run_id": "a", "outcome": "failed", "events": events}) + "\n")
    (item,) = read_runs(str(path))
    assert isinstance(item, TraceRun)
    report = scan(item, Config())
    assert report.run_id == "a" and report.first_stop is not None
    assert report.metrics["outcome"] == "failed"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_events=runs)
def test_events_as_dicts_mappings_or_events_scan_alike(run_events: list[dict[str, Any]]) -> None:
    """The scan's loop (loopwatch.replay) takes a dict by a fast path and any other
    mapping, or an Event, by the general one: one run given each way is one report.
    Anything that is not an event keeps its index as an event of no kind."""
    from types import MappingProxyType

    from loopwatch import Event

    def reported(events: list[Any]) -> dict[str, Any]:
        return scan({"run_id": "r", "events": events}, Config()).to_dict()

    as_dicts = reported(run_events)
    assert reported([MappingProxyType(e) for e in run_events]) == as_dicts
    assert reported([Event.from_dict(e) for e in run_events]) == as_dicts
    padded = reported([*run_events, 42])
    assert padded == reported([*run_events, {}])
    assert padded["metrics"]["iteration_count"] == as_dicts["metrics"]["iteration_count"]
