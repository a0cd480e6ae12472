"""What only a Redis Cluster has: URLs naming several nodes, a run's key in one hash slot,
slots that move (MOVED, ASK), scripts each node loads on its own, and a master that
fails over to its replica in the middle of a run.

The store's other tests (test_redis_store, _parity, _faults, _concurrency) run against
the same local cluster as well as against one redis-server, among them the property
that any event stream over three workers gives the verdicts of one in-memory guard.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

import pytest
from redis_cluster import RedisCluster, cluster_fixture  # noqa: F401 - a fixture
from redis_server import RedisServer, free_port, prefix_fixture  # noqa: F401 - a fixture

from loopwatch import Config, Guard
from loopwatch.errors import StoreUnavailable
from loopwatch.findings import Verdict
from loopwatch.stores import store_from_url
from loopwatch.stores.redis import RedisStore

TIMEOUT = 0.3
RETRY_INTERVAL = 0.2
SLACK = 1.0  # as in test_redis_faults: a hang would be unbounded
RESUME_WITHIN = 30.0  # a hang guard for waiting on a failover, not a measure


def call(i: int) -> dict[str, Any]:
    return {"kind": "tool_call", "name": "search", "args": {"q": f"query {i}"}}


def store_for(cluster: RedisCluster, prefix: str) -> RedisStore:
    return RedisStore.from_url(
        cluster.url, prefix=prefix, timeout=TIMEOUT, retry_interval=RETRY_INTERVAL
    )


def raw(node: RedisServer) -> Any:
    import redis

    return redis.Redis(port=node.port, socket_timeout=5)


# -- URLs and keys (no server needed) ----------------------------------------------------
@pytest.mark.parametrize("scheme", ["redis+cluster", "rediss+cluster", "valkey+cluster"])
def test_cluster_urls_name_their_startup_nodes(scheme: str) -> None:
    url = f"{scheme}://u:secret@10.0.0.1:7000,10.0.0.2,[::1]:7002/0?prefix=app&timeout=0.2"
    store = store_from_url(url)
    assert isinstance(store, RedisStore) and store.cluster
    assert store._target.cluster_nodes == (("10.0.0.1", 7000), ("10.0.0.2", 6379), ("::1", 7002))
    assert (store.prefix, store.timeout) == ("app", 0.2)
    assert "secret" not in repr(store) and "***" in store.url
    assert not RedisStore.from_url("redis://h:1/0").cluster


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("redis+cluster://h:1/2", "only database 0"),
        ("redis+cluster://h:1,h:x", "bad cluster node"),
        ("redis+cluster://h:1,,h:2", "bad cluster node"),
        ("redis+cluster://h:99999", "bad cluster node"),
        ("redis+cluster://h:1?sokcet_timeout=1", "sokcet_timeout"),
    ],
)
def test_bad_cluster_urls_fail_at_construction(url: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RedisStore.from_url(url)


def test_a_runs_key_carries_a_hash_tag_of_its_run_id() -> None:
    store = RedisStore.from_url("redis+cluster://127.0.0.1:1", prefix="{app}")
    key = store.key("{tenant}:run-1")
    tag = key.split("{", 1)[1].split("}", 1)[0]
    assert key == f"loopwatch:{{{tag}}}:{{app}}:{{tenant}}:run-1"
    # hex digits: the first braces of the key are the tag's, whatever the ids hold
    assert len(tag) == 16 and set(tag) <= set("0123456789abcdef")
    assert store.key("{tenant}:run-2") != key
    assert RedisStore.from_url("redis://h/0", prefix="app").key("r") == "loopwatch:app:r"


def test_a_store_made_while_the_cluster_is_down_builds_and_lets_steps_through() -> None:
    url = f"redis+cluster://127.0.0.1:{free_port()},127.0.0.1:{free_port()}"
    store = RedisStore.from_url(url, timeout=TIMEOUT)  # connects on first use
    verdict = Guard(Config(), store=store).observe("r", call(0))
    assert verdict.ok and not verdict.state_available
    with pytest.raises(StoreUnavailable, match="cannot be connected"):
        Guard(Config(), store=store, on_store_error="raise").observe("r", call(1))


# -- slots ---------------------------------------------------------------------------------
def test_runs_spread_over_the_masters_each_in_one_slot(cluster: RedisCluster, prefix: str) -> None:
    store = store_for(cluster, prefix)
    guard = Guard(Config(), store=store, on_store_error="raise")
    runs = [f"{{user-{i % 3}}}:run-{i}" for i in range(30)]  # braces of the user's own
    for run in runs:
        guard.observe(run, call(0))
    client = cluster.client()
    slots = {client.keyslot(store.key(run)) for run in runs}
    assert len(slots) == 30  # the user's braces do not pin runs to one slot
    owners = {cluster.owner(store.key(run)).port for run in runs}
    assert len(owners) == cluster.masters
    for run in runs:
        key = store.key(run)
        tag = key.split("{", 1)[1].split("}", 1)[0]
        assert client.keyslot(key) == client.keyslot(tag)  # the tag alone picks the slot
        assert client.exists(key) == 1
    assert len(store) == 30
    client.close()


def test_a_node_that_lost_the_script_loads_it_again(cluster: RedisCluster, prefix: str) -> None:
    store = store_for(cluster, prefix)
    guard = Guard(Config(), store=store, on_store_error="raise")
    assert [guard.observe("r", call(i)).step for i in range(3)] == [0, 1, 2]
    for node in cluster.running():
        with raw(node) as r:
            r.script_flush()
    trips = store.round_trips
    assert guard.observe("r", call(3)).step == 3
    assert store.round_trips - trips == 2  # EVALSHA: NOSCRIPT, then EVAL


def test_a_slot_moving_mid_run_keeps_the_run(cluster: RedisCluster, prefix: str) -> None:
    """Migrating the run's slot to another master: ASK while its key moves, MOVED after."""
    store = store_for(cluster, prefix)
    guard = Guard(Config(), store=store, on_store_error="raise")
    steps = [guard.observe("r", call(i)).step for i in range(3)]
    key = store.key("r")
    source = cluster.owner(key)
    target = next(n for n in cluster.running() if n is not source and cluster.role(n) == "master")
    with raw(source) as src, raw(target) as dst:
        slot = src.execute_command("CLUSTER", "KEYSLOT", key)
        src_id = src.execute_command("CLUSTER", "MYID").decode()
        dst_id = dst.execute_command("CLUSTER", "MYID").decode()
        dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
        src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
        steps.append(guard.observe("r", call(3)).step)  # the key is still at the source
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", key)
        steps.append(guard.observe("r", call(4)).step)  # ASK: the key is at the target
        for node in (dst, src):
            node.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        steps.append(guard.observe("r", call(5)).step)  # MOVED: the slot is the target's
        count = ("CLUSTER", "COUNTKEYSINSLOT", slot)
        assert (dst.execute_command(*count), src.execute_command(*count)) == (1, 0)
    assert steps == [0, 1, 2, 3, 4, 5]
    assert store.conflicts == 0  # no step was lost or recomputed on the way


