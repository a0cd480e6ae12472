"""Every labelled scenario meets its expectation with the default configuration."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import load_scenarios, meets_expectation

from loopwatch import Config, Guard, scan

# conformance.jsonl (first round) and intent.jsonl (repeated intent and its
# look-alikes that are progress), both copied verbatim from shared/scenarios.
SCENARIOS = load_scenarios() + load_scenarios("intent.jsonl")


@pytest.mark.parametrize("run", SCENARIOS, ids=[r["run_id"] for r in SCENARIOS])
def test_scan_meets_expectation(run: dict[str, Any]) -> None:
    report = scan(run, Config())
    problem = meets_expectation(run["expect"], report.first_warn, report.first_stop)
    assert not problem, f"{run['run_id']}: {problem} (got {report.to_dict()})"


@pytest.mark.parametrize("run", SCENARIOS, ids=[r["run_id"] for r in SCENARIOS])
def test_guard_replay_meets_expectation(run: dict[str, Any]) -> None:
    guard = Guard(Config())
    first_warn = first_stop = None
    for step, event in enumerate(run["events"]):
        verdict = guard.observe(run["run_id"], event)
        assert verdict.step == step
        if verdict.action != "ok" and first_warn is None:
            first_warn = step
        if verdict.action in ("stop", "skip") and first_stop is None:
            first_stop = step
    assert not meets_expectation(run["expect"], first_warn, first_stop)


@pytest.mark.parametrize("name", ["conformance.jsonl", "intent.jsonl"])
def test_scenario_file_has_both_loops_and_healthy_runs(name: str) -> None:
    verdicts = {r["expect"]["verdict"] for r in load_scenarios(name)}
    assert {"ok", "stop"} <= verdicts
