"""Shared fixtures and helpers for the test suite."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

DATA = Path(__file__).parent / "data"

# Under CI the property tests draw the same examples on every run: a submission passes
# or fails on its own code, not on a fresh draw (a rare counterexample once failed one
# run of an unchanged suite). Run locally, each run draws new examples, which is how
# the fuzz tests keep finding bugs; a counterexample found that way becomes a test.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


def load_scenarios(name: str = "conformance.jsonl") -> list[dict[str, Any]]:
    with open(DATA / name, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


def meets_expectation(
    expect: dict[str, Any], first_warn: int | None, first_stop: int | None
) -> str:
    """'' if a scan result meets a scenario's ``expect`` (scenarios/README.md), else why not."""
    verdict = expect["verdict"]
    problems = []
    if verdict == "ok" and (first_warn is not None or first_stop is not None):
        problems.append("expected no warn and no stop")
    elif verdict == "not_stop" and first_stop is not None:
        problems.append("expected no stop")
    elif (
        verdict in ("warn", "stop")
        and "warn_by" in expect
        and (first_warn is None or first_warn > expect["warn_by"])
    ):
        problems.append(f"expected a warn by step {expect['warn_by']}")
    if verdict == "stop" and (first_stop is None or first_stop > expect["stop_by"]):
        problems.append(f"expected a stop by step {expect['stop_by']}")
    early = expect.get("warn_not_before")
    if early is not None and first_warn is not None and first_warn < early:
        problems.append(f"warned before step {early}")
    return "; ".join(problems)


@pytest.fixture
def scenarios() -> list[dict[str, Any]]:
    return load_scenarios()


@pytest.fixture(autouse=True)
def short_lived_hook_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests run ``loopwatch hook`` commands (the hook tests, and the real CLIs whose
    hooks are installed), which start hook daemons, one per state folder: those
    started here exit a few seconds after their test's last call instead of the
    default ten minutes. (Here, not in tests/hooks/conftest.py: a second module named
    conftest would shadow this one for the tests that import its helpers.)"""
    monkeypatch.setenv("LOOPWATCH_HOOK_DAEMON_IDLE", "5")