def test_a_write_whose_reply_was_lost_is_sent_again_and_counted_once(
    cluster: RedisCluster, prefix: str
) -> None:
    """A dropped link is retried at once; if the lost reply's write had landed, the
    retry finds the run at its own version and takes that as done, not as a conflict."""
    import redis

    store = store_for(cluster, prefix)
    guard = Guard(Config(), store=store, on_store_error="raise")
    assert guard.observe("r", call(0)).step == 0
    real = store._sync()

    class LosesOneReply:
        lost = False

        def __getattr__(self, name: str) -> Any:
            return getattr(real, name)

        def evalsha(self, *args: Any) -> Any:
            reply = real.evalsha(*args)
            if not self.lost:
                self.lost = True
                raise redis.ConnectionError("the link dropped before the reply")
            return reply

    store._client = LosesOneReply()  # type: ignore[assignment]
    assert [guard.observe("r", call(i)).step for i in (1, 2)] == [1, 2]
    assert store.get("r").n == 3  # type: ignore[union-attr]
    assert store.conflicts == 0


# -- failover ----------------------------------------------------------------------------------
def resume_after_failover(observe: Any) -> list[Verdict]:
    """Steps, every 50 ms, until one finds the run's state again."""
    verdicts = []
    deadline = time.monotonic() + RESUME_WITHIN
    while not verdicts or not verdicts[-1].state_available:
        assert time.monotonic() < deadline, "the run did not resume after the failover"
        started = time.monotonic()
        verdicts.append(observe(len(verdicts)))
        waited = time.monotonic() - started
        assert waited < TIMEOUT + SLACK, f"a step waited {waited:.2f}s with timeout={TIMEOUT}"
        time.sleep(0.05)
    return verdicts


def run_on(store: RedisStore, master: RedisServer, cluster: RedisCluster, stem: str) -> str:
    """A run id whose key the given master serves."""
    return next(
        f"{stem}{i}" for i in range(10_000) if cluster.owner(store.key(f"{stem}{i}")) is master
    )


