"""Run states in Redis or Valkey, so that every worker serving a run sees the same state.

Why optimistic compare-and-set: the detectors run in Python, so the read-modify-write
cannot happen inside Redis. Instead each run's key holds its state and a version
token, and one Lua script (sent with EVALSHA) writes a new state only if the stored
token is still the one this worker computed from; otherwise it answers with the
current state and token so the worker recomputes and tries again at once, without a
separate read. A worker keeps the last state it wrote or saw per run, so:

* a step costs **one round trip** when this worker made the run's last update (the
  common case: one agent run is mostly served by one worker at a time), and
* **two** when another worker updated the run since (or this worker never saw it):
  the first script call fails and returns the current state, the second one writes.

A new run costs one round trip: the worker assumes the run is absent and the script
confirms it. Each further conflicting writer adds one more round trip; writers that
keep colliding back off (with jitter) and retry until ``timeout`` (or ``max_conflicts``
attempts, when set), then the step fails with :class:`StoreUnavailable`. Within one process,
updates of the same run take turns on a local lock, so threads and asyncio tasks of
one worker never conflict with each other. Version tokens are random (not counters),
so a run that expired or was reset and then re-created can never be mistaken for the
version a stale worker remembers.

Ordering guarantee: updates of one run are linearizable. The successful script calls
of a run form a single chain (each one replaced exactly the version its step was
computed from), so every observed step is applied exactly once, none is lost, and
they are applied in the order in which their winning script calls reached Redis. A
step whose ``observe`` returned before another one started is applied before it;
steps observed at the same moment by different workers are applied in some order,
each seeing all the steps applied before it.

Keys are ``loopwatch:{prefix}:{run_id}``: one hash per run with the fields ``v``
(version token) and ``s`` (the state as ``RunState.to_bytes()``). Each write sets the key's TTL,
so idle runs expire, and the state holds only the engine's bounded window and
counters, so nothing grows with run length. A script touches only its one key (passed
in ``KEYS``), so each call lives in one hash slot.

Redis Cluster (``redis+cluster://host:port[,host:port...]``, also ``rediss+cluster``,
``valkey+cluster``, ``valkeys+cluster``; the hosts are startup nodes, any reachable one
is enough, and the cluster has only database 0). redis-py's cluster clients route each
call to the master serving the key's slot and follow MOVED and ASK redirections (a slot
being resharded mid-run keeps the run). A run's key there is
``loopwatch:{<tag>}:<prefix>:<run_id>`` (the braces literal: Redis's hash-tag syntax),
the tag being 16 hex digits of a hash of the run id: all of a run lives in one slot,
braces in a prefix or run id never pick the slot (``{tenant}`` in run ids does not pin
a tenant's runs to one node), and runs spread over all masters. EVALSHA goes to the
key's node; a node that lacks the script (restarted, new, promoted) answers NOSCRIPT
and gets it by EVAL, node by node.

A master that dies or stalls is failed over by the cluster to its replica after
``cluster-node-timeout`` (plus an election). Until then the run's steps fail like a
down server's: :class:`StoreUnavailable` within ``timeout``, which the guard lets
through (unexamined) or raises, per its policy. Each failed call makes redis-py refresh
its map of the cluster, so the first step after the promotion reaches the new master
(a dropped link is retried at once, ``retries`` times) and the run goes on from the
state the replica holds. Replication is asynchronous: writes the old master
acknowledged but had not yet sent to its replica are lost with it, and the run then
goes on from an earlier step (or afresh if the replica never had it), never from a
mix; the compare-and-set sees the version change and recomputes. Runs on other masters
go on, but with ``cluster-require-full-coverage yes`` (the default) the whole cluster
answers CLUSTERDOWN between the master's FAIL flag and the promotion, and redis-py
waits 0.25 s on that answer before the step fails. A step sent again
after a lost reply finds its own version and counts once. After a fault redis-py
refreshes its map of the cluster, walking the nodes with a timeout each; the sync
client does that on a helper thread, waited for only until the step's ``timeout``
(it goes on in the background), so a sync step still waits at most ``timeout`` per
reply; an async step is cancelled at ``timeout`` and its event loop gets a fresh
cluster client (a cancelled command would never make the old one refresh its map).
The first call of a process discovers the cluster (one CLUSTER SLOTS and one COMMAND),
trying the URL's nodes with ``connect_timeout`` and ``timeout`` each.

Faults never hang the agent. The async path gives up at exactly ``timeout``. The
sync path waits at most ``timeout`` for its turn on the run and for each reply, and
starts no new command once ``timeout`` has passed; after a timeout the store fails
fast for ``retry_interval`` seconds (waiters included) instead of waiting again. So a
down or stalled Redis costs a step at most ``timeout``; only a stall that begins
between two commands of one update (a conflict retry) can stretch that to under
twice ``timeout``. Every connection error, timeout or Redis error surfaces as
:class:`StoreUnavailable`, which the guard turns into "allow" or "raise". A step that
timed out may still be applied when a stalled server wakes up, but at most once and
never over newer state (its expected version is then stale). The store recovers by
itself: the next update after Redis comes back reconnects (redis-py drops broken
connections), reloads the script if the server lost it, and starts a run afresh if
its key is gone.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import random
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Generator
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import TYPE_CHECKING, Any, Final, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from ..durations import parse_duration
from ..errors import StoreUnavailable
from ..extras import missing_extra
from ..state import RunState, StateError
from .base import State, Store

if TYPE_CHECKING:
    import redis as redis_sync
    import redis.asyncio as redis_async
    import redis.asyncio.cluster as redis_async_cluster
    import redis.cluster as redis_cluster

    SyncClient = redis_sync.Redis | redis_cluster.RedisCluster
    AsyncClient = redis_async.Redis | redis_async_cluster.RedisCluster

__all__ = ["CAS_SCRIPT", "RedisStore"]

T = TypeVar("T")


# KEYS[1]: the run's hash. ARGV: expected version ('' = the run is absent), the new
# version, the new state, the TTL in milliseconds. Returns 1 when written, else
# {current version or '', current state or ''} so the caller can retry without a read.
CAS_SCRIPT: Final = """
local cur = redis.call('HGET', KEYS[1], 'v') or ''
if cur == ARGV[1] then
  redis.call('HSET', KEYS[1], 'v', ARGV[2], 's', ARGV[3])
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return 1
end
return {cur, redis.call('HGET', KEYS[1], 's') or ''}
"""

_log = logging.getLogger("loopwatch")
# Backoff between compare-and-set attempts after repeated conflicts (seconds).
_BACKOFF_BASE: Final = 0.0005
_BACKOFF_MAX: Final = 0.02

# Schemes this store accepts, and the redis-py scheme each one maps to.
_SCHEMES: Final = {
    "redis": "redis",
    "rediss": "rediss",
    "valkey": "redis",
    "valkeys": "rediss",
    "redis+unix": "unix",
    "unix": "unix",
}
# A cluster: the URL names one or more startup nodes (host:port, comma-separated).
_CLUSTER_SCHEMES: Final = {
    "redis+cluster": "redis",
    "rediss+cluster": "rediss",
    "valkey+cluster": "redis",
    "valkeys+cluster": "rediss",
}

# Options that may be given in the URL's query string, and how to parse them.
_URL_OPTIONS: Final[dict[str, Callable[[str], Any]]] = {
    "ttl_seconds": parse_duration,  # seconds, or "1h" as in the configuration
    "prefix": str,
    "timeout": float,
    "connect_timeout": float,
    "retries": int,
    "max_conflicts": int,
    "retry_interval": float,
    "cache_size": int,
}

_GLOB_SPECIAL: Final = str.maketrans({c: "\\" + c for c in "*?[]\\"})
_TAG_DIGITS: Final = 16


def _slot_tag(run_id: str) -> str:
    """The hash tag of a run's cluster key: hex digits, so never a brace."""
    data = run_id.encode("utf-8", "surrogatepass")
    return hashlib.blake2b(data, digest_size=_TAG_DIGITS // 2).hexdigest()


# Updates of one run from one process take turns on one of these locks.
_STRIPES: Final = 256
# Threads that refresh a sync cluster client's map of the cluster, so that a caller
# can stop waiting.
_HELPERS: Final = 8

# (version token, the state at that version). The cache owns the dict: an update
# takes it out, lets ``fn`` mutate it, and puts the result back only once written.
_Cached = tuple[bytes, State]


def _redis_module() -> Any:
    """redis-py, imported only when a Redis store is actually built."""
    try:
        import redis
        import redis.asyncio  # the async client must be importable too
    except ModuleNotFoundError as exc:
        raise missing_extra(exc, "redis", "redis-py (the Redis/Valkey store)") from exc
    return redis


class _Target(NamedTuple):
    """Where the store connects: a redis-py URL (for a cluster: its first startup node)
    and, for a cluster, every startup node."""

    url: str
    cluster_nodes: tuple[tuple[str, int], ...] = ()


def _split_url(url: str) -> tuple[_Target, dict[str, str]]:
    """Map the URL to one redis-py understands and take loopwatch's options out of it."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _SCHEMES and scheme not in _CLUSTER_SCHEMES:
        raise ValueError(
            f"unknown Redis store URL {_redact(url)!r}: use redis://, rediss://, "
            "redis+unix://, valkey://, valkeys:// or, for a cluster, redis+cluster://, "
            "rediss+cluster://, valkey+cluster://, valkeys+cluster://"
        )
    ours: dict[str, str] = {}
    theirs: list[tuple[str, str]] = []
    for name, value in parse_qsl(parts.query, keep_blank_values=True):
        if name in _URL_OPTIONS:
            ours[name] = value
        else:
            theirs.append((name, value))
    query = urlencode(theirs)
    tail = f"?{query}" if query else ""
    if scheme in _CLUSTER_SCHEMES:
        userinfo, _, hosts = parts.netloc.rpartition("@")
        nodes = _cluster_nodes(url, hosts)
        if parts.path not in ("", "/", "/0"):
            raise ValueError(
                f"{_redact(url)!r}: a cluster has only database 0; drop {parts.path!r}"
            )
        auth = f"{userinfo}@" if userinfo else ""
        host, port = nodes[0]
        host = f"[{host}]" if ":" in host else host
        first = f"{_CLUSTER_SCHEMES[scheme]}://{auth}{host}:{port}{tail}"
        return _Target(first, nodes), ours
    mapped = _SCHEMES[scheme]
    netloc = parts.netloc
    if mapped == "unix" and not parts.path:
        raise ValueError(f"{_redact(url)!r} names no socket path: use redis+unix:///path/to.sock")
    # Built by hand: urlunsplit drops the '//' of 'unix:///path' when there is no host.
    return _Target(f"{mapped}://{netloc}{parts.path}{tail}"), ours


def _cluster_nodes(url: str, hosts: str) -> tuple[tuple[str, int], ...]:
    """The startup nodes of ``host:port,host:port`` (``[::1]:port`` for IPv6; port 6379
    when left out)."""
    nodes = []
    for item in hosts.split(","):
        item = item.strip()
        if item.startswith("["):
            host, _, rest = item[1:].partition("]")
            port_text = rest.removeprefix(":")
        else:
            host, _, port_text = item.partition(":")
        try:
            port = int(port_text) if port_text else 6379
        except ValueError:
            port = 0
        if not host or not 0 < port < 65536:
            raise ValueError(
                f"{_redact(url)!r}: bad cluster node {item!r}; "
                "use redis+cluster://host:port[,host:port...]"
            )
        nodes.append((host, port))
    return tuple(nodes)


def _redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    host = parts.netloc.rsplit("@", 1)[-1]
    user = parts.username or ""
    return urlunsplit((parts.scheme, f"{user}:***@{host}", parts.path, parts.query, ""))


class _LoopClient:
    """An event loop's async client, whether it knows the cluster yet, and the loop's
    locks on runs (asyncio objects belong to one loop)."""

    __slots__ = ("client", "locks", "ready")

    def __init__(self, client: AsyncClient, locks: list[asyncio.Lock]) -> None:
        self.client = client
        self.locks = locks
        self.ready = False


class RedisStore(Store):
    """Per-run guard state in Redis/Valkey, shared by every worker that uses the same URL.

    Build it with :meth:`from_url` (``Guard(store="redis://host:6379/0")`` does).
    Options: ``ttl_seconds`` (idle runs expire; required, Redis keys always expire),
    ``prefix`` (namespace, e.g. per application), ``timeout`` (seconds to wait for Redis
    per update), ``connect_timeout`` (default: ``timeout``), ``retries`` (immediate
    reconnects on a dropped connection), ``max_conflicts`` (attempts after a
    conflict before giving up; 0, the default: back off and retry until ``timeout``),
    ``retry_interval`` (seconds to fail fast after a timeout),
    ``cache_size`` (runs whose last state this worker keeps decoded, default 1000: about
    40 KB each with the default detectors; a run not kept costs one more round trip).
    ``redis+cluster://host:port,host:port`` (and ``rediss+``, ``valkey+``,
    ``valkeys+cluster``) uses a Redis / Valkey cluster (see the module's notes); other
    query parameters of a cluster URL are connection options (``ssl_ca_certs``...).
    """

    def __init__(
        self,
        url: str = "redis://localhost:6379/0",
        *,
        ttl_seconds: float | None = 3600.0,
        prefix: str = "default",
        timeout: float = 0.5,
        connect_timeout: float | None = None,
        retries: int = 1,
        max_conflicts: int = 0,
        retry_interval: float = 1.0,
        cache_size: int = 1000,
    ) -> None:
        if ttl_seconds is None or not ttl_seconds > 0:
            raise ValueError(
                f"ttl_seconds must be a positive number of seconds for a Redis store, not "
                f"{ttl_seconds!r}: every key expires so that idle runs do not pile up"
            )
        if not timeout > 0:
            raise ValueError(f"timeout must be positive, not {timeout!r}")
        if connect_timeout is not None and not connect_timeout > 0:
            raise ValueError(f"connect_timeout must be positive, not {connect_timeout!r}")
        if retries < 0 or max_conflicts < 0 or retry_interval < 0 or cache_size < 1:
            raise ValueError(
                "retries, max_conflicts and retry_interval must be >= 0 and cache_size >= 1"
            )
        redis = _redis_module()
        target, leftover = _split_url(url)
        if leftover:
            names = ", ".join(sorted(leftover))
            raise ValueError(f"pass {names} to RedisStore.from_url, or as keyword arguments")
        self.url = _redact(url)
        self.ttl_seconds = float(ttl_seconds)
        self.prefix = prefix
        self.timeout = float(timeout)
        self.connect_timeout = float(connect_timeout if connect_timeout is not None else timeout)
        self.retries = retries
        self.max_conflicts = max_conflicts
        self.retry_interval = float(retry_interval)
        self.cache_size = cache_size
        self._ttl_ms = max(1, round(self.ttl_seconds * 1000))
        self._key_prefix = f"loopwatch:{prefix}:"
        self._target = target
        self.cluster = bool(target.cluster_nodes)
        self._redis = redis
        # RedisClusterException (e.g. no cluster node reachable) is not a RedisError.
        self._errors: tuple[type[BaseException], ...] = (
            redis.RedisError,
            redis.exceptions.RedisClusterException,
            OSError,
        )
        self._timeouts: tuple[type[BaseException], ...] = (
            redis.TimeoutError,
            TimeoutError,
            asyncio.TimeoutError,
        )
        self._async_errors: tuple[type[BaseException], ...] = (*self._errors, asyncio.TimeoutError)
        # A single server's client connects on first use; a cluster client discovers the
        # cluster when built, so it is built on first use too (_sync), and a store made
        # while the cluster is down still builds.
        single = redis.Redis.from_url(target.url, **self._client_options(redis))
        self._check_options(single)
        if self.cluster:
            single.close()
            try:  # its constructor checks the keyword options, without connecting
                self._new_async_cluster(redis)
            except TypeError as exc:
                raise ValueError(f"bad option in Redis store URL {self.url!r}: {exc}") from exc
        self._client: SyncClient | None = None if self.cluster else single
        self._client_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._local = threading.local()  # the deadline of this thread's current call
        self._closing: set[asyncio.Task[None]] = set()  # old async clients being closed
        self._aclients: dict[asyncio.AbstractEventLoop, _LoopClient] = {}
        self._locks = [threading.Lock() for _ in range(_STRIPES)]
        self._pid = os.getpid()
        self._sha: str = hashlib.sha1(CAS_SCRIPT.encode(), usedforsecurity=False).hexdigest()
        self._cache: OrderedDict[str, _Cached] = OrderedDict()
        self._lock = threading.Lock()
        self._down_until = 0.0
        self._down_cause = ""
        # Counters for tests and benchmarks (not locked: approximate under threads):
        # script calls sent, conflicts met.
        self.round_trips = 0
        self.conflicts = 0
        self.replaced = 0  # unreadable stored states replaced by fresh ones

    @classmethod
    def from_url(cls, url: str, **options: Any) -> RedisStore:
        """Build a store from ``redis://``, ``rediss://``, ``redis+unix://``, ``valkey://``...

        loopwatch's options may be given in the query string
        (``redis://host:6379/0?prefix=myapp&timeout=0.2``) or as keyword arguments,
        which win; every other query parameter goes to redis-py
        (``ssl_cert_reqs``, ``db``, ``health_check_interval``...).
        """
        _, from_query = _split_url(url)
        opts: dict[str, Any] = {}
        for name, text in from_query.items():
            try:
                opts[name] = _URL_OPTIONS[name](text)
            except ValueError as exc:
                raise ValueError(f"bad {name}={text!r} in {_redact(url)!r}: {exc}") from exc
        opts.update(options)
        unknown = sorted(set(opts) - set(_URL_OPTIONS))
        if unknown:
            raise TypeError(
                f"unknown Redis store option(s) {', '.join(unknown)}; "
                f"known: {', '.join(_URL_OPTIONS)}"
            )
        parts = urlsplit(url)
        kept = [(k, v) for k, v in parse_qsl(parts.query, True) if k not in _URL_OPTIONS]
        bare = urlunsplit((parts.scheme, parts.netloc, parts.path, urlencode(kept), ""))
        return cls(bare, **opts)

    def _client_options(self, redis: Any) -> dict[str, Any]:
        """redis-py options: bounded waits, and reconnect at once only on dropped links.

        Timeouts are not retried, so a paused or overloaded server costs one
        ``timeout``, not several.
        """
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        return {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.connect_timeout,
            "retry": Retry(NoBackoff(), self.retries, supported_errors=(redis.ConnectionError,)),
            "retry_on_timeout": False,
            "decode_responses": False,
        }

    def _cluster_options(self) -> dict[str, Any]:
        """redis-py cluster options: bounded waits and no retry inside redis-py (which
        would retry timeouts too); the store retries a dropped link itself, while time
        is left (:meth:`_eval`)."""
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        options: dict[str, Any] = {
            "socket_timeout": self.timeout,
            "socket_connect_timeout": self.connect_timeout,
            "retry": Retry(NoBackoff(), 0),
            "decode_responses": False,
        }
        return options

    def _sync(self) -> SyncClient:
        """The sync client. A cluster's is built on first use (and again after no node
        was reachable): it discovers the cluster from the URL's nodes, each tried with
        ``connect_timeout`` and ``timeout``, as a single server's first call connects."""
        client = self._client
        if client is not None:
            return client
        with self._client_lock:
            if self._client is None:
                cluster: Any = self._redis.cluster
                nodes = [cluster.ClusterNode(h, p) for h, p in self._target.cluster_nodes[1:]]
                client = cluster.RedisCluster(
                    url=self._target.url, startup_nodes=nodes, **self._cluster_options()
                )
                manager = getattr(client, "nodes_manager", None)
                if manager is not None and callable(getattr(manager, "initialize", None)):
                    manager.initialize = self._refresh_off_thread(manager.initialize)
                self._client = client
            return self._client

    def _refresh_off_thread(self, refresh: Callable[..., Any]) -> Callable[..., Any]:
        """redis-py refreshes its map of the cluster inline after a timeout, a dropped
        link or MOVED, trying node after node, each with its own timeout: on a helper
        thread instead, waited for until the caller's deadline. A refresh given up goes
        on there (redis-py runs one at a time) and the caller's command fails as it
        would have; the next one finds the new map."""

        def bounded(*args: Any, **kwargs: Any) -> Any:
            future = self._helpers().submit(refresh, *args, **kwargs)
            deadline = getattr(self._local, "deadline", None) or self._deadline()
            try:
                return future.result(timeout=max(0.0, deadline - time.monotonic()))
            except FutureTimeout:
                raise TimeoutError("no cluster node answered in time to refresh the map") from None

        return bounded

    def _within(self, deadline: float, call: Callable[[], T]) -> T:
        """``call()``, with helper threads waited for until ``deadline`` at most."""
        self._local.deadline = deadline
        try:
            return call()
        finally:
            self._local.deadline = None

    def _deadline(self) -> float:
        return time.monotonic() + self.timeout

    def _lost_cluster(self, exc: BaseException) -> None:
        """A cluster client that reached no node at all is dropped, to be rebuilt from
        the URL's nodes by the next update (older redis-py forgets unreachable nodes)."""
        if self.cluster and isinstance(exc, self._redis.exceptions.RedisClusterException):
            self._client = None

    def _new_async_cluster(self, redis: Any) -> redis_async_cluster.RedisCluster:
        from redis.asyncio.cluster import ClusterNode

        nodes = [ClusterNode(h, p) for h, p in self._target.cluster_nodes[1:]]
        client: redis_async_cluster.RedisCluster = redis.asyncio.cluster.RedisCluster.from_url(
            self._target.url, startup_nodes=nodes, **self._cluster_options()
        )
        return client

    def _check_options(self, client: Any) -> None:
        """Fail now, not at the first step, on a query parameter redis-py does not know."""
        pool = client.connection_pool
        try:
            pool.connection_class(**pool.connection_kwargs)
        except TypeError as exc:
            raise ValueError(f"bad option in Redis store URL {self.url!r}: {exc}") from exc

    # -- keys and the local cache ------------------------------------------------------
    def key(self, run_id: str) -> str:
        """The Redis key holding a run's state: ``loopwatch:<prefix>:<run_id>``, and on a
        cluster ``loopwatch:{<tag>}:<prefix>:<run_id>`` where the hash tag in braces is
        16 hex digits of a hash of the run id: whatever braces the prefix or the run id hold,
        the tag alone picks the run's hash slot, and runs spread over all slots."""
        if self.cluster:
            tag = _slot_tag(run_id)
            return f"loopwatch:{{{tag}}}:{self.prefix}:{run_id}"
        return self._key_prefix + run_id

    def _pattern(self) -> str:
        """A SCAN pattern matching the keys of this prefix, and only those."""
        prefix = self.prefix.translate(_GLOB_SPECIAL)
        if self.cluster:
            return "loopwatch:{" + "?" * _TAG_DIGITS + "}:" + prefix + ":*"
        return f"loopwatch:{prefix}:*"

    def _take(self, run_id: str) -> _Cached | None:
        """Take the run's last known state out of the cache (no copy, no decoding).

        Taken, not read: if the update fails half-way (a Redis error, an exception in
        ``fn``), the mutated dict is simply dropped and the next update fetches the
        state from Redis (one extra round trip), so a failed step never leaks into it.
        """
        with self._lock:
            return self._cache.pop(run_id, None)

    def _remember(self, run_id: str, item: _Cached | None) -> None:
        with self._lock:
            cache = self._cache
            if item is None:
                cache.pop(run_id, None)
                return
            cache[run_id] = item
            cache.move_to_end(run_id)
            if len(cache) > self.cache_size:
                cache.popitem(last=False)

    def _after_fork(self) -> None:
        """A forked worker gets fresh locks: one held by another thread at fork time
        would otherwise stay held forever in the child. (redis-py renews its own
        connections after a fork.)"""
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._locks = [threading.Lock() for _ in range(_STRIPES)]
        self._aclients = {}
        self._cache = OrderedDict()
        if self.cluster:  # its topology locks may have been held at fork time too
            self._client_lock = threading.Lock()
            self._client = None
            self._pool = None  # the helper threads did not survive the fork

    # -- faults ---------------------------------------------------------------------------
    def _fail_fast(self) -> None:
        """Skip Redis while a recent timeout says it is stalled (bounded by retry_interval)."""
        if os.getpid() != self._pid:
            self._after_fork()
        left = self._down_until - time.monotonic()
        if left > 0:
            raise StoreUnavailable(
                f"Redis store {self.url} timed out recently ({self._down_cause}); "
                f"next try in {left:.2f}s"
            )

    def _unavailable(self, exc: BaseException, doing: str) -> StoreUnavailable:
        self._lost_cluster(exc)
        cause = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
        if isinstance(exc, self._timeouts):
            self._down_cause = cause
            self._down_until = time.monotonic() + self.retry_interval
        return StoreUnavailable(f"Redis store {self.url} unavailable while {doing}: {cause}")

    def _busy(self, run_id: str) -> StoreUnavailable:
        return StoreUnavailable(
            f"Redis store {self.url}: waited {self.timeout}s for this process's other "
            f"updates of run {run_id!r} (is Redis slow?)"
        )

    def _conflicted(self, run_id: str, attempts: int, spent: float) -> StoreUnavailable:
        """Why an update gave up. Up to two conflicts wait for no back-off, so when the
        time ran out after so few, it went to Redis's replies (a paused server or a
        loaded machine), not to other writers: the message says which, as the remedy
        differs."""
        capped = bool(self.max_conflicts) and attempts > self.max_conflicts
        why = (
            "other workers kept updating it at the same time"
            if attempts > 2 or capped
            else "too few conflicts to be other writers: the time went to waiting (a paused "
            "server, a loaded machine)"
        )
        return StoreUnavailable(
            f"Redis store {self.url}: gave up updating run {run_id!r} after {attempts} "
            f"attempt(s) in {spent:.3f}s; {why} (raise timeout={self.timeout} if this is "
            f"expected)"
        )

    # -- the compare-and-set loop --------------------------------------------------------
    def _after_conflict(
        self, run_id: str, reply: Any, factory: Callable[[], State]
    ) -> _Cached | None:
        """What the script returned on a conflict: the run's current (version, state).

        A stored value that is not a readable state (damaged, foreign, another
        version) is replaced: the run starts afresh, flagged in the verdict and
        logged once, instead of going unguarded until its key expires."""
        self.conflicts += 1
        version, blob = reply[0], reply[1]
        if version == b"":
            return None
        try:
            state = RunState.from_bytes(blob)
        except StateError as exc:
            state = factory()
            state.reset_reason = (
                f"the stored state of run {run_id!r} at {self.key(run_id)!r} could not be "
                f"read ({exc}); the run started afresh"
            )
            self.replaced += 1
            if self.replaced == 1 or self.replaced % 1000 == 0:
                _log.warning("loopwatch: Redis store %s: %s", self.url, state.reset_reason)
        return (bytes(version), state)

    def _backoff(self, conflicts: int) -> float:
        """Seconds to wait before the next attempt after ``conflicts`` in a row: none
        after the first (the conflict brought the current state), then growing with
        jitter, so writers that keep colliding spread out over the timeout instead of
        using up their attempts in a few milliseconds."""
        if conflicts < 2:
            return 0.0
        wait: float = min(_BACKOFF_MAX, _BACKOFF_BASE * 2 ** min(conflicts - 2, 6))
        return wait * (0.5 + random.random())

    def _gave_up(self, conflicts: int, start: float, wait: float) -> bool:
        spent = time.monotonic() - start
        over = bool(self.max_conflicts) and conflicts > self.max_conflicts
        return over or spent + wait >= self.timeout

    def apply(self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]) -> T:
        self._fail_fast()
        if self._client is None:  # a cluster's first call: discovering is not the step's
            try:
                self._sync()
            except self._errors as exc:
                raise self._unavailable(exc, "discovering the cluster") from exc
        start = time.monotonic()
        # This process's updates of one run take turns, so they never conflict with
        # each other: only other processes' updates cost a retry.
        lock = self._locks[hash(run_id) % _STRIPES]
        if not lock.acquire(timeout=self.timeout):
            raise self._busy(run_id)
        try:
            self._fail_fast()  # the update we waited for may have found Redis stalled
            key = self.key(run_id)
            steps = self._attempts(run_id, fn, factory, start)
            request = next(steps)
            while True:
                if isinstance(request, float):
                    time.sleep(request)
                    reply = None
                else:
                    try:
                        reply = self._eval(key, *request, deadline=start + self.timeout)
                    except self._errors as exc:
                        raise self._unavailable(exc, f"updating run {run_id!r}") from exc
                try:
                    request = steps.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
        finally:
            lock.release()

    def _attempts(
        self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State], start: float
    ) -> Generator[tuple[bytes, bytes, bytes] | float, Any, T]:
        """The compare-and-set loop without its I/O, shared by :meth:`apply` and
        :meth:`aapply`: it yields the script's arguments ``(expected version, new
        version, state bytes)`` and is sent the reply, or yields seconds to wait
        before the next attempt; it returns ``fn``'s result once a write wins."""
        cached = self._take(run_id)
        conflicts = 0
        while True:
            expected, state = (b"", factory()) if cached is None else cached
            result = fn(state)
            version = os.urandom(8)
            reply = yield (expected, version, state.to_bytes())
            # The stored version is ours: this write landed (a retried send of a script
            # call whose reply was lost finds its own write), so it is not a conflict.
            if reply == 1 or reply[0] == version:
                self._remember(run_id, (version, state))
                return result
            conflicts += 1
            cached = self._after_conflict(run_id, reply, factory)
            wait = self._backoff(conflicts)
            if self._gave_up(conflicts, start, wait):
                raise self._conflicted(run_id, conflicts, time.monotonic() - start)
            if wait:
                yield wait

    def _eval(
        self, key: str, expected: bytes, version: bytes, blob: bytes, *, deadline: float
    ) -> Any:
        """One compare-and-set. On a cluster, a dropped link is sent again at once
        (``retries`` times, while ``timeout`` is not over): redis-py has by then
        refreshed its map of the cluster, so the retry reaches a promoted replica or
        follows a moved slot. (A single server's client reconnects by itself.)"""
        args = (key, expected, version, blob, self._ttl_ms)

        def call() -> Any:
            left = self.retries if self.cluster else 0
            while True:
                try:
                    client = self._sync()
                    self.round_trips += 1
                    try:
                        return client.evalsha(self._sha, 1, *args)
                    except self._redis.exceptions.NoScriptError:
                        # A restarted or flushed server (on a cluster: the node serving
                        # the key) lost the script: EVAL sends and caches it there.
                        self.round_trips += 1
                        return client.eval(CAS_SCRIPT, 1, *args)
                except self._redis.ConnectionError:
                    if left <= 0 or time.monotonic() >= deadline:
                        raise
                    left -= 1

        return self._within(deadline, call)

    def _helpers(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(_HELPERS, thread_name_prefix="loopwatch-redis")
            return self._pool

    async def aapply(
        self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]
    ) -> T:
        self._fail_fast()
        item = self._aclient()
        if not item.ready:
            await self._adiscover(item)
        start = time.monotonic()
        client = item.client
        lock = item.locks[hash(run_id) % _STRIPES]
        try:
            await asyncio.wait_for(lock.acquire(), self.timeout)
        except asyncio.TimeoutError:
            raise self._busy(run_id) from None
        try:
            self._fail_fast()
            key = self.key(run_id)
            steps = self._attempts(run_id, fn, factory, start)
            request = next(steps)
            while True:
                if isinstance(request, float):
                    await asyncio.sleep(request)
                    reply = None
                else:
                    left = self.timeout - (time.monotonic() - start)
                    if left <= 0:
                        raise self._conflicted(run_id, 0, time.monotonic() - start)
                    try:
                        reply = await asyncio.wait_for(self._aeval(client, key, *request), left)
                    except self._async_errors as exc:
                        if isinstance(exc, asyncio.TimeoutError):
                            self._renew_aclient(client)
                        raise self._unavailable(exc, f"updating run {run_id!r}") from exc
                try:
                    request = steps.send(reply)
                except StopIteration as done:
                    return done.value  # type: ignore[no-any-return]
        finally:
            lock.release()

    async def _aeval(
        self, client: AsyncClient, key: str, expected: bytes, version: bytes, blob: bytes
    ) -> Any:
        """:meth:`_eval`, async; the caller bounds the whole of it by the time left."""
        args = (key, expected, version, blob, self._ttl_ms)
        left = self.retries if self.cluster else 0
        while True:
            try:
                self.round_trips += 1
                try:
                    return await client.evalsha(self._sha, 1, *args)
                except self._redis.exceptions.NoScriptError:
                    self.round_trips += 1
                    return await client.eval(CAS_SCRIPT, 1, *args)
            except self._redis.ConnectionError:
                if left <= 0:
                    raise
                left -= 1

    async def _adiscover(self, item: _LoopClient) -> None:
        """A new async cluster client first learns the cluster (CLUSTER SLOTS, COMMAND):
        given ``timeout`` of its own, so that a step's ``timeout`` is for the step."""
        client = item.client
        try:
            await asyncio.wait_for(client.initialize(), self.timeout)
        except self._async_errors as exc:
            raise self._unavailable(exc, "discovering the cluster") from exc
        if item.client is client:
            item.ready = True

    def _aclient(self) -> _LoopClient:
        """The running event loop's asyncio client and run locks (both belong to one loop)."""
        loop = asyncio.get_running_loop()
        with self._lock:
            item = self._aclients.get(loop)
            if item is None:
                for old in [lp for lp in self._aclients if lp.is_closed()]:
                    del self._aclients[old]  # its sockets close when it is collected
                client: AsyncClient
                if self.cluster:  # connects on first use
                    client = self._new_async_cluster(self._redis)
                else:
                    client = self._redis.asyncio.Redis.from_url(
                        self._target.url, **self._client_options(self._redis)
                    )
                # a single server's client connects with the first step's command
                item = _LoopClient(client, [asyncio.Lock() for _ in range(_STRIPES)])
                item.ready = not self.cluster
                self._aclients[loop] = item
        return item

    def _renew_aclient(self, client: AsyncClient) -> None:
        """After a cluster command was given up, the loop gets a new cluster client.

        redis-py refreshes its map of the cluster when a command of its own times out;
        one cancelled at ``timeout`` never does, so the old client would keep sending a
        stalled master's slots to it after its replica took over. The new one learns
        the cluster afresh at its first command; the old one is closed."""
        if not self.cluster:
            return
        loop = asyncio.get_running_loop()
        with self._lock:
            item = self._aclients.get(loop)
            if item is None or item.client is not client:
                return  # another task renewed it already
            item.client = self._new_async_cluster(self._redis)
            item.ready = False
        task = loop.create_task(client.aclose())
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)

    # -- inspection and housekeeping -------------------------------------------------------
    def get(self, run_id: str) -> State | None:
        self._fail_fast()
        try:
            reply: Any = self._within(
                self._deadline(), lambda: self._sync().hmget(self.key(run_id), ["v", "s"])
            )
        except self._errors as exc:
            raise self._unavailable(exc, f"reading run {run_id!r}") from exc
        version, blob = reply
        if version is None or blob is None:
            return None
        try:
            return RunState.from_bytes(blob)
        except StateError:
            return None  # not a usable state: the next step replaces it

    def reset(self, run_id: str) -> None:
        self._fail_fast()
        self._remember(run_id, None)
        try:
            self._within(self._deadline(), lambda: self._sync().delete(self.key(run_id)))
        except self._errors as exc:
            raise self._unavailable(exc, f"resetting run {run_id!r}") from exc

    def __len__(self) -> int:
        """Live runs under this prefix, counted with SCAN (walks the keyspace: not hot-path)."""
        self._fail_fast()
        try:  # on a cluster, SCAN walks every master
            return sum(1 for _ in self._sync().scan_iter(match=self._pattern(), count=1000))
        except self._errors as exc:
            raise self._unavailable(exc, "counting runs") from exc

    def ttl(self, run_id: str) -> float | None:
        """Seconds until the run's key expires, or None if it does not exist."""
        try:
            ms = self._within(self._deadline(), lambda: self._sync().pttl(self.key(run_id)))
        except self._errors as exc:
            raise self._unavailable(exc, f"reading the TTL of run {run_id!r}") from exc
        return None if ms < 0 else ms / 1000

    def close(self) -> None:
        """Close the sync connections; async clients are dropped (prefer :meth:`aclose`)."""
        with self._lock:
            self._cache.clear()
            self._aclients.clear()
            pool, self._pool = self._pool, None
        client, self._client = self._client, None if self.cluster else self._client
        if client is not None:
            client.close()
        if pool is not None:
            pool.shutdown(wait=False)

    async def aclose(self) -> None:
        """Close the async client of the running loop, then everything else."""
        with self._lock:
            item = self._aclients.pop(asyncio.get_running_loop(), None)
        if item is not None:
            await item.client.aclose()
        self.close()

    def __repr__(self) -> str:
        return f"RedisStore({self.url!r}, prefix={self.prefix!r}, ttl_seconds={self.ttl_seconds})"
