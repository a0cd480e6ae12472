"""Helpers shared by the framework adapters: building the guard from keyword
configuration (or taking the one :func:`use_guard` made the default in this context),
observing without letting a loopwatch bug crash the user's agent, naming the extra to
install when a framework is missing, and holding the warnings that wait for the
model's next request."""

from __future__ import annotations

import contextvars
import json
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, Final

import orjson

from ..errors import StoreUnavailable
from ..extras import missing_extra
from ..findings import Action, Verdict
from ..guard import Guard
from ..policy import NOT_RUN, STOPPED

__all__ = [
    "NOT_RUN",
    "STOPPED",
    "PendingWarnings",
    "StoppedRuns",
    "aobserve_queued",
    "aobserve_safely",
    "content_text",
    "current_guard",
    "make_guard",
    "missing_extra",
    "observe_queued",
    "observe_safely",
    "use_guard",
]

log = logging.getLogger("loopwatch")

_PENDING_RUNS_MAX: Final = 10_000
_PENDING_PER_RUN_MAX: Final = 16


class _Scope:
    """What :func:`use_guard` put in force: the guard, and how to build one for an
    adapter that brings configuration keywords of its own."""

    __slots__ = ("derive", "guard")

    def __init__(self, guard: Guard, derive: Callable[[dict[str, Any]], Guard] | None) -> None:
        self.guard = guard
        self.derive = derive

    def guard_for(self, config: Mapping[str, Any]) -> Guard:
        if not config:
            return self.guard
        if self.derive is not None:
            return self.derive(dict(config))
        return Guard(self.guard.config, **dict(config))


# Context-local (a contextvar, not a global): each thread, asyncio task and pytest test
# sees its own; unset, it costs the adapters one lookup when they are built.
_SCOPE: contextvars.ContextVar[_Scope | None] = contextvars.ContextVar(
    "loopwatch_default_guard", default=None
)


@contextmanager
def use_guard(
    guard: Guard, derive: Callable[[dict[str, Any]], Guard] | None = None
) -> Iterator[Guard]:
    """Make ``guard`` the default guard inside this block (and the tasks it starts):
    every adapter built there without ``guard=`` and every bare ``@watch`` called there
    uses it. What the pytest plugin does for each test; useful for a harness that
    wants all the agents of one job judged by one guard without passing it around.

    An adapter given configuration keywords (``LoopwatchMiddleware(on_loop="skip")``)
    gets a guard of its own, configured as ``guard`` with the keywords on top (so
    they keep meaning what they say), built by ``derive(keywords)`` when given.
    Threads started inside do not inherit a contextvar: run them in
    ``contextvars.copy_context()``, as the frameworks' executors do.
    """
    token = _SCOPE.set(_Scope(guard, derive))
    try:
        yield guard
    finally:
        _SCOPE.reset(token)


def current_guard() -> Guard | None:
    """The guard :func:`use_guard` made the default here, or None."""
    scope = _SCOPE.get()
    return None if scope is None else scope.guard


def make_guard(guard: Guard | None, config: Mapping[str, Any]) -> Guard:
    """The guard an adapter uses: the one given; else, inside :func:`use_guard`, the
    default guard (or one derived from it when ``config`` has keywords); else a new
    one built from ``config``.

    Passing both is refused: silently ignoring the keywords would leave the user
    believing a threshold is in force when it is not.
    """
    if guard is not None:
        if config:
            raise TypeError(
                "pass either guard=... or configuration keywords "
                f"({', '.join(sorted(config))}), not both: the keywords would be ignored"
            )
        return guard
    scope = _SCOPE.get()
    if scope is not None:
        return scope.guard_for(config)
    return Guard(**dict(config))


def _failed(exc: Exception) -> Verdict:
    log.exception("loopwatch: observing a step failed; letting it through")
    return Verdict(Action.OK, -1, message=f"[loopwatch] observing failed: {exc}")


def observe_safely(guard: Guard, run_id: str, event: Mapping[str, Any]) -> Verdict:
    """``guard.observe`` that never breaks the agent for a loopwatch bug.

    ``StoreUnavailable`` still propagates: the guard raises it only when the user
    chose ``on_store_error="raise"``. Anything else is logged and the step is let
    through, as the guard itself does for an unreachable store by default.
    """
    try:
        return guard.observe(run_id, event)
    except StoreUnavailable:
        raise
    except Exception as exc:
        return _failed(exc)


