"""A real redis-server for the Redis store's tests, on a free loopback port in a temp dir.

Import the fixtures into a test module to use them (pytest registers fixtures a
module imports)::

    from redis_server import Backend, private_redis_fixture, redis_server_fixture

``redis_server`` and ``private_redis`` run each test twice: against one redis-server
and against a local Redis Cluster (3 masters, 3 replicas: :mod:`redis_cluster`).
``redis_server`` is one server (one cluster) for the whole session: tests keep apart
by using a unique key prefix each. ``private_redis`` is a store of the test's own to
kill, pause or restart: a fresh server, or the session's cluster reset (all nodes up,
no data). ``single_redis`` is the single server alone, for what only it has (a unix
socket). There is no fallback to a fake: when redis-server is missing the tests fail
and say how to install it.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, Union

import pytest

if TYPE_CHECKING:
    from redis_cluster import RedisCluster

INSTALL = "run `bash scripts/services.d/redis.sh` (installs redis-server and redis-cli)"
BACKENDS = ["single", "cluster"]
START_TIMEOUT = 10.0


def redis_binary(name: str) -> str:
    """The ``redis-<name>`` executable (or Valkey's); fails the test (never skips) when
    it is missing."""
    path = shutil.which(f"redis-{name}") or shutil.which(f"valkey-{name}")
    if path is None:
        pytest.fail(f"redis-{name} is not on PATH: {INSTALL}", pytrace=False)
    return path


def _ephemeral_low() -> int:
    """The lowest port the kernel hands out to outgoing connections (Linux default
    32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_port() -> int:
    """A free loopback port *below* the ephemeral range. A port the kernel picked with
    ``bind(0)`` is an ephemeral one: between choosing it and the server binding it
    (and again whenever a test restarts a killed node on it), any client socket of
    the test run (Redis clients, Dask workers) may be given it, and the server fails
    with "Address already in use" (seen once for a cluster bus port)."""
    rng = random.Random(uuid.uuid4().int)
    high = min(_ephemeral_low(), 65536)
    for _ in range(200):
        port = rng.randrange(10_000, high) if high > 10_000 else 0
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            found: int = sock.getsockname()[1]
            return found
    raise RuntimeError("no free loopback port below the ephemeral range")


class RedisServer:
    """One redis-server process without persistence: a restart starts it empty."""

    def __init__(self, directory: Path, port: int | None = None, extra: Sequence[str] = ()) -> None:
        self.binary = redis_binary("server")
        self.dir = directory
        self.port = port or free_port()
        self.extra = list(extra)  # more redis-server options (a cluster node's)
        self.unix_socket = directory / "redis.sock"
        self.log = directory / "redis.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    @property
    def unix_url(self) -> str:
        return f"redis+unix://{self.unix_socket}"

    def start(self) -> None:
        """Start (or restart, on the same port) and wait until it answers PING."""
        args = [
            self.binary,
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--dir", str(self.dir),
            "--unixsocket", str(self.unix_socket),
            "--unixsocketperm", "700",
            "--save", "",
            "--appendonly", "no",
            "--logfile", str(self.log),
            "--daemonize", "no",
            *self.extra,
        ]  # fmt: skip
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, cwd=self.dir)
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                break
            if self._pings():
                return
            time.sleep(0.02)
        log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
        self.kill()
        pytest.fail(f"redis-server did not start on port {self.port}:\n{log}", pytrace=False)

    def _pings(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                return sock.recv(16).startswith(b"+PONG")
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-run, as in a crash."""
        self._signal_and_wait(signal.SIGKILL)

    def stop(self) -> None:
        self._signal_and_wait(signal.SIGTERM)

    def pause(self) -> None:
        """SIGSTOP: connections stay open but nothing answers, as a stalled server."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGCONT)

    def _signal_and_wait(self, sig: signal.Signals) -> None:
        proc, self.proc = self.proc, None
        if proc is None or proc.poll() is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(signal.SIGCONT)  # a paused server cannot act on SIGTERM
            proc.send_signal(sig)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def raw(self) -> socket.socket:
        """A plain socket to the server, for tests that must not go through the store."""
        return socket.create_connection(("127.0.0.1", self.port), timeout=5)

    masters = 1

    def client(self) -> Any:
        """A redis-py client of the test's own."""
        import redis

        return redis.Redis(port=self.port)

    def script_calls(self) -> int:
        """Script calls the server has run (INFO commandstats)."""
        with self.client() as raw:
            stats: dict[str, Any] = raw.info("commandstats")
        return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))


# What the store's tests run against: one server or a cluster.
Backend = Union[RedisServer, "RedisCluster"]


class _Service(Protocol):
    def start(self) -> None: ...
    def stop(self) -> None: ...


S = TypeVar("S", bound=_Service)
_sessions: dict[str, Any] = {}


def for_session(name: str, make: Callable[[Path], S]) -> S:
    """One server (or cluster) for the whole test session, made in a temp dir and started
    on first use, stopped and removed when the session's process exits (not from a
    forked worker, which leaves by ``os._exit``, but to be sure)."""
    if name not in _sessions:
        directory = Path(tempfile.mkdtemp(prefix=f"loopwatch-{name}-"))
        service = make(directory)
        pid = os.getpid()

        def at_exit() -> None:
            if os.getpid() == pid:
                service.stop()
                shutil.rmtree(directory, ignore_errors=True)

        atexit.register(at_exit)
        service.start()
        _sessions[name] = service
    started: S = _sessions[name]
    return started


def shared_server() -> RedisServer:
    return for_session("redis", RedisServer)


@pytest.fixture(scope="session", name="redis_server", params=BACKENDS)
def redis_server_fixture(request: pytest.FixtureRequest) -> Backend:
    """The session's server or cluster (tests keep apart with a prefix each)."""
    if request.param == "cluster":
        from redis_cluster import shared_cluster

        return shared_cluster()
    return shared_server()


@pytest.fixture(scope="session", name="single_redis")
def single_redis_fixture() -> RedisServer:
    """The session's redis-server, for what a cluster does not have."""
    return shared_server()


@pytest.fixture(name="private_redis", params=BACKENDS)
def private_redis_fixture(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """A redis-server of the test's own, or the session's cluster reset, to kill, pause
    and restart."""
    if request.param == "cluster":
        from redis_cluster import fresh_cluster

        with fresh_cluster() as cluster:
            yield cluster
        return
    directory = Path(tempfile.mkdtemp(prefix="loopwatch-redis-"))
    server = RedisServer(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(name="prefix")
def prefix_fixture() -> str:
    """A key prefix no other test uses, so tests share a server without interfering."""
    return f"t{os.getpid()}-{uuid.uuid4().hex[:12]}"
