"""Redis going away, stalling and coming back: the agent keeps running or gets a clear error,
is never held longer than the timeout, and the same Guard recovers on its own. Each test
runs against one redis-server and against a whole Redis Cluster (every node killed,
paused...); a failover of one cluster node is in test_redis_cluster.py."""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from redis_server import (  # noqa: F401 - imported fixtures are registered by pytest
    Backend,
    prefix_fixture,
    private_redis_fixture,
)

from loopwatch import Config, Guard
from loopwatch.errors import StoreUnavailable
from loopwatch.stores.redis import RedisStore

TIMEOUT = 0.3
RETRY_INTERVAL = 0.4
# How long a call may take beyond the timeout before we call it a hang: generous, as
# this 2-core machine runs other work; a hang would be unbounded.
SLACK = 1.0


def call(i: int) -> dict[str, Any]:
    return {"kind": "tool_call", "name": "search", "args": {"q": f"query {i}"}}


def store_for(server: Backend, **options: Any) -> RedisStore:
    return RedisStore.from_url(
        server.url, timeout=TIMEOUT, retry_interval=RETRY_INTERVAL, **options
    )


def outage_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "loopwatch" and "unavailable" in r.getMessage()
    ]


def test_killed_server_allow_mode_continues_and_recovers(
    private_redis: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopwatch")
    guard = Guard(Config(), store=store_for(private_redis))
    assert [guard.observe("r", call(i)).step for i in range(3)] == [0, 1, 2]

    private_redis.kill()
    during = [guard.observe("r", call(i)) for i in range(3, 8)]
    assert all(v.ok and not v.state_available and v.step == -1 for v in during)
    assert "unavailable" in (during[0].message or "")
    assert len(outage_warnings(caplog)) == 1  # once per outage, not once per step

    private_redis.start()  # same port, empty: the run's state died with the server
    after = guard.observe("r", call(8))
    assert after.state_available and after.step == 0
    assert guard.observe("r", call(9)).step == 1
    assert any("reachable again" in r.getMessage() for r in caplog.records)

    private_redis.kill()  # a second outage is logged again, once
    guard.observe("r", call(10))
    guard.observe("r", call(11))
    assert len(outage_warnings(caplog)) == 2


def test_killed_server_raise_mode_raises_then_recovers(private_redis: Backend) -> None:
    guard = Guard(Config(), store=store_for(private_redis), on_store_error="raise")
    guard.observe("r", call(0))
    private_redis.kill()
    for i in range(2):
        with pytest.raises(StoreUnavailable, match=f"127.0.0.1:{private_redis.port}") as info:
            guard.observe("r", call(i))
        # a cluster client that reaches no node says so (a RedisClusterException)
        assert "ConnectionError" in str(info.value) or "cannot be connected" in str(info.value)
    private_redis.start()
    assert guard.observe("r", call(3)).step == 0


def test_paused_server_bounds_the_wait(
    private_redis: Backend, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="loopwatch")
    store = store_for(private_redis)
    allow = Guard(Config(), store=store)
    strict = Guard(Config(), store=store, on_store_error="raise")
    assert allow.observe("r", call(0)).step == 0

    private_redis.pause()
    try:
        started = time.monotonic()
        verdict = allow.observe("r", call(1))
        waited = time.monotonic() - started
        assert not verdict.state_available and "Timeout" in (verdict.message or "")
        assert waited < TIMEOUT + SLACK, f"waited {waited:.2f}s with timeout={TIMEOUT}"
        # right after a timeout the store fails fast instead of waiting again
        with pytest.raises(StoreUnavailable, match="timed out recently"):
            strict.observe("r", call(2))
        time.sleep(RETRY_INTERVAL)
        started = time.monotonic()
        with pytest.raises(StoreUnavailable, match="Timeout"):
            strict.observe("r", call(3))
        assert time.monotonic() - started < TIMEOUT + SLACK
    finally:
        private_redis.resume()
    time.sleep(RETRY_INTERVAL)
    # The stalled server kept its data: the run goes on where it was. The two steps
    # that timed out were sent, and the server runs them once it wakes; both expected
    # the version step 0 wrote, so the compare-and-set lets at most one of them land.
    assert allow.observe("r", call(4)).step in (1, 2)
    assert len(outage_warnings(caplog)) == 1


def test_paused_server_bounds_the_async_wait(private_redis: Backend) -> None:
    store = store_for(private_redis)
    guard = Guard(Config(), store=store)

    async def scenario() -> tuple[float, list[Any]]:
        assert (await guard.aobserve("r", call(0))).step == 0
        private_redis.pause()
        try:
            started = time.monotonic()
            # concurrent steps of the same run and of others: none waits past the timeout
            verdicts = await asyncio.gather(
                *(guard.aobserve(f"r{i % 2}", call(i)) for i in range(6))
            )
            waited = time.monotonic() - started
        finally:
            private_redis.resume()
        await asyncio.sleep(RETRY_INTERVAL)
        verdicts.append(await guard.aobserve("r", call(9)))
        await store.aclose()
        return waited, verdicts

    waited, verdicts = asyncio.run(scenario())
    assert waited < TIMEOUT + SLACK, f"waited {waited:.2f}s with timeout={TIMEOUT}"
    assert all(not v.state_available for v in verdicts[:-1])
    # the timed-out step of run "r" may land late, never twice (see the sync test)
    assert verdicts[-1].state_available and verdicts[-1].step in (1, 2)


def test_threads_waiting_on_a_stalled_run_are_bounded_too(private_redis: Backend) -> None:
    from concurrent.futures import ThreadPoolExecutor

    guard = Guard(Config(), store=store_for(private_redis))
    guard.observe("r", call(0))
    private_redis.pause()
    try:
        started = time.monotonic()
        with ThreadPoolExecutor(6) as pool:
            verdicts = list(pool.map(lambda i: guard.observe("r", call(i)), range(6)))
        waited = time.monotonic() - started
    finally:
        private_redis.resume()
    assert all(not v.state_available for v in verdicts)
    assert waited < TIMEOUT + SLACK, f"waited {waited:.2f}s with timeout={TIMEOUT}"


def test_unreachable_server_fails_at_once_in_every_operation(private_redis: Backend) -> None:
    store = store_for(private_redis)
    private_redis.kill()
    guard = Guard(Config(), store=store)
    assert not guard.observe("r", call(0)).state_available
    for operation in (lambda: store.get("r"), lambda: store.reset("r"), lambda: len(store)):
        with pytest.raises(StoreUnavailable):
            operation()
