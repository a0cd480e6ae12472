"""Waiting is not looping: polls are judged by a wait budget, not by repetition."""

from __future__ import annotations

import time
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from runs import Events, run, tool

from loopwatch import Config, Guard, WaitBudget, scan
from loopwatch.fingerprints import declared_wait, reports_pending, waiting_tool

RUNNING = '{"status": "in_progress", "name": "CI", "jobs": 4}'


def ci_wait(checks: int, command: str = "sleep 60; gh run view 42 --json status") -> Events:
    events: Events = []
    for _ in range(checks):
        events += tool("Bash", {"command": command}, RUNNING)
    return events


def test_a_status_checked_with_a_wait_between_is_not_stopped_for_repeating() -> None:
    # ten checks, a minute apart, the same "still running" each time: the task says to
    # wait for the CI run
    report = scan(
        run(ci_wait(10) + tool("Bash", {"command": "gh run view 42"}, "success")), Config()
    )
    assert report.verdict == "ok", report.to_dict()


def test_a_separate_wait_between_checks_makes_the_check_a_poll() -> None:
    events: Events = []
    for _ in range(8):
        events += tool("Bash", {"command": "sleep 30"}, "")
        events += tool("Bash", {"command": "kubectl get deploy web -o name"}, "deploy/web 1/3")
    assert scan(run(events), Config()).verdict == "ok"


def test_a_poll_past_the_wait_budget_is_stopped_with_a_message_that_says_it_waited() -> None:
    report = scan(run(ci_wait(40)), Config())
    assert report.verdict == "stop"
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "wait_budget"
    assert "You have waited for" in stop.message and "wait budget" in stop.message
    warn = next(f for f in report.findings if f.detector == "wait_budget")
    assert warn.severity.value == "warn" and "half spent" in warn.message
    # the budget in time: 30 minutes of sleep 60 is reached before 30 checks
    assert report.first_stop is not None and report.first_stop < 2 * 32


def test_the_wait_budget_is_the_users_to_set() -> None:
    longer = Config.from_mapping({"wait_budget": {"max_seconds": "2h", "max_attempts": 200}})
    assert scan(run(ci_wait(40)), longer).verdict == "ok"
    shorter = Config.from_mapping({"wait_budget": {"max_seconds": "5m"}})
    report = scan(run(ci_wait(10)), shorter)
    assert report.verdict == "stop"


def test_event_times_measure_the_wait_when_the_trace_has_them() -> None:
    events: Events = []
    for i in range(12):
        t = 1_700_000_000 + 600 * i  # a check every ten minutes
        events += [
            {"kind": "tool_call", "name": "get_job_status", "args": {"job": "j"}, "ts": t},
            {"kind": "tool_result", "name": "get_job_status", "text": "pending", "ts": t + 1},
        ]
    report = scan(run(events), Config())
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "wait_budget" and "min" in stop.message


def test_checking_without_waiting_is_warned_early_never_stopped_for_repeating() -> None:
    events: Events = []
    for _ in range(12):
        events += tool("get_job_status", {"job": "j-881"}, "status: pending")
    report = scan(run(events), Config())
    assert report.first_warn == 9  # the 5th check
    assert report.findings[0].detector == "wait_budget"
    assert "Wait between checks" in report.findings[0].message
    assert report.first_stop is None


def test_a_check_that_waits_an_unstated_time_is_not_checking_at_once() -> None:
    # ``--watch`` blocks until the status changes or the command gives up: each check
    # waited, for how long the trace does not say
    report = scan(run(ci_wait(8, "gh pr checks 42 --watch")), Config())
    assert report.verdict == "ok", report.to_dict()
    # the same checks without the watch are checking at once
    assert scan(run(ci_wait(8, "gh pr checks 42")), Config()).first_warn is not None


def test_a_scan_takes_no_time_for_events_that_carry_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # a machine that stalls a minute between two events (swapping, a paused worker):
    # the run recorded no times, so the report is the one a fast machine makes
    events: Events = []
    for _ in range(12):
        events += tool("get_job_status", {"job": "j-881"}, "status: pending")
    expected = scan(run(events), Config()).to_dict()
    wall = iter(range(1_800_000_000, 1_900_000_000, 60))
    monkeypatch.setattr(time, "time", lambda: float(next(wall)))
    stalled = scan(run(events), Config()).to_dict()
    assert stalled == expected
    assert "5 checks over 0 s" in expected["findings"][0]["message"]


def test_a_service_not_up_yet_is_waited_for_not_an_error_loop() -> None:
    events: Events = []
    for i in range(4):
        events += tool(
            "Bash", {"command": f"sleep {2**i}; curl -s localhost:8080/health"},
            "curl: (7) Failed to connect to localhost port 8080", error=True,
        )  # fmt: skip
    assert scan(run(events), Config()).verdict == "ok"


def test_the_same_failing_command_without_a_wait_is_still_an_error_loop() -> None:
    events: Events = []
    for _ in range(5):
        events += tool(
            "Bash",
            {"command": "curl -s localhost:8080/health"},
            "curl: (7) Failed to connect to localhost port 8080",
            error=True,
        )
    assert scan(run(events), Config()).verdict == "stop"


