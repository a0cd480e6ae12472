"""The default store: run states in this process, with LRU and TTL eviction."""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from typing import TypeVar

from .base import State, Store

__all__ = ["MemoryStore"]

T = TypeVar("T")


class MemoryStore(Store):
    """Run states in an LRU dict guarded by one lock.

    A run idle for ``ttl_seconds`` starts afresh; past ``max_runs`` live runs the
    least recently used is dropped. One lock is enough: an update takes a few
    microseconds, and the GIL serialises Python work anyway.
    """

    def __init__(self, max_runs: int = 10_000, ttl_seconds: float | None = 3600.0) -> None:
        if max_runs < 1:
            raise ValueError("max_runs must be at least 1")
        self.max_runs = max_runs
        self.ttl_seconds = ttl_seconds
        self._runs: OrderedDict[str, tuple[float, State]] = OrderedDict()
        self._lock = threading.Lock()
        self._clock = time.monotonic

    def apply(self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]) -> T:
        now = self._clock()
        ttl = self.ttl_seconds
        with self._lock:
            runs = self._runs
            item = runs.get(run_id)
            if item is None or (ttl is not None and now - item[0] > ttl):
                state = factory()
            else:
                state = item[1]
                runs.move_to_end(run_id)
            runs[run_id] = (now, state)
            if len(runs) > self.max_runs:
                runs.popitem(last=False)
                self._expire(now)
            return fn(state)

    def _expire(self, now: float) -> None:
        """Drop expired runs from the old end of the LRU (caller holds the lock)."""
        ttl = self.ttl_seconds
        if ttl is None:
            return
        runs = self._runs
        while runs:
            run_id, (touched, _) = next(iter(runs.items()))
            if now - touched <= ttl:
                break
            del runs[run_id]

    def get(self, run_id: str) -> State | None:
        with self._lock:
            item = self._runs.get(run_id)
        return None if item is None else item[1]

    def reset(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._runs)