async def aobserve_safely(guard: Guard, run_id: str, event: Mapping[str, Any]) -> Verdict:
    """Async :func:`observe_safely`."""
    try:
        return await guard.aobserve(run_id, event)
    except StoreUnavailable:
        raise
    except Exception as exc:
        return _failed(exc)


def content_text(content: Any) -> str:
    """Text of a message or tool output: a string as is, content blocks joined,
    anything else as JSON (so a structured result still has a stable fingerprint)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, Mapping):
                text = block.get("text")
                if isinstance(text, str):
                    parts.append(text)
                else:
                    parts.append(_json(block))
            else:
                parts.append(str(block))
        return "\n".join(parts)
    if isinstance(content, Mapping):
        return _json(content)
    return str(content)


def _json(value: Any) -> str:
    try:
        return orjson.dumps(value, option=orjson.OPT_SORT_KEYS, default=str).decode()
    except TypeError:  # beyond orjson: integers over 64 bits, non-str keys...
        return json.dumps(value, sort_keys=True, default=str, separators=(",", ":"))


class PendingWarnings:
    """Warnings waiting for a run's next model request; thread-safe and bounded.

    A warning is shown once, in the next request only, and never written into the
    conversation history: a warning persisted in the history would be seen again on
    every later turn, and one placed mid-history makes some providers reject it.
    Bounded so that runs which never make another model call do not leak.
    """

    def __init__(self, max_runs: int = _PENDING_RUNS_MAX) -> None:
        self._runs: OrderedDict[str, list[str]] = OrderedDict()
        self._lock = threading.Lock()
        self._max_runs = max_runs

    def add(self, run_id: str, message: str | None) -> None:
        if not message:
            return
        with self._lock:
            queue = self._runs.pop(run_id, [])
            if message not in queue:
                queue.append(message)
                del queue[:-_PENDING_PER_RUN_MAX]
            self._runs[run_id] = queue
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)

    def take(self, run_id: str) -> list[str]:
        """Remove and return the run's pending warnings (oldest first)."""
        with self._lock:
            return self._runs.pop(run_id, [])

    def peek(self, run_id: str) -> list[str]:
        with self._lock:
            return list(self._runs.get(run_id, ()))

    def discard(self, run_id: str) -> None:
        with self._lock:
            self._runs.pop(run_id, None)

    def __len__(self) -> int:
        return len(self._runs)


class StoppedRuns:
    """Runs a stop verdict ended, kept until the adapter reports the stop (raising
    ``LoopDetected`` when the framework's own stop has run its course); thread-safe and
    bounded (a stop that is never reported is forgotten, oldest first)."""

    def __init__(self, max_runs: int = _PENDING_RUNS_MAX) -> None:
        self._runs: OrderedDict[str, Verdict] = OrderedDict()
        self._lock = threading.Lock()
        self._max_runs = max_runs

    def add(self, run_id: str, verdict: Verdict) -> None:
        """Remember the run's first stop."""
        with self._lock:
            self._runs.setdefault(run_id, verdict)
            while len(self._runs) > self._max_runs:
                self._runs.popitem(last=False)

    def get(self, run_id: str) -> Verdict | None:
        with self._lock:
            return self._runs.get(run_id)

    def pop(self, run_id: str) -> Verdict | None:
        with self._lock:
            return self._runs.pop(run_id, None)


async def aobserve_queued(
    guard: Guard,
    run_id: str,
    event: Mapping[str, Any],
    pending: PendingWarnings,
    stopped: StoppedRuns | None = None,
) -> Verdict:
    """:func:`aobserve_safely`, then act on the verdict the way every adapter does: a
    warning waits for the run's next model request; a stop drops the run's waiting
    warnings and is remembered until the adapter reports it (``stopped``: None for a
    framework whose own stop needs no report later, like ADK's end of invocation)."""
    return _queued(await aobserve_safely(guard, run_id, event), run_id, pending, stopped)


def observe_queued(
    guard: Guard,
    run_id: str,
    event: Mapping[str, Any],
    pending: PendingWarnings,
    stopped: StoppedRuns | None = None,
) -> Verdict:
    """Sync :func:`aobserve_queued`, for frameworks whose hooks are sync."""
    return _queued(observe_safely(guard, run_id, event), run_id, pending, stopped)


def _queued(
    verdict: Verdict, run_id: str, pending: PendingWarnings, stopped: StoppedRuns | None
) -> Verdict:
    if verdict.action is Action.WARN:
        pending.add(run_id, verdict.message)
    elif verdict.action is Action.STOP:
        pending.discard(run_id)
        if stopped is not None:
            stopped.add(run_id, verdict)
    return verdict