def test_a_status_that_changes_starts_the_count_again() -> None:
    events: Events = []
    for i in range(40):
        events += tool(
            "Bash", {"command": "sleep 60; gh run view 42"}, f"running: {i // 5} of 8 jobs"
        )
    assert scan(run(events), Config()).verdict == "ok"


@pytest.mark.parametrize(
    ("command", "seconds"),
    [
        ("sleep 30; gh run view 1", 30.0),
        ("sleep 5m && check", 300.0),
        ("kubectl rollout status deploy/x --watch", 0.0),
        ("gh run watch 123", 0.0),
        ("docker compose up --wait", 0.0),
        ("timeout 60 pytest -x", None),  # bounds a command, waits for nothing
        ("pytest -x", None),
        ("git status", None),
    ],
)
def test_a_command_that_waits(command: str, seconds: float | None) -> None:
    assert declared_wait(command) == seconds


def test_tools_named_to_wait_and_results_that_say_not_yet() -> None:
    assert waiting_tool("wait_for_job") and waiting_tool("poll") and waiting_tool("WaitForIt")
    assert not waiting_tool("awaitable") and not waiting_tool("stopwatch")
    assert not waiting_tool("get_job_status")  # a status check: its result tells
    assert reports_pending("status: pending") and reports_pending("Deployment still running")
    assert reports_pending('{"id": 1, "status": "in_progress"}' + " " * 300)
    assert not reports_pending("Running 5 tests" + "." * 300)  # a log, not a status
    assert not reports_pending("FAILED tests/x.py")
    # said in other words: still being made, not done yet, come back later
    for not_yet in (
        "Export is still being prepared. Try again later.",
        "Your report is not ready yet.",
        "The index build is not finished yet",
        "Results not yet available for job 9",
        "Generating thumbnails (12/40)",
        "Loading dashboard...\n[spinner]",  # a browser agent's page that has not loaded
        "Please wait while we verify your browser.",
    ):
        assert reports_pending(not_yet), not_yet
    # an error is not a wait: a flight not available will not become available by polling
    assert not reports_pending("Error: flight HAT030 not available on date 2024-05-13")
    assert not reports_pending("Task complete: the report is ready.")


@pytest.mark.parametrize(
    ("text", "pending"),
    [
        # kubectl's STATUS column while a pod comes up
        ("NAME      READY   STATUS              AGE\nweb-7d9   0/1     ContainerCreating", True),
        ("NAME      READY   STATUS     RESTARTS   AGE\nweb-7d9   0/1     Init:0/2   0", True),
        ("web-7d9   0/1     PodInitializing   0          12s", True),
        ("web-7d9   0/1     CrashLoopBackOff   3          2m", False),  # a failure
        # a cloud status that names its action first, in a compound field
        ('{"StackStatus": "CREATE_IN_PROGRESS"}', True),
        (
            '{"Stacks": [{"StackName": "web", "StackStatus": "UPDATE_IN_PROGRESS"}]}' + " " * 300,
            True,
        ),
        ('{"StackStatus": "CREATE_COMPLETE"}', False),
        ('{"status": "InProgress"}', True),
        # a lower-case prefix is a name, not an action: a test called test_loading
        ("tests/test_loading.py::test_loading PASSED", False),
        ("ERROR tests/test_processing.py - ImportError", False),
    ],
)
def test_statuses_of_deployments_and_stacks_on_their_way(text: str, pending: bool) -> None:
    assert reports_pending(text) is pending


def test_a_stack_polled_while_it_is_created_is_judged_by_the_wait_budget() -> None:
    """Eight identical answers that the stack is still being created: a poll (once
    stopped for repeating at the 4th check), not a loop."""
    events: Events = []
    for _ in range(8):
        events += tool(
            "aws",
            {"command": "cloudformation describe-stacks --stack-name web"},
            '{"Stacks": [{"StackName": "web", "StackStatus": "CREATE_IN_PROGRESS"}]}',
        )
    report = scan(run(events), Config())
    assert report.verdict != "stop", report.to_dict()
    assert {f.detector for f in report.findings} <= {"wait_budget"}


def test_wait_budget_refuses_nonsense() -> None:
    with pytest.raises(ValueError, match="max_seconds"):
        WaitBudget(max_seconds=0)
    with pytest.raises(Exception, match="max_attempts"):
        Config.from_mapping({"wait_budget": {"max_attempts": -1}})


@settings(max_examples=40, deadline=None)
@given(checks=st.integers(1, 45), seconds=st.sampled_from([10, 30, 60, 120]))
def test_guard_and_scan_agree_on_polls(checks: int, seconds: int) -> None:
    events = ci_wait(checks, f"sleep {seconds}; gh run view 42")
    report = scan(run(events), Config())
    guard = Guard(Config())
    actions: list[Any] = [guard.observe("p", ev).action for ev in events]
    first_stop = next((i for i, a in enumerate(actions) if a == "stop"), None)
    assert first_stop == report.first_stop
    # the wait is stopped only past the budget (30 checks or 30 minutes), never before
    if report.first_stop is not None:
        assert checks > 30 or checks * seconds > 1800
