"""Plain Python: a decorator that guards tool functions, sync or async.

::

    from loopwatch import Guard
    from loopwatch.integrations import current_run, watch

    guard = Guard(on_loop="skip")
    tool = watch(guard=guard)            # one guard for all the agent's tools

    @tool
    def web_search(q: str) -> str: ...

    with current_run("ticket-42"):       # which run the calls belong to
        agent_loop()

Each call is observed before it runs (``tool_call``) and after (``tool_result``).
``skip`` returns ``on_skip`` instead of running the function (by default the
guard's explanation, which reads well as a tool result for a model); ``stop``
raises :class:`~loopwatch.LoopDetected` with the verdict and its findings
attached; ``warn`` calls ``on_warn(verdict)`` (by default: a log warning).
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import itertools
import logging
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from typing import Any, Final, TypeVar, overload

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import aobserve_safely, content_text, current_guard, make_guard, observe_safely

__all__ = ["DEFAULT_RUN", "current_run", "watch"]

log = logging.getLogger("loopwatch")

F = TypeVar("F", bound=Callable[..., Any])

DEFAULT_RUN: Final = "default"
_RUN: contextvars.ContextVar[str | None] = contextvars.ContextVar("loopwatch_run", default=None)
_CALL_IDS = itertools.count(1)
_SELF_NAMES: Final = frozenset({"self", "cls"})
_UNSET: Any = object()

_default_guard: Guard | None = None
_default_lock = threading.Lock()


def _shared_guard() -> Guard:
    """One guard for every ``@watch`` without a guard or configuration of its own,
    so that calls of different tools in one run are seen together (a cycle spans
    several tools); inside :func:`~loopwatch.integrations.use_guard` (a pytest test
    with the plugin on), the guard in force there."""
    scoped = current_guard()
    if scoped is not None:
        return scoped
    global _default_guard
    with _default_lock:
        if _default_guard is None:
            _default_guard = Guard()
        return _default_guard


@contextmanager
def current_run(run_id: str) -> Iterator[str]:
    """Attribute the watched calls made inside this block (and the tasks it starts)
    to ``run_id``. Context-local, so concurrent runs in threads or tasks stay apart."""
    token = _RUN.set(str(run_id))
    try:
        yield str(run_id)
    finally:
        _RUN.reset(token)


def _log_warning(verdict: Verdict) -> None:
    log.warning("%s", verdict.message)


@overload
def watch(func: F, /) -> F: ...


@overload
def watch(
    func: None = None,
    /,
    *,
    guard: Guard | None = None,
    run_id: str | Callable[[], str] | None = None,
    name: str | None = None,
    on_skip: Any = _UNSET,
    on_warn: Callable[[Verdict], None] | None = None,
    **config: Any,
) -> Callable[[F], F]: ...


def watch(
    func: F | None = None,
    /,
    *,
    guard: Guard | None = None,
    run_id: str | Callable[[], str] | None = None,
    name: str | None = None,
    on_skip: Any = _UNSET,
    on_warn: Callable[[Verdict], None] | None = None,
    **config: Any,
) -> F | Callable[[F], F]:
    """Guard a tool function: ``@watch``, ``@watch(on_loop="skip")``, or
    ``tool = watch(guard=guard, run_id=...)`` then ``@tool`` on each function.

    Parameters:
        guard: the :class:`Guard` to use. Without it, ``config`` keywords
            (``on_loop="skip"``, ``repeated_call={"stop_at": 8}``...) build a new
            guard for this decorator; with neither, the guard in force where the
            call is made (:func:`~loopwatch.integrations.use_guard`, the pytest
            plugin's per-test guard), else one shared default guard (configured
            from ``loopwatch.toml`` if present) serves every ``@watch``.
        run_id: the run the calls belong to: a string, or a function returning
            it per call. Default: the innermost :func:`current_run` block, else
            ``"default"``.
        name: the tool name in events (default: the function's name).
        on_skip: what a skipped call returns: a value, or a function of the
            :class:`Verdict`. Default: the verdict's message.
        on_warn: called with the verdict when the guard warns (default: logs it).
    """
    if guard is not None or config:
        the_guard: Guard | None = _make(guard, config)
    else:
        the_guard = None  # resolved at the first call: importing must not read config files
    warn = on_warn or _log_warning

    def resolve_run() -> str:
        if run_id is None:
            return _RUN.get() or DEFAULT_RUN
        if callable(run_id):
            return str(run_id())
        return run_id

    def decorate(fn: F) -> F:
        tool_name = name or getattr(fn, "__name__", "tool")
        try:
            signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):
            signature = None

        def call_event(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
            return {
                "kind": "tool_call",
                "name": tool_name,
                "args": _arguments(signature, args, kwargs),
                "id": f"w{next(_CALL_IDS)}",
            }

        def skipped(verdict: Verdict) -> Any:
            if on_skip is _UNSET:
                return verdict.message
            if callable(on_skip):
                return on_skip(verdict)
            return on_skip

        def after_call(verdict: Verdict) -> None:
            if verdict.action is Action.STOP:
                raise LoopDetected(verdict)
            if verdict.action is Action.WARN:
                warn(verdict)

        if inspect.iscoroutinefunction(fn):

            @functools.wraps(fn)
            async def awrapper(*args: Any, **kwargs: Any) -> Any:
                g = the_guard or _shared_guard()
                rid = resolve_run()
                call = call_event(args, kwargs)
                verdict = await aobserve_safely(g, rid, call)
                if verdict.action is Action.SKIP:
                    return skipped(verdict)
                after_call(verdict)
                try:
                    result = await fn(*args, **kwargs)
                except LoopDetected:
                    raise
                except Exception as exc:
                    after = await aobserve_safely(g, rid, _error_event(call, exc))
                    if after.action is Action.STOP:
                        raise LoopDetected(after) from exc
                    if after.action is Action.WARN:
                        warn(after)
                    raise
                after_call(await aobserve_safely(g, rid, _result_event(call, result)))
                return result

            return awrapper  # type: ignore[return-value]

        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            g = the_guard or _shared_guard()
            rid = resolve_run()
            call = call_event(args, kwargs)
            verdict = observe_safely(g, rid, call)
            if verdict.action is Action.SKIP:
                return skipped(verdict)
            after_call(verdict)
            try:
                result = fn(*args, **kwargs)
            except LoopDetected:
                raise
            except Exception as exc:
                after = observe_safely(g, rid, _error_event(call, exc))
                if after.action is Action.STOP:
                    raise LoopDetected(after) from exc
                if after.action is Action.WARN:
                    warn(after)
                raise
            if inspect.isawaitable(result):
                # A sync function returning an awaitable (a partial of a coroutine
                # function, say): its result only exists once awaited.
                return _await_then_observe(g, rid, call, result, after_call)
            after_call(observe_safely(g, rid, _result_event(call, result)))
            return result

        return wrapper  # type: ignore[return-value]

    if func is not None:
        return decorate(func)
    return decorate


async def _await_then_observe(
    guard: Guard,
    run_id: str,
    call: dict[str, Any],
    awaitable: Awaitable[Any],
    after_call: Callable[[Verdict], None],
) -> Any:
    result = await awaitable
    after_call(await aobserve_safely(guard, run_id, _result_event(call, result)))
    return result


def _make(guard: Guard | None, config: dict[str, Any]) -> Guard:
    return make_guard(guard, config)


def _arguments(
    signature: inspect.Signature | None, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """The call's arguments by parameter name, defaults filled in, so that
    ``f("x")`` and ``f(q="x")`` are the same call."""
    if signature is not None:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            pass  # the call itself will fail with Python's own error
        else:
            bound.apply_defaults()
            return {k: v for k, v in bound.arguments.items() if k not in _SELF_NAMES}
    if kwargs and not args:
        return dict(kwargs)
    return {"args": list(args), "kwargs": dict(kwargs)}


def _result_event(call: dict[str, Any], result: Any) -> dict[str, Any]:
    return {
        "kind": "tool_result",
        "name": call["name"],
        "id": call["id"],
        "text": content_text(result),
    }


def _error_event(call: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    return {
        "kind": "tool_result",
        "name": call["name"],
        "id": call["id"],
        "text": f"{type(exc).__name__}: {exc}",
        "error": True,
    }
