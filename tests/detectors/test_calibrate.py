"""Calibration meets a false-stop budget on runs it has not seen and keeps loops stopped."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from conftest import load_scenarios
from runs import model, run, tool

from loopwatch import Config, scan
from loopwatch.calibrate import calibrate, wilson_upper
from loopwatch.cli import main

# How many times a healthy agent re-reads a quota that has not moved yet (this user's
# traffic: a budget watched before each batch); with the final read that sees it move,
# the same call is made up to 6 times. Not a wait (no pending status, no sleep): the
# defaults judge it as a repeat, which this traffic calibrates away.
SAME_READS = {1: 0.30, 2: 0.25, 3: 0.20, 4: 0.15, 5: 0.10}
QUOTA = "quota: 120 of 1000 requests used today, resets at midnight UTC"


def healthy_run(rng: random.Random, i: int) -> dict[str, Any]:
    """Distinct work, then the same quota read k times before it moves."""
    events: list[dict[str, Any]] = [model("Starting the export job.")]
    for step in range(rng.randint(2, 6)):
        events += tool("read_file", {"path": f"src/f{i}_{step}.py"}, f"contents {i} {step}")
    k = rng.choices(list(SAME_READS), weights=list(SAME_READS.values()))[0]
    for _ in range(k):
        events += tool("get_quota", {"user": f"u{i}"}, QUOTA)
    events += tool("get_quota", {"user": f"u{i}"}, QUOTA.replace("120", "0"))
    events.append(model("The export finished."))
    return run(events, f"healthy-{i}")


@pytest.fixture(scope="module")
def healthy() -> list[dict[str, Any]]:
    rng = random.Random(20261121)
    return [healthy_run(rng, i) for i in range(400)]


def stop_rate(runs: list[dict[str, Any]], config: Config) -> float:
    return sum(scan(r, config).verdict == "stop" for r in runs) / len(runs)


def test_calibration_meets_the_budget_on_held_out_runs(healthy: list[dict[str, Any]]) -> None:
    train, held_out = healthy[::2], healthy[1::2]
    assert stop_rate(held_out, Config()) > 0.02  # the defaults stop this benign repeat
    result = calibrate(train, target_false_stop=0.01)
    assert result.stops_after <= 0.01 * len(train)
    assert stop_rate(held_out, result.config) <= 0.02
    assert "repeated_call.stop_at" in result.changes
    old, new = result.changes["repeated_call.stop_at"]
    assert (old, new) == (3, 7)  # one past the longest benign streak (6), no further

    # ...and the loops in the conformance scenarios are still stopped.
    for scenario in load_scenarios():
        if scenario["expect"]["verdict"] == "stop":
            assert scan(scenario, result.config).verdict == "stop", scenario["run_id"]


def test_calibration_changes_nothing_when_already_within_budget() -> None:
    runs = [run([model(f"hello {i}"), *tool("a", {"i": i}, f"r{i}")]) for i in range(50)]
    result = calibrate(runs, 0.0)
    assert result.changes == {} and result.stops_before == result.stops_after == 0


def test_wilson_bound_is_honest_about_small_samples() -> None:
    assert wilson_upper(0, 30) > 0.1
    assert wilson_upper(0, 3000) < 0.002
    assert wilson_upper(5, 100) > 0.05


def test_calibrate_cli_writes_a_valid_configuration(
    tmp_path: Path, healthy: list[dict[str, Any]], capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    good = tmp_path / "good.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in healthy[:200]))
    out = tmp_path / "loopwatch.toml"
    assert main(["calibrate", str(good), "--target-false-stop", "0.01", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    # the defaults stop the 3rd read of an unmoved quota: calibration raises it to 7
    assert "repeated_call.stop_at: 3 -> 7" in printed and "upper bound" in printed
    loaded = Config.load(out)
    assert loaded.sections["repeated_call"]["stop_at"] == 7
    assert main(["calibrate", str(good), "--target-false-stop", "2"]) == 2