def test_master_killed_mid_run_fails_over_and_the_run_goes_on(
    cluster: RedisCluster, prefix: str, caplog: pytest.LogCaptureFixture
) -> None:
    """What survives a failover: every write the replica acknowledged (WAIT). Replication
    is asynchronous, so writes the master took just before it died may be lost: the run
    then goes on from the last state the replica had (or afresh), never from a mix.
    Runs on the other masters go on; with cluster-require-full-coverage (the default)
    the whole cluster refuses commands between the master's FAIL flag and the promotion,
    so some of their steps may be let through too, and every step that was not is
    counted once."""
    caplog.set_level(logging.WARNING, logger="loopwatch")
    store = store_for(cluster, prefix)
    allow = Guard(Config(), store=store)
    strict = Guard(Config(), store=store, on_store_error="raise")
    master = cluster.owner(store.key("r"))
    replica = cluster.replica_of(master)
    late = run_on(store, master, cluster, "late-")
    other = next(f"o{i}" for i in range(1000) if cluster.owner(store.key(f"o{i}")) is not master)
    elsewhere = Guard(Config(), store=store)  # its own outage log
    assert elsewhere.observe(other, call(0)).step == 0

    assert [allow.observe("r", call(i)).step for i in range(10)] == list(range(10))
    with raw(master) as r:
        assert r.execute_command("WAIT", 1, 5000) == 1  # the replica has all of run "r"
    assert [allow.observe(late, call(i)).step for i in range(10)] == list(range(10))
    master.kill()  # no WAIT for run `late`: its last writes may not have reached the replica
    killed = time.monotonic()

    with pytest.raises(StoreUnavailable, match="updating run 'r'"):
        strict.observe("r", call(100))  # before the failover: the master is gone
    others: list[Verdict] = []

    def observe(i: int) -> Verdict:
        others.append(elsewhere.observe(other, call(1 + i)))
        return allow.observe("r", call(200 + i))

    verdicts = resume_after_failover(observe)
    resumed = time.monotonic() - killed
    assert cluster.role(replica) == "master"
    assert len(verdicts) > 1 and all(not v.state_available for v in verdicts[:-1])
    assert verdicts[-1].step == 10  # acknowledged by the replica: nothing lost
    assert allow.observe("r", call(300)).step == 11
    assert strict.observe("r", call(301)).step == 12

    after = allow.observe(late, call(10)).step
    assert 0 <= after <= 10  # the replica's copy: all of it, an earlier step, or none
    assert allow.observe(late, call(11)).step == after + 1
    counted = [v.step for v in others if v.state_available]
    assert counted == list(range(1, 1 + len(counted)))
    assert store.get(other).n == 1 + len(counted)  # type: ignore[union-attr]
    print(
        f"\nfailover: the run resumed {resumed:.2f}s after the kill, {len(verdicts) - 1} "
        f"steps let through meanwhile; the unacknowledged run went on at step {after}/10; "
        f"a run on another master had {len(others) - len(counted)} of {len(others)} let through"
    )
    logged = [r.getMessage() for r in caplog.records]
    assert sum("unavailable" in m and "run 'r'" in m for m in logged) == 1  # once an outage


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_master_stalled_mid_run_fails_over_and_the_run_goes_on(
    cluster: RedisCluster, prefix: str, mode: str
) -> None:
    """A master that stops answering (SIGSTOP) is failed over like a dead one; steps
    meanwhile wait at most the timeout, and the run goes on on the promoted replica."""
    store = store_for(cluster, prefix)
    guard = Guard(Config(), store=store)
    master = cluster.owner(store.key("r"))
    replica = cluster.replica_of(master)
    loop = asyncio.new_event_loop()

    def observe(i: int) -> Verdict:
        if mode == "sync":
            return guard.observe("r", call(i))
        return loop.run_until_complete(guard.aobserve("r", call(i)))

    try:
        assert [observe(i).step for i in range(5)] == [0, 1, 2, 3, 4]
        with raw(master) as r:
            assert r.execute_command("WAIT", 1, 5000) == 1
        master.pause()
        verdicts = resume_after_failover(lambda i: observe(100 + i))
        assert cluster.role(replica) == "master"
        assert len(verdicts) > 1 and all(not v.state_available for v in verdicts[:-1])
        assert verdicts[-1].step == 5
        assert observe(200).step == 6
        loop.run_until_complete(store.aclose())
    finally:
        loop.close()
        master.resume()  # it learns it was replaced and follows the new master
