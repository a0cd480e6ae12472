"""A local Redis Cluster for the Redis store's tests: 3 masters and 3 replicas, each a
redis-server on free 127.0.0.1 ports in a temp dir, made into a cluster with
``redis-cli --cluster create``.

It offers what :class:`redis_server.RedisServer` offers (``url``, ``port``,
``kill``/``start``/``pause``/``resume`` of the whole store, ``client()``,
``script_calls()``), so the store's tests run against both, plus what only a cluster
has: the node that serves a key, failing that node over, resetting between tests.
Nodes keep no data on disk: a node restarted after a kill comes back empty (its
``nodes.conf`` keeps it in the cluster).
"""

from __future__ import annotations

import contextlib
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_server import RedisServer, for_session, free_port, redis_binary

MASTERS = 3
# Failure detection: a master that does not answer for this long is failed over to its
# replica (after an election of 0.5-1 s more). Short, so a failover test is quick.
NODE_TIMEOUT_MS = 1000
# How long the harness waits for the cluster to settle (a hang guard, not a measure).
SETTLE = 30.0


class RedisCluster:
    """3 masters + 3 replicas on loopback; the store URL names the three first nodes."""

    masters = MASTERS

    def __init__(self, directory: Path) -> None:
        self.dir = directory
        self.nodes: list[RedisServer] = []
        for i in range(2 * MASTERS):
            node_dir = directory / f"node{i}"
            node_dir.mkdir()
            bus = free_port()
            extra = [
                "--cluster-enabled", "yes",
                "--cluster-config-file", "nodes.conf",
                "--cluster-node-timeout", str(NODE_TIMEOUT_MS),
                "--cluster-port", str(bus),
                # a replica that lost its master may always take over (the default
                # refuses one disconnected for long: never so in these tests)
                "--cluster-replica-validity-factor", "0",
                "--repl-diskless-sync-delay", "0",
            ]  # fmt: skip
            self.nodes.append(RedisServer(node_dir, extra=extra))
        self.port = self.nodes[0].port
        self.created = False

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{n.port}" for n in self.nodes[:MASTERS])
        return f"redis+cluster://{hosts}"

    # -- the whole store -------------------------------------------------------------------
    def start(self) -> None:
        """Start every node that is not running; the first time, create the cluster.
        Returns once every node says ``cluster_state:ok`` and every replica is in sync."""
        for node in self.nodes:
            if node.proc is None:
                node.start()
        if not self.created:
            args = [redis_binary("cli"), "--cluster", "create"]
            args += [f"127.0.0.1:{n.port}" for n in self.nodes]
            args += ["--cluster-replicas", "1", "--cluster-yes"]
            done = subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)
            if done.returncode != 0:
                pytest.fail(f"redis-cli --cluster create failed:\n{done.stdout}\n{done.stderr}")
            self.created = True
        self.wait_settled()

    def kill(self) -> None:
        for node in self.nodes:
            node.kill()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def pause(self) -> None:
        for node in self.running():
            node.pause()

    def resume(self) -> None:
        for node in self.running():
            node.resume()

    def client(self) -> Any:
        """A redis-py cluster client of the test's own."""
        import redis.cluster

        return redis.cluster.RedisCluster(host="127.0.0.1", port=self.port)

    def script_calls(self) -> int:
        """Script calls the masters have run (INFO commandstats, summed)."""
        return sum(_script_calls(node) for node in self.running())

    # -- what only a cluster has -----------------------------------------------------------
    def running(self) -> list[RedisServer]:
        return [n for n in self.nodes if n.proc is not None]

    def info(self, node: RedisServer, section: str) -> dict[str, str]:
        import redis

        with redis.Redis(port=node.port, socket_timeout=2) as raw:
            if section == "cluster":
                text = raw.execute_command("CLUSTER", "INFO")
            else:
                text = raw.execute_command("INFO", section)
        if isinstance(text, dict):  # redis-py parses INFO itself
            return {k: str(v) for k, v in text.items()}
        text = text.decode() if isinstance(text, bytes) else str(text)
        return dict(line.split(":", 1) for line in text.splitlines() if ":" in line)

    def role(self, node: RedisServer) -> str:
        return self.info(node, "replication").get("role", "?")

    def owner(self, key: str) -> RedisServer:
        """The master now serving ``key``'s slot."""
        import redis

        for node in self.running():
            with redis.Redis(port=node.port, socket_timeout=2) as raw:
                if self.role(node) != "master":
                    continue
                slot = raw.execute_command("CLUSTER", "KEYSLOT", key)
                if any(start <= slot <= end for start, end in self._slots(raw)):
                    return node
        raise AssertionError(f"no master serves {key!r}")

    def replica_of(self, master: RedisServer) -> RedisServer:
        for node in self.running():
            if node is master:
                continue
            info = self.info(node, "replication")
            if info.get("role") == "slave" and info.get("master_port") == str(master.port):
                return node
        raise AssertionError(f"no replica of the master on port {master.port}")

    @staticmethod
    def _slots(raw: Any) -> list[tuple[int, int]]:
        myself = raw.execute_command("CLUSTER", "MYID")
        myself = myself.decode() if isinstance(myself, bytes) else myself
        ranges = []
        for line in raw.execute_command("CLUSTER", "NODES").decode().splitlines():
            fields = line.split()
            if fields[0] != myself:
                continue
            for item in fields[8:]:
                if item.startswith("["):
                    continue  # a slot being migrated
                start, _, end = item.partition("-")
                ranges.append((int(start), int(end or start)))
        return ranges

    def wait_failover(self, replica: RedisServer) -> None:
        """Until ``replica`` has been promoted to master (after its master died)."""
        deadline = time.monotonic() + SETTLE
        while self.role(replica) != "master":
            if time.monotonic() > deadline:
                raise AssertionError(f"replica on port {replica.port} was not promoted")
            time.sleep(0.05)

    def wait_settled(self) -> None:
        """Until every running node reports ``cluster_state:ok`` and knows every other
        one as up, and every replica's link to its master is up."""
        import redis

        deadline = time.monotonic() + SETTLE
        problem = ""
        while time.monotonic() < deadline:
            try:
                problem = self._unsettled()
            except redis.RedisError as exc:
                problem = repr(exc)
            if not problem:
                return
            time.sleep(0.05)
        raise AssertionError(f"the cluster did not settle in {SETTLE}s: {problem}")

    def _unsettled(self) -> str:
        import redis

        live = {n.port for n in self.running()}
        for node in self.running():
            if self.info(node, "cluster").get("cluster_state") != "ok":
                return f"port {node.port}: cluster_state not ok"
            with redis.Redis(port=node.port, socket_timeout=2) as raw:
                table = raw.execute_command("CLUSTER", "NODES").decode()
            for line in table.splitlines():
                fields = line.split()
                port = int(fields[1].split("@")[0].rsplit(":", 1)[1])
                if port in live and ("fail" in fields[2] or fields[7] != "connected"):
                    return f"port {node.port} sees port {port} as {fields[2]} {fields[7]}"
            info = self.info(node, "replication")
            if info.get("role") == "slave" and info.get("master_link_status") != "up":
                return f"replica on port {node.port}: link to its master down"
        return ""

    def reset(self) -> None:
        """Every node running and the cluster settled, with no data and no scripts: what
        a fresh server is to the single-server tests."""
        for node in self.nodes:
            if node.proc is not None and node.proc.poll() is not None:
                node.proc = None  # died
        self.start()
        import redis

        for node in self.running():
            if self.role(node) == "master":
                with redis.Redis(port=node.port, socket_timeout=5) as raw:
                    raw.flushall()
                    raw.script_flush()


def _script_calls(node: RedisServer) -> int:
    import redis

    with redis.Redis(port=node.port) as raw:
        stats: dict[str, Any] = raw.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))


def shared_cluster() -> RedisCluster:
    """One cluster for the whole test session (each test keeps apart with a key prefix
    of its own, or resets it)."""
    return for_session("cluster", RedisCluster)


@contextlib.contextmanager
def fresh_cluster() -> Iterator[RedisCluster]:
    """The session's cluster, reset (all nodes up, no data) before and after, for a test
    that kills, pauses or fails over its nodes or moves its slots."""
    cluster = shared_cluster()
    cluster.reset()
    try:
        yield cluster
    finally:
        cluster.resume()
        cluster.reset()


@pytest.fixture(name="cluster")
def cluster_fixture() -> Iterator[RedisCluster]:
    with fresh_cluster() as cluster:
        yield cluster
