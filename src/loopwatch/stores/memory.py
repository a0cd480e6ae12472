"""The default store: run states in this process, with LRU and TTL eviction."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import parse_qs, urlparse

from ..durations import parse_duration
from .base import State, Store

__all__ = ["MemoryStore"]

T = TypeVar("T")


class _Held:
    """A run's state and when it was last used: updated in place on every step (a new
    tuple per step, and the dict entry rewritten, cost more)."""

    __slots__ = ("state", "touched")

    def __init__(self, touched: float, state: State) -> None:
        self.touched = touched
        self.state = state


class MemoryStore(Store):
    """Run states in an LRU dict guarded by one lock.

    A run idle for ``ttl_seconds`` is gone: the next step starts it afresh, ``get``
    no longer sees it and it no longer counts as live. Expiry is checked on every
    access, not only when ``max_runs`` overflows, so idle runs do not hold memory
    until the store fills up. Past ``max_runs`` live runs the least recently used
    is dropped. One lock is enough: an update takes a few microseconds, and the GIL
    serialises Python work anyway.
    """

    @classmethod
    def from_url(cls, url: str = "memory://", **options: Any) -> MemoryStore:
        """``memory://`` with optional ``max_runs`` and ``ttl_seconds`` in the query;
        keyword options override the URL's."""
        query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
        opts: dict[str, Any] = {}
        if "max_runs" in query:
            opts["max_runs"] = int(query["max_runs"])
        if "ttl_seconds" in query:
            opts["ttl_seconds"] = parse_duration(query["ttl_seconds"])
        opts.update(options)
        return cls(**opts)

    # The parameters are checked here, not by their annotations: a compiled signature
    # would refuse a wrong type with a bare TypeError instead of the message below.
    def __init__(self, max_runs: Any = 10_000, ttl_seconds: Any = 3600.0) -> None:
        if isinstance(max_runs, bool) or not isinstance(max_runs, int) or max_runs < 1:
            raise ValueError(f"max_runs must be a whole number >= 1, not {max_runs!r}")
        if ttl_seconds is not None and (
            isinstance(ttl_seconds, bool)
            or not isinstance(ttl_seconds, (int, float))
            or not ttl_seconds > 0
        ):
            raise ValueError(
                f"ttl_seconds must be a number of seconds > 0 (or None: never expire), "
                f"not {ttl_seconds!r}; 0 would expire every run at once and guard nothing"
            )
        self.max_runs: int = max_runs
        self.ttl_seconds: float | None = None if ttl_seconds is None else float(ttl_seconds)
        self._runs: OrderedDict[str, _Held] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = time.monotonic
        self._next_sweep = 0.0

    def apply(self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]) -> T:
        now = self._clock()
        with self._lock:
            if now >= self._next_sweep:
                self._expire(now)
            runs = self._runs
            held = runs.get(run_id)
            if held is None:
                state = factory()
                runs[run_id] = _Held(now, state)  # a new key goes to the most recently used end
                if len(runs) > self.max_runs:
                    runs.popitem(last=False)
            else:
                ttl = self.ttl_seconds
                if ttl is not None and now - held.touched > ttl:
                    held.state = factory()  # idle past its TTL: starts afresh
                held.touched = now
                state = held.state
                # to the most recently used end: a link moved, where a pop and an insert
                # free and make one (and leave a hole in the dict)
                runs.move_to_end(run_id)
            return fn(state)

    def _expire(self, now: float) -> None:
        """Drop expired runs (caller holds the lock). Runs are kept in order of last
        use, so the expired ones are at the old end: amortised O(1) per access."""
        ttl = self.ttl_seconds
        if ttl is None:
            return
        # The run being accessed is checked on its own (apply); the others are swept
        # at most every second (or every TTL, if shorter), not on every step.
        self._next_sweep = now + min(ttl, 1.0)
        runs = self._runs
        while runs:
            run_id, held = next(iter(runs.items()))
            if now - held.touched <= ttl:
                break
            del runs[run_id]

    def get(self, run_id: str) -> State | None:
        with self._lock:
            self._expire(self._clock())
            held = self._runs.get(run_id)
        return None if held is None else held.state

    def reset(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def __len__(self) -> int:
        with self._lock:
            self._expire(self._clock())
            return len(self._runs)
