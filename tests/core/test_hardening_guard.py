"""The guard and its memory store under misuse and idleness: caller mistakes are
told apart from loopwatch bugs, and a run's TTL holds on every access."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from loopwatch import Config, Guard
from loopwatch.state import RunState
from loopwatch.stores import MemoryStore

SEARCH = {"kind": "tool_call", "name": "search", "args": {"q": "x"}}


def clocked(max_runs: int = 10, ttl: float = 60) -> tuple[MemoryStore, list[float]]:
    store = MemoryStore(max_runs=max_runs, ttl_seconds=ttl)
    now = [1000.0]
    store._clock = lambda: now[0]
    return store, now


# -- memory store TTL -----------------------------------------------------------------
def test_ttl_is_honoured_on_every_access_not_only_on_overflow() -> None:
    store, now = clocked(max_runs=10, ttl=60)
    guard = Guard(Config(), store=store)
    for run in ("a", "b", "c"):
        guard.observe(run, SEARCH)
    assert len(store) == 3
    now[0] += 30
    guard.observe("c", SEARCH)  # c is touched, a and b are not
    now[0] += 31  # a and b idle for 61 s, c for 31 s
    assert store.get("a") is None and store.get("b") is None
    assert store.get("c") is not None and len(store) == 1
    # an expired run starts afresh at step 0
    assert guard.observe("a", SEARCH).step == 0
    assert guard.observe("c", SEARCH).step == 2


def test_idle_runs_do_not_pile_up_below_max_runs() -> None:
    store, now = clocked(max_runs=10_000, ttl=60)
    guard = Guard(Config(), store=store)
    for i in range(1000):
        guard.observe(f"run-{i}", SEARCH)
        now[0] += 1  # one new run a second, each idle afterwards
    assert len(store) <= 61


@pytest.mark.parametrize("ttl", [0, -1, 0.0, "1h", True])
def test_a_ttl_that_would_guard_nothing_is_refused(ttl: Any) -> None:
    with pytest.raises(ValueError, match="ttl_seconds"):
        MemoryStore(ttl_seconds=ttl)


def test_no_ttl_means_runs_never_expire() -> None:
    store = MemoryStore(max_runs=5, ttl_seconds=None)
    now = [0.0]
    store._clock = lambda: now[0]
    store.apply("a", lambda s: None, RunState)
    now[0] += 10**9
    assert store.get("a") is not None and len(store) == 1


# -- caller mistakes ---------------------------------------------------------------------
@pytest.mark.parametrize("event", [None, "tool_call", 42, ["kind", "tool_call"]])
def test_an_event_that_is_not_an_event_is_a_caller_mistake_logged_once(
    caplog: pytest.LogCaptureFixture, event: Any
) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.DEBUG, logger="loopwatch"):
        first = guard.observe("r", event)
        second = guard.observe("r", event)
    for verdict in (first, second):
        assert verdict.action == "ok" and verdict.step == -1
        assert verdict.extra.get("caller_error") is True
        assert "ValueError" in verdict.extra["error"] and "needs an event" in verdict.extra["error"]
    records = [r for r in caplog.records if r.name == "loopwatch"]
    assert len(records) == 1 and records[0].levelno == logging.WARNING
    assert "internal error" not in records[0].getMessage()
    assert guard.state("r") is None  # nothing was observed


def test_a_run_id_that_is_not_a_string_is_a_caller_mistake(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        verdict = guard.observe(None, SEARCH)  # type: ignore[arg-type]
    assert verdict.extra.get("caller_error") is True and "run_id" in verdict.extra["error"]
    assert [r.levelno for r in caplog.records] == [logging.WARNING]


def test_a_whole_number_run_id_is_the_run_of_its_decimal_string(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        steps = [guard.observe(7, SEARCH).step, guard.observe("7", SEARCH).step]
    assert steps == [0, 1] and not caplog.records  # one run, no error logged
    assert guard.state("7") is not None


def test_an_unknown_kind_is_counted_and_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        steps = [guard.observe("r", {"kind": "tool-call", "name": "search"}).step for _ in range(3)]
        steps.append(guard.observe("r", SEARCH).step)
    assert steps == [0, 1, 2, 3]  # indices kept, as the offline scan keeps them
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 1 and "'tool-call'" in messages[0] and "tool_call" in messages[0]


def test_async_observe_reports_caller_mistakes_the_same_way(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        verdict = asyncio.run(guard.aobserve("r", None))  # type: ignore[arg-type]
    assert verdict.extra.get("caller_error") is True
    assert len(caplog.records) == 1 and caplog.records[0].levelno == logging.WARNING


def test_a_loopwatch_bug_is_still_an_internal_error(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    guard = Guard(Config())

    def broken(state: Any, event: Any) -> Any:
        raise ZeroDivisionError("bug")

    monkeypatch.setattr(guard.engine, "step", broken)
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        verdict = guard.observe("r", SEARCH)
    assert "caller_error" not in verdict.extra
    assert [r.levelno for r in caplog.records] == [logging.ERROR]
    assert "internal error" in caplog.records[0].getMessage()


def test_the_same_mistake_with_different_values_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    guard = Guard(Config())
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        for value in range(50):
            guard.observe("r", value)  # type: ignore[arg-type]
    assert len(caplog.records) == 1 and "not int" in caplog.records[0].getMessage()
