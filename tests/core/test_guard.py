"""The runtime guard: actions, once-per-pattern warnings, eviction, concurrency, faults."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from runs import tool

from loopwatch import Config, Guard, MemoryStore, Store, StoreUnavailable
from loopwatch.stores.base import State

SEARCH = {"kind": "tool_call", "name": "web_search", "args": {"q": "paris weather"}}
RESULT = {"kind": "tool_result", "name": "web_search", "text": "18C cloudy"}


def loop(guard: Guard, run_id: str = "r", times: int = 6) -> list[str]:
    """Actions the guard answers to each repeated call."""
    actions = []
    for _ in range(times):
        verdict = guard.observe(run_id, SEARCH)
        actions.append(str(verdict.action))
        guard.observe(run_id, RESULT)
    return actions


def test_default_guard_tells_the_third_identical_call_and_stops_the_fourth() -> None:
    # two identical calls that returned the same short result: the third is known
    # futile before it runs, so it is not run and the agent is told why; the fourth,
    # told, is stopped
    guard = Guard(Config())
    assert loop(guard) == ["ok", "ok", "skip", "stop", "stop", "stop"]


def test_a_stop_is_told_first_and_the_message_says_when() -> None:
    guard = Guard(Config())
    verdicts = []
    for _ in range(4):
        verdicts.append(guard.observe("r", SEARCH))
        guard.observe("r", RESULT)
    told, stopped = verdicts[2], verdicts[3]
    assert told.should_skip and told.findings[0].severity.value == "warn"
    assert (told.message or "").endswith("If you do it again, the run will be stopped.")
    assert stopped.should_stop and "You were told at step 4." in (stopped.message or "")


def test_a_detailed_answer_given_twice_is_told_at_once() -> None:
    # a call that worked and answered the same in detail twice: the next one will too
    answer = {**RESULT, "text": "Paris: 18C, cloudy, light wind from the west, no rain."}
    guard = Guard(Config())
    actions = []
    for _ in range(3):
        actions.append(str(guard.observe("r", SEARCH).action))
        actions.append(str(guard.observe("r", answer).action))
    assert actions[:4] == ["ok", "ok", "ok", "warn"] and actions[4] == "stop"


def test_tell_first_false_stops_at_the_first_sure_finding() -> None:
    guard = Guard(Config(), tell_first=False)
    assert loop(guard) == ["ok", "ok", "stop", "stop", "stop", "stop"]


def test_warning_message_is_specific() -> None:
    guard = Guard(Config())
    verdicts = []
    for _ in range(3):
        verdicts.append(guard.observe("r", SEARCH))
        guard.observe("r", RESULT)
    msg = verdicts[-1].message or ""
    assert "web_search" in msg and "paris weather" in msg and "3 times" in msg
    assert "not executed" in msg  # the third call is told: it does not run
    assert verdicts[-1].findings[0].detector == "repeated_call"


def test_on_loop_skip_blocks_the_call_then_escalates_to_stop() -> None:
    guard = Guard(Config(), on_loop="skip")
    actions = loop(guard, times=8)
    # told (a skip), then three skips of calls known futile, then the stop
    assert actions == ["ok", "ok", "skip", "skip", "skip", "skip", "stop", "stop"]
    verdict = guard.observe("r", SEARCH)
    # A model that keeps making blocked calls would loop on the blocks for ever.
    assert verdict.should_stop and "stopped" in (verdict.message or "")
    fresh = Guard(Config(), on_loop="skip")
    loop(fresh, times=4)
    blocked = fresh.observe("r", SEARCH)
    assert blocked.should_skip and "not executed" in (blocked.message or "")


@pytest.mark.parametrize(
    "recorded",
    [
        "{message}",
        # Claude Code's transcript of a call its PreToolUse hook denied
        "PreToolUse:mcp__web__web_search hook error: {message}",
    ],
)
def test_loopwatchs_own_answer_recorded_as_the_result_is_not_the_tools(recorded: str) -> None:
    """A trace records the told call's answer where the tool's result would be: read
    back, it is not a new result that ends the streak, so the scan stops where the live
    guard did."""
    live, replayed = Guard(Config()), Guard(Config())
    for event in [SEARCH, RESULT, SEARCH, RESULT]:
        live.observe("r", event)
        replayed.observe("r", event)
    told = live.observe("r", SEARCH)
    assert told.should_skip and replayed.observe("r", SEARCH).should_skip
    answer = {"kind": "tool_result", "name": "web_search", "error": True}
    answer["text"] = recorded.format(message=told.message)
    assert replayed.observe("r", answer).action == "ok"
    assert replayed.observe("r", SEARCH).should_stop


def test_on_loop_warn_never_blocks() -> None:
    guard = Guard(Config(), on_loop="warn")
    assert "stop" not in loop(guard, times=8)
    assert "skip" not in loop(guard, "other", times=8)


def test_runs_are_independent_and_reset_forgets() -> None:
    guard = Guard(Config())
    for _ in range(4):
        guard.observe("a", SEARCH)
        guard.observe("a", RESULT)
    assert guard.observe("b", SEARCH).ok
    guard.reset("a")
    assert guard.state("a") is None
    assert guard.observe("a", SEARCH).ok


def test_lru_eviction_bounds_live_runs() -> None:
    guard = Guard(Config(), max_runs=100)
    for i in range(1000):
        guard.observe(f"run-{i}", SEARCH)
    assert len(guard.store) == 100
    assert guard.state("run-999") is not None and guard.state("run-0") is None


def test_a_run_observed_again_is_the_last_to_be_evicted() -> None:
    """Least recently *used*, not least recently started: a run observed again moves to
    the fresh end, and the run idle longest goes first."""
    guard = Guard(Config(), max_runs=3)
    for run in ("a", "b", "c", "a", "d"):
        guard.observe(run, SEARCH)
    assert guard.state("b") is None
    assert all(guard.state(run) is not None for run in ("a", "c", "d"))
    guard.observe("e", SEARCH)  # now c is the one idle longest
    assert guard.state("c") is None and guard.state("a") is not None


def test_ttl_expires_idle_runs() -> None:
    store = MemoryStore(max_runs=10, ttl_seconds=60)
    now = [1000.0]
    store._clock = lambda: now[0]
    guard = Guard(Config(), store=store)
    loop(guard, times=2)
    now[0] += 61  # idle past the TTL: the run starts afresh
    assert loop(guard, times=2) == ["ok", "ok"]
    now[0] += 10  # within the TTL: the same run goes on and reaches its stop
    assert loop(guard, times=2) == ["skip", "stop"]


def test_threads_lose_no_step() -> None:
    guard = Guard(Config())
    per_thread = 2000

    def work(k: int) -> None:
        for i in range(per_thread):
            guard.observe(f"run-{i % 5}", {"kind": "tool_call", "name": f"t{k}", "args": {"i": i}})

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    total = sum(guard.state(f"run-{r}").n for r in range(5))  # type: ignore[union-attr]
    assert total == 8 * per_thread


def test_asyncio_observe_matches_sync() -> None:
    async def main() -> list[str]:
        guard = Guard(Config())

        async def one(run_id: str) -> list[str]:
            out = []
            for _ in range(5):
                out.append(str((await guard.aobserve(run_id, SEARCH)).action))
                await guard.aobserve(run_id, RESULT)
                await asyncio.sleep(0)
            return out

        results = await asyncio.gather(*(one(f"r{i}") for i in range(20)))
        assert all(r == results[0] for r in results)
        return results[0]

    assert asyncio.run(main()) == loop(Guard(Config()), times=5)


def test_state_per_run_is_bounded_over_a_million_events() -> None:
    """A run that goes on forever must not grow its state (bytes per live run)."""
    guard = Guard(Config(), max_iterations=None)
    mix = []
    for i in range(50):
        mix.append({"kind": "model", "text": f"Thinking about step {i} of the plan. " * 5})
        mix += tool("read_file", {"path": f"src/m{i % 7}.py"}, f"contents {i % 11}")
        mix += tool("search", {"q": f"topic {i}"}, f"results for topic {i}", error=i % 9 == 0)
    sizes = []
    n = 0
    while n < 1_000_000:
        for ev in mix:
            guard.observe("long", ev)
        n += len(mix)
        if n in (len(mix) * 40, len(mix) * 4000):
            sizes.append(len(guard.state("long").to_bytes()))  # type: ignore[union-attr]
    final = len(guard.state("long").to_bytes())  # type: ignore[union-attr]
    assert guard.state("long").n == n  # type: ignore[union-attr]
    assert final < 32_000
    assert final <= max(sizes) * 1.05


class _FailingStore(Store):
    def __init__(self) -> None:
        self.down = True
        self.inner = MemoryStore()

    def apply(self, run_id: str, fn: Callable[[State], Any], factory: Callable[[], State]) -> Any:
        if self.down:
            raise StoreUnavailable("connection refused")
        return self.inner.apply(run_id, fn, factory)

    def get(self, run_id: str) -> State | None:
        if self.down:
            raise StoreUnavailable("connection refused")
        return self.inner.get(run_id)

    def reset(self, run_id: str) -> None:
        if self.down:
            raise StoreUnavailable("connection refused")
        self.inner.reset(run_id)

    def __len__(self) -> int:
        return len(self.inner)


def test_store_outage_allow_mode_logs_once_and_recovers(caplog: pytest.LogCaptureFixture) -> None:
    store = _FailingStore()
    guard = Guard(Config(), store=store)
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        verdicts = [guard.observe("r", SEARCH) for _ in range(3)]
    assert all(v.ok and not v.state_available for v in verdicts)
    assert sum("unavailable" in r.getMessage() for r in caplog.records) == 1
    store.down = False
    with caplog.at_level(logging.WARNING, logger="loopwatch"):
        assert guard.observe("r", SEARCH).state_available
    assert any("reachable again" in r.getMessage() for r in caplog.records)


def test_store_outage_raise_mode() -> None:
    guard = Guard(Config(), store=_FailingStore(), on_store_error="raise")
    with pytest.raises(StoreUnavailable):
        guard.observe("r", SEARCH)


def test_guard_accepts_events_or_dicts_and_rejects_bad_options() -> None:
    from loopwatch import ConfigError, Event

    guard = Guard(Config())
    assert guard.observe("r", Event("tool_call", name="x", args={})).ok
    with pytest.raises(ConfigError, match="on_loop"):
        Guard(Config(), on_loop="explode")
    with pytest.raises(ConfigError, match="valid keys"):
        Guard(Config(), repeated_call={"warn_after": 2})


def test_reset_and_state_follow_the_store_error_policy() -> None:
    allow = Guard(Config(), store=_FailingStore())
    allow.reset("r")  # logs, does not raise
    assert allow.state("r") is None
    strict = Guard(Config(), store=_FailingStore(), on_store_error="raise")
    with pytest.raises(StoreUnavailable):
        strict.reset("r")
    asyncio.run(allow.aclose())


def test_a_detector_bug_does_not_take_the_agent_down(caplog: pytest.LogCaptureFixture) -> None:
    from loopwatch import Detector, RepeatedCall, scan

    class Broken(Detector):
        name = "broken"
        kinds = frozenset({"tool_call"})

        def observe(self, ctx: Any) -> None:
            raise ZeroDivisionError("oops")

    guard = Guard(Config(), detectors=[RepeatedCall(), Broken()])
    with caplog.at_level(logging.ERROR, logger="loopwatch"):
        verdicts = [guard.observe("r", SEARCH) for _ in range(3)]
    assert all(v.ok and v.extra.get("error") for v in verdicts)
    assert sum("internal error" in r.getMessage() for r in caplog.records) == 1
    assert asyncio.run(guard.aobserve("r", SEARCH)).ok
    with pytest.raises(ZeroDivisionError):  # offline, the bug is not hidden
        scan({"run_id": "r", "events": [SEARCH]}, Config(), detectors=[Broken()])
