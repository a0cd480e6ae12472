"""The runtime guard: observes each step of many concurrent runs and answers.

Usage::

    guard = Guard()                      # defaults, or loopwatch.toml if present
    verdict = guard.observe(run_id, {"kind": "tool_call", "name": "web_search",
                                     "args": {"q": "paris weather"}})
    if verdict.action == "skip": ...     # don't run the tool; return verdict.message
    if verdict.action == "stop": ...     # end the run
    if verdict.action == "warn": ...     # show verdict.message to the model
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any, overload

from mypy_extensions import mypyc_attr

from ._logger import WARNING, log
from .config import Config
from .detectors import Detector
from .engine import Engine, new_state
from .errors import StoreUnavailable
from .events import KINDS, Event
from .findings import Action, Verdict
from .policy import Policy, Step
from .redact import redact
from .stores import SCHEMES, Store, scheme_of, store_from_url
from .stores.base import State

__all__ = ["CallerError", "Guard"]


def _run_key(run_id: object) -> str:
    """The run id as the stores key it (checked by ``Guard._event`` first): a whole
    number is accepted and keyed as its decimal string, as the shared stores key it."""
    return run_id if type(run_id) is str else str(run_id)


class CallerError(ValueError):
    """The guard was called wrongly (no event, an event that is not a mapping, a
    run id that is not a string): the caller's mistake, told apart from a bug in
    loopwatch so that the log says which of the two needs fixing."""


# Compiled with the hot path (observe runs on every step), and open to subclasses
# written in Python (integrations and users wrap it).
@mypyc_attr(allow_interpreted_subclasses=True)
class Guard:
    """Per-run loop detection for live agents; thread- and asyncio-safe.

    Parameters: a :class:`Config` (default: ``loopwatch.toml`` or
    ``[tool.loopwatch]`` found from the working directory, else the built-in
    defaults), then keyword overrides with the same names as the configuration
    keys (``on_loop="skip"``, ``max_iterations=100``,
    ``repeated_call={"stop_at": 8}``, ``store="redis://localhost:6379/0"``...).
    ``detectors`` replaces the configured detector set outright.
    """

    def __init__(
        self,
        config: Config | None = None,
        *,
        detectors: Iterable[Detector] | None = None,
        # Store | str | None: Any so that the compiled build does not refuse another
        # type before the configuration refuses it with a message naming the key
        store: Any = None,
        **options: Any,
    ) -> None:
        cfg = config if config is not None else Config.load()
        if store is not None and not isinstance(store, Store):
            options["store"] = store  # a URL (or a mistake): judged with the configuration
            store = None
        if options:
            cfg = cfg.with_options(options)
        self.config = cfg
        dets: tuple[Detector, ...] = (
            tuple(detectors) if detectors is not None else tuple(cfg.detectors())
        )
        self.engine = Engine(dets, cfg.exempt_tools, cfg.redact_patterns)
        self.policy = Policy(
            cfg.on_loop,  # type: ignore[arg-type]
            tell_first=cfg.tell_first,
            redact=self.engine.redact,
        )
        if isinstance(store, Store):
            self.store = store
        else:
            url = cfg.store
            kind = SCHEMES[scheme_of(url)]  # the configuration checked the scheme
            extra: dict[str, Any] = {"ttl_seconds": cfg.ttl_seconds}
            if kind.takes_max_runs and "max_runs" not in url:
                extra["max_runs"] = cfg.max_runs
            self.store = store_from_url(url, **extra)
        self.on_store_error = cfg.on_store_error
        self._outage = False
        self._outage_lock = threading.Lock()
        self._errors_logged: set[str] = set()
        self._mistakes_logged: set[str] = set()

    # -- the hot path -----------------------------------------------------------------
    # The overloads are the public signature; the implementations take ``object``
    # because the compiled build checks an annotated argument's type before the body
    # runs, and a wrong one must get the caller-mistake answer below, not a TypeError.
    @overload
    def observe(self, run_id: str, event: Event) -> Verdict: ...
    @overload
    def observe(self, run_id: str, event: Mapping[str, Any]) -> Verdict: ...
    def observe(self, run_id: object, event: object) -> Verdict:
        """Observe one event of a run and return what the agent loop should do."""
        try:
            ev = self._event(run_id, event)
            verdict = self.store.apply(_run_key(run_id), self._stepper(ev), new_state)
        # one name per exception type: the compiled build gives a name one type
        except CallerError as mistake:
            return self._caller_error(mistake)
        except StoreUnavailable as outage:
            return self._store_failed(outage)
        except Exception as bug:  # a loopwatch bug: see _internal_error
            return self._internal_error(bug)
        if self._outage:
            self._recovered()
        return verdict

    # aobserve, aclose and the async context manager are plain methods that return a
    # coroutine: an ``async def`` compiled by mypyc shows neither its signature nor its
    # docstring to ``help()`` and ``inspect``; a plain method shows both.
    @overload
    def aobserve(self, run_id: str, event: Event) -> Coroutine[Any, Any, Verdict]: ...
    @overload
    def aobserve(self, run_id: str, event: Mapping[str, Any]) -> Coroutine[Any, Any, Verdict]: ...
    def aobserve(self, run_id: object, event: object) -> Coroutine[Any, Any, Verdict]:
        """Async :meth:`observe`: ``verdict = await guard.aobserve(run_id, event)``.

        The same answer as :meth:`observe`, through the store's async path (the Redis
        store's async client); never raises into the agent either.
        """
        return self._aobserve(run_id, event)

    async def _aobserve(self, run_id: object, event: object) -> Verdict:
        try:
            ev = self._event(run_id, event)
            verdict = await self.store.aapply(_run_key(run_id), self._stepper(ev), new_state)
        # one name per exception type: the compiled build gives a name one type
        except CallerError as mistake:
            return self._caller_error(mistake)
        except StoreUnavailable as outage:
            return self._store_failed(outage)
        except Exception as bug:  # a loopwatch bug: see _internal_error
            return self._internal_error(bug)
        self._recovered()
        return verdict

    def _event(self, run_id: Any, event: Any) -> Event:
        """The event to observe, or a :class:`CallerError` saying what is wrong with
        the call. An unknown kind is not refused (it keeps its step index, as in the
        offline scan, and no detector looks at it) but is logged once, since it is
        most often a typo ("tool-call") that silently turns detection off."""
        if type(run_id) is not str and (
            not isinstance(run_id, (str, int)) or isinstance(run_id, bool)
        ):
            raise CallerError(
                f"run_id must be a string identifying the run, not {type(run_id).__name__}"
            )
        if type(event) is dict:  # the common case, without an ABC check
            ev = Event.from_dict(event)
            kind: Any = ev.kind
            if kind in KINDS:
                return ev
        elif isinstance(event, Event):
            ev = event
            kind = event.kind
        elif isinstance(event, Mapping):
            ev = Event.from_dict(event)
            kind = event.get("kind")
        else:
            raise CallerError(
                "observe() needs an event: a mapping such as {'kind': 'tool_call', "
                f"'name': 'web_search', 'args': {{...}}}} or an Event, not {type(event).__name__}"
            )
        if kind not in KINDS:
            self._log_once(
                self._mistakes_logged,
                WARNING,
                f"loopwatch: event kind {kind!r:.60} is not one of {', '.join(sorted(KINDS))}; "
                "the step is counted but no detector looks at it",
            )
        return ev

    def _caller_error(self, exc: CallerError) -> Verdict:
        """A mistake in how the guard is called (not a loopwatch bug): logged once
        per kind of mistake (the message names types, not values) at WARNING, and
        the step let through unobserved."""
        message = f"ValueError: {exc}"
        self._log_once(self._mistakes_logged, WARNING, f"loopwatch: {message}")
        return Verdict(
            Action.OK,
            -1,
            message=f"[loopwatch] event not observed: {exc}",
            extra={"error": message, "caller_error": True},
        )

    def _log_once(self, seen: set[str], level: int, message: str) -> bool:
        key = message[:200]
        with self._outage_lock:
            first = key not in seen
            if first and len(seen) < 100:
                seen.add(key)
        if first:
            log.log(level, "%s", message)
        return first

    def _stepper(self, ev: Event) -> Callable[[State], Verdict]:
        return Step(self.engine, self.policy, ev)

    # -- store faults -----------------------------------------------------------------
    def _store_failed(self, exc: StoreUnavailable) -> Verdict:
        if self.on_store_error == "raise":
            raise exc
        with self._outage_lock:
            first = not self._outage
            self._outage = True
        reason = redact(str(exc))  # a store's error may quote its URL and password
        if first:
            log.warning("loopwatch: state store unavailable (%s); letting steps through", reason)
        return Verdict(
            Action.OK,
            -1,
            message=f"[loopwatch] state store unavailable: {reason}",
            state_available=False,
        )

    def _internal_error(self, exc: Exception) -> Verdict:
        """A bug in loopwatch (or a detector of the user's) must not take the agent
        down: log it with its traceback, once per kind of error, and let the step
        through. The offline scan does not do this, so tests still see the error."""
        key = redact(f"{type(exc).__name__}: {exc}"[:200])  # it may quote an event
        with self._outage_lock:
            first = key not in self._errors_logged
            if first and len(self._errors_logged) < 100:
                self._errors_logged.add(key)
        if first:
            log.error("loopwatch: internal error, step let through: %s", key, exc_info=exc)
        return Verdict(
            Action.OK, -1, message=f"[loopwatch] internal error: {key}", extra={"error": key}
        )

    def _recovered(self) -> None:
        if self._outage:
            with self._outage_lock:
                if self._outage:
                    self._outage = False
                    log.warning("loopwatch: state store reachable again")

    # -- housekeeping -------------------------------------------------------------------
    def reset(self, run_id: str) -> None:
        """Forget a run (call it when the run ends to free its state at once).

        During a store outage this follows ``on_store_error`` like ``observe``: the
        run's state expires by its TTL anyway, so "allow" only logs.
        """
        try:
            self.store.reset(run_id)
        except StoreUnavailable as exc:
            self._store_failed(exc)

    def state(self, run_id: str) -> State | None:
        """The run's current state (for inspection); None if unknown or unreachable."""
        try:
            return self.store.get(run_id)
        except StoreUnavailable as exc:
            self._store_failed(exc)
            return None

    def close(self) -> None:
        """Close the store's connections (``with Guard() as guard:`` calls it)."""
        self.store.close()

    def aclose(self) -> Coroutine[Any, Any, None]:
        """Close the store's async connections, then the rest (``await guard.aclose()``;
        ``async with Guard() as guard:`` calls it)."""
        return self.store.aclose()

    def __enter__(self) -> Guard:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __aenter__(self) -> Coroutine[Any, Any, Guard]:
        return self._self()

    async def _self(self) -> Guard:
        return self

    def __aexit__(self, *exc: object) -> Coroutine[Any, Any, None]:
        return self.store.aclose()
