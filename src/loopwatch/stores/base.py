"""The store interface: where per-run state lives between observed steps."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TypeVar

from mypy_extensions import mypyc_attr

from ..state import RunState

__all__ = ["State", "Store"]

State = RunState
T = TypeVar("T")


# Compiled with the hot path (the memory store is on every observed step), and open to
# the stores written in Python: Redis, SQLite, a user's own.
@mypyc_attr(allow_interpreted_subclasses=True)
class Store(ABC):
    """Holds one run state per run id and applies updates to it atomically.

    ``apply(run_id, fn)`` loads the run's state (a fresh one from ``factory`` if
    the run is new or expired), calls ``fn(state)`` which mutates it in place and
    returns a value, saves the state, and returns that value, with no other update
    to the same run interleaved. ``fn`` is pure apart from the state it mutates, so
    a store may call it again on a fresh copy after a conflict (optimistic
    concurrency, as a Redis store does).
    """

    @abstractmethod
    def apply(self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]) -> T:
        """Atomically apply ``fn`` to the state of ``run_id``."""

    async def aapply(
        self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]
    ) -> T:
        """Async variant; the default runs the sync one (fine for in-process stores)."""
        return self.apply(run_id, fn, factory)

    @abstractmethod
    def get(self, run_id: str) -> State | None:
        """The run's current state, or None (for inspection and tests)."""

    @abstractmethod
    def reset(self, run_id: str) -> None:
        """Forget a run."""

    @abstractmethod
    def __len__(self) -> int:
        """Number of live runs held."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections; the default has none."""

    async def aclose(self) -> None:
        """Release async connections; the default closes the sync ones."""
        self.close()
