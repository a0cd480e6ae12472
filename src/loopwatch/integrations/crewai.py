"""CrewAI: loopwatch as CrewAI's own tool-call and LLM-call hooks.

::

    from crewai import Crew
    from loopwatch import LoopDetected
    from loopwatch.integrations.crewai import LoopwatchCrewAI

    watch = LoopwatchCrewAI().register()   # one per app: CrewAI's hooks are process-wide
    try:
        crew.kickoff()
    except LoopDetected as stop:
        print(stop.verdict.message)

:meth:`LoopwatchCrewAI.register` adds four global hooks (``register_before_tool_call_hook``
and the after / LLM ones of ``crewai.hooks``); :meth:`~LoopwatchCrewAI.unregister` takes them
out (``with LoopwatchCrewAI() as watch:`` does both). Register before the kickoff: an agent's
executor takes its copy of the LLM hooks when it is made.

* ``before_tool_call`` observes each call before it runs; on ``skip`` it returns ``False``
  (CrewAI blocks the call) and ``after_tool_call`` answers it with the message, in place of
  CrewAI's bare "Tool execution blocked by hook": the model gets why as the call's result.
  ``after_tool_call`` observes each result of a call that ran.
* ``after_llm_call`` observes each text response of the model (ReAct-style answers, final
  answers; native tool calls are observed as the calls).
* On ``warn`` the message is added to the **next LLM request only**, as a last user message
  after the tool results, by ``before_llm_call``; ``after_llm_call`` takes it out of the
  agent's messages again, so the history never holds it and every call keeps its result
  right after it.
* On ``stop`` the call is blocked and answered with the stop message (a stopped result is
  replaced by it; a stopped response is kept), and the next ``before_llm_call`` (or the
  stopped ``after_llm_call``) raises :class:`LoopStopped`: a :class:`~loopwatch.LoopDetected`
  that is also CrewAI's ``HookAborted``, a deliberate stop CrewAI neither retries nor feeds
  back to the model. It leaves ``crew.kickoff()`` / ``kickoff_async()`` / ``akickoff()`` (and
  the iteration of a streamed kickoff) as it is.

The run id is the crew's (``str(crew.id)``; an agent kicked off on its own: the agent's id),
each kickoff a user turn (a ``user`` event with the crew's first task's description, or the
agent's request; a new kickoff after a stop starts afresh). Every event names the agent
(its ``role``): the agents of a crew, delegating to each other, share its run.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any, Final

try:
    from crewai.hooks import (
        HookAborted,
        LLMCallHookContext,
        ToolCallHookContext,
        register_after_llm_call_hook,
        register_after_tool_call_hook,
        register_before_llm_call_hook,
        register_before_tool_call_hook,
        unregister_after_llm_call_hook,
        unregister_after_tool_call_hook,
        unregister_before_llm_call_hook,
        unregister_before_tool_call_hook,
    )
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "crewai", "CrewAI (crewai)") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import (
    NOT_RUN,
    STOPPED,
    PendingWarnings,
    StoppedRuns,
    content_text,
    log,
    make_guard,
    observe_queued,
    observe_safely,
)

__all__ = ["LoopStopped", "LoopwatchCrewAI"]

_MAX: Final = 10_000


class LoopStopped(LoopDetected, HookAborted):
    """The stop a loopwatch hook raises: ``except LoopDetected`` catches it; to CrewAI it
    is a ``HookAborted`` (a deliberate stop: not retried, not turned into a tool result)."""

    def __init__(self, verdict: Verdict) -> None:
        LoopDetected.__init__(self, verdict)
        self.reason = str(self)
        self.source = "loopwatch"


class _Bounded(OrderedDict[Any, Any]):
    def put(self, key: Any, value: Any) -> None:
        self[key] = value
        while len(self) > _MAX:
            self.popitem(last=False)


class LoopwatchCrewAI:
    """Loop detection for CrewAI crews and agents; one per application.

    ``LoopwatchCrewAI()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self.stopped = StoppedRuns()
        self._lock = threading.Lock()
        self._kickoffs = _Bounded()  # run id -> the kickoff seen last
        self._answers = _Bounded()  # id(tool_input) -> (tool_input, loopwatch's answer)
        self._notes = _Bounded()  # id(note) -> a warning message added to a request

    # -- wiring -----------------------------------------------------------------------
    def register(self) -> LoopwatchCrewAI:
        """Add loopwatch's hooks to CrewAI's global hooks (once); returns ``self``."""
        self.unregister()
        register_before_tool_call_hook(self.before_tool_call)
        register_after_tool_call_hook(self.after_tool_call)
        register_before_llm_call_hook(self.before_llm_call)
        register_after_llm_call_hook(self.after_llm_call)
        return self

    def unregister(self) -> None:
        """Take loopwatch's hooks out of CrewAI's global hooks."""
        unregister_before_tool_call_hook(self.before_tool_call)
        unregister_after_tool_call_hook(self.after_tool_call)
        unregister_before_llm_call_hook(self.before_llm_call)
        unregister_after_llm_call_hook(self.after_llm_call)

    def __enter__(self) -> LoopwatchCrewAI:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.unregister()

    # -- runs ---------------------------------------------------------------------------
    def run_id_of(self, crew: Any = None, agent: Any = None) -> str | None:
        """The run id of a crew (or of an agent kicked off on its own)."""
        owner = crew if crew is not None else agent
        ident = getattr(owner, "id", None)
        return str(ident) if ident is not None else None

    def _run(self, ctx: Any, request: bool = False) -> str | None:
        """The run of a hook's context; a new kickoff is a user turn (``request``: the
        context is a model request's, the first of an agent kicked off on its own)."""
        if isinstance(ctx, LLMCallHookContext) and ctx.executor is None:
            return None  # a model call outside an agent's loop (a summary, a conversion)
        crew = getattr(ctx, "crew", None)
        run = self.run_id_of(crew, getattr(ctx, "agent", None))
        if run is None:
            return None
        if crew is None:
            if request and getattr(ctx, "iterations", None) == 0:
                self._new_turn(run, _last_user_text(getattr(ctx, "messages", None)))
            return run
        kickoff = getattr(crew, "_kickoff_event_id", None) or "kickoff"
        with self._lock:
            new = self._kickoffs.get(run) != kickoff
            if new:
                self._kickoffs.put(run, kickoff)
        if new:
            self._new_turn(run, getattr(getattr(ctx, "task", None), "description", None))
        return run

    def _new_turn(self, run: str, text: Any) -> None:
        self.stopped.pop(run)
        self.pending.discard(run)
        # a task without a description is a turn whose words are unknown, not ""
        said = None if text is None else str(text)
        observe_safely(self.guard, run, {"kind": "user", "text": said})

    def _observe(self, run: str, event: dict[str, Any]) -> Verdict:
        return observe_queued(self.guard, run, event, self.pending, self.stopped)

    # -- tool calls ---------------------------------------------------------------------
    def before_tool_call(self, ctx: ToolCallHookContext) -> bool | None:
        """CrewAI's ``before_tool_call`` hook: ``False`` blocks the call."""
        run = self._run(ctx)
        if run is None:
            return None
        stopped = self.stopped.get(run)
        if stopped is not None:  # another call of a stopped run
            return self._block(ctx, stopped.message or STOPPED)
        verdict = self._observe(
            run,
            {
                "kind": "tool_call",
                "name": ctx.tool_name,
                "args": dict(ctx.tool_input or {}),
                "agent": _role(ctx.agent),
            },
        )
        if verdict.action is Action.SKIP:
            return self._block(ctx, verdict.message or NOT_RUN)
        if verdict.action is Action.STOP:
            return self._block(ctx, verdict.message or STOPPED)
        return None

    def _block(self, ctx: ToolCallHookContext, message: str) -> bool:
        # CrewAI hands the same input dict to the after hook of the call it blocked.
        with self._lock:
            self._answers.put(id(ctx.tool_input), (ctx.tool_input, message))
        return False

    def after_tool_call(self, ctx: ToolCallHookContext) -> str | None:
        """CrewAI's ``after_tool_call`` hook: a string replaces the call's result."""
        with self._lock:
            answered = self._answers.pop(id(ctx.tool_input), None)
        if answered is not None and answered[0] is ctx.tool_input:
            return str(answered[1])  # a call loopwatch blocked: its answer, not a result
        run = self._run(ctx)
        if run is None or self.stopped.get(run) is not None:
            return None
        text = content_text(ctx.tool_result)
        verdict = self._observe(
            run,
            {
                "kind": "tool_result",
                "name": ctx.tool_name,
                "text": text,
                "error": text.startswith("Error executing tool"),
                "agent": _role(ctx.agent),
            },
        )
        if verdict.action is Action.STOP:
            # The run ends before the model reads this result: the stop message stands in
            # for it (CrewAI's own repeated-call check then does not end the run first).
            return verdict.message or STOPPED
        return None

    # -- model calls --------------------------------------------------------------------
    def before_llm_call(self, ctx: LLMCallHookContext) -> bool | None:
        """CrewAI's ``before_llm_call`` hook: adds the run's warnings to this request;
        raises :class:`LoopStopped` for a stopped run (the model is not called)."""
        run = self._run(ctx, request=True)
        self._take_notes(ctx.messages)
        if run is None:
            return None
        stopped = self.stopped.get(run)
        if stopped is not None:
            raise LoopStopped(stopped)
        warnings = self.pending.take(run)
        if warnings:
            note = {"role": "user", "content": "\n\n".join(warnings)}
            with self._lock:
                self._notes.put(id(note), note)
            ctx.messages.append(note)  # type: ignore[arg-type]
        return None

    def after_llm_call(self, ctx: LLMCallHookContext) -> str | None:
        """CrewAI's ``after_llm_call`` hook: observes the response; raises
        :class:`LoopStopped` when it is the stop."""
        self._take_notes(ctx.messages)
        run = self._run(ctx)
        if run is None or ctx.response is None or self.stopped.get(run) is not None:
            return None
        verdict = self._observe(
            run, {"kind": "model", "text": str(ctx.response), "agent": _role(ctx.agent)}
        )
        if verdict.action is Action.STOP:
            raise LoopStopped(verdict)
        return None

    def _take_notes(self, messages: Any) -> None:
        """Take the warnings loopwatch added out of an agent's messages (in place)."""
        try:
            with self._lock:
                if not self._notes or not isinstance(messages, list):
                    return
                ours = [i for i, m in enumerate(messages) if self._notes.pop(id(m), None) is m]
            for i in reversed(ours):
                del messages[i]
        except Exception:
            log.exception("loopwatch: removing a warning from the messages failed")


def _last_user_text(messages: Any) -> str:
    for message in reversed(messages if isinstance(messages, list) else []):
        if isinstance(message, dict) and message.get("role") == "user":
            return content_text(message.get("content")).strip()
    return ""


def _role(agent: Any) -> str | None:
    role = getattr(agent, "role", None)
    return str(role) if role else None
