"""smolagents: wrapped tools and step callbacks.

::

    from smolagents import ToolCallingAgent
    from loopwatch.integrations.smolagents import LoopwatchSmolagents

    watch = LoopwatchSmolagents(on_loop="skip")      # one per app; holds the Guard
    agent = watch.attach(ToolCallingAgent(tools=[web_search], model=model))
    agent.run("Weather in Paris?")                   # a stop raises LoopDetected

:meth:`LoopwatchSmolagents.attach` replaces the agent's tools with wrappers (a
``Tool`` subclass that calls the original) and registers step callbacks; managed
agents are attached with it. It works for ``ToolCallingAgent`` and ``CodeAgent``
(whose generated code calls the same tool objects), ``run(stream=True)`` included.

* Each tool call is observed before it runs and its result after. On ``skip`` the
  tool does not run: the call returns the explanation, which the model reads as the
  observation.
* On ``warn`` the warning is appended to the step's observations by the step
  callback, so the next model request shows it after the tool output; the next step's
  callback takes it out again: the model sees it once, and the memory keeps the
  tools' true outputs.
* On ``stop`` the step callback raises :class:`~loopwatch.LoopDetected` at the end of
  the step (smolagents turns an exception raised inside a tool into an observation
  for the model, so the tool call itself cannot end the run). A managed agent's stop
  is also raised by its manager, whose run it belongs to.
* The model's output is observed in the step callback, after the step's tool calls.

The run id: ``attach(agent, run_id=...)``, else one id per conversation (a new one
each time ``run`` resets the memory; ``run(..., reset=False)`` continues it). Each
``run`` is a user turn (a ``user`` event with the task). Managed agents share their
manager's run; their events carry their ``agent`` name, and the manager's request
and the member's answer are observed as messages between the two agents, so a
manager and a member passing the same request back and forth are seen.

smolagents has no async agent API.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

try:
    from smolagents.agents import MultiStepAgent, populate_template
    from smolagents.memory import ActionStep, FinalAnswerStep, TaskStep
    from smolagents.tools import Tool
except ModuleNotFoundError as _exc:  # the framework is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "smolagents", "smolagents") from _exc

from ..errors import LoopDetected
from ..findings import Action, Verdict
from ..guard import Guard
from ._common import NOT_RUN, PendingWarnings, content_text, make_guard, observe_safely

__all__ = ["LoopwatchSmolagents", "LoopwatchTool"]

_SENTINEL: Final = "\x00loopwatch-task\x00"


class LoopwatchTool(Tool):  # type: ignore[misc]  # smolagents is untyped
    """A tool that asks loopwatch before calling the tool it wraps.

    It shows the model the wrapped tool's name, description and inputs; the generic
    ``forward`` signature is why signature validation is skipped, as smolagents does
    for its own wrappers.
    """

    skip_forward_signature_validation = True

    def __init__(self, inner: Tool, owner: LoopwatchSmolagents, agent: Any) -> None:
        self.name = inner.name
        self.description = inner.description
        self.inputs = inner.inputs
        self.output_type = inner.output_type
        self.output_schema = getattr(inner, "output_schema", None)
        self.inner = inner
        self._owner = owner
        self._agent = agent
        super().__init__()
        self.is_initialized = True  # the wrapped tool sets itself up when called

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        return self._owner._call(self._agent, self.inner, args, kwargs)


@dataclass
class _Agent:
    """What loopwatch keeps about one attached agent."""

    name: str
    parent: Any = None
    run_id: str | None = None  # fixed by attach(run_id=...)
    first: Any = None  # the conversation's first TaskStep
    last: Any = None  # the latest TaskStep seen
    conversation: str = ""
    note: tuple[Any, str | None] | None = None  # (step, its observations before the note)
    calls: int = 0  # tool calls the wrappers saw in the current step


class LoopwatchSmolagents:
    """Loop detection for smolagents agents; one per application.

    ``LoopwatchSmolagents()`` uses a guard configured from ``loopwatch.toml`` (or the
    defaults); keywords override it (``on_loop="skip"``...), or pass ``guard=``.
    """

    def __init__(self, guard: Guard | None = None, **config: Any) -> None:
        self.guard = make_guard(guard, config)
        self.pending = PendingWarnings()
        self._agents: dict[int, _Agent] = {}
        self._stopped: dict[str, Verdict] = {}
        self._lock = threading.RLock()

    # -- wiring -----------------------------------------------------------------------
    def attach(self, agent: Any, *, run_id: str | None = None, _parent: Any = None) -> Any:
        """Watch ``agent`` (and its managed agents); returns the agent.

        Its tools are replaced by :class:`LoopwatchTool` wrappers (``final_answer``
        is left alone: its call ends the run) and two step callbacks are registered.
        Attaching the same agent twice does nothing more.
        """
        if not isinstance(agent, MultiStepAgent):
            raise TypeError(f"attach() takes a smolagents agent, not {type(agent).__name__}")
        if id(agent) in self._agents:
            return agent
        self._agents[id(agent)] = _Agent(
            name=agent.name or type(agent).__name__, parent=_parent, run_id=run_id
        )
        for name, tool in list(agent.tools.items()):
            if name != "final_answer" and not isinstance(tool, LoopwatchTool):
                agent.tools[name] = LoopwatchTool(tool, self, agent)
        agent.step_callbacks.register(ActionStep, self._on_action)
        agent.step_callbacks.register(FinalAnswerStep, self._on_final)
        for member in agent.managed_agents.values():
            self.attach(member, _parent=agent)
        return agent

    def protect(self, tools: Iterable[Tool], agent: Any) -> list[Tool]:
        """``tools`` wrapped for ``agent`` (``attach`` does this for its tools)."""
        return [LoopwatchTool(t, self, agent) for t in tools]

    # -- runs and turns -----------------------------------------------------------------
    def _info(self, agent: Any) -> _Agent:
        info = self._agents.get(id(agent))
        if info is None:  # a tool wrapped with protect() for an agent never attached
            self.attach(agent)
            info = self._agents[id(agent)]
        return info

    def run_id_of(self, agent: Any) -> str:
        """The run ``agent``'s current step belongs to (its manager's, for a member)."""
        return self._enter(agent)

    def _enter(self, agent: Any) -> str:
        """The agent's run id; observes a new ``run`` call (a user turn, or a manager's
        request to a member) the first time one of its hooks sees it."""
        with self._lock:
            info = self._info(agent)
            tasks = [s for s in agent.memory.steps if isinstance(s, TaskStep)]
            if info.parent is not None:
                run = self._enter(info.parent)
            else:
                if tasks and tasks[0] is not info.first:
                    info.first = tasks[0]
                    info.conversation = f"sa-{uuid.uuid4().hex}"
                run = info.run_id or info.conversation or self._new_conversation(info)
            if tasks and tasks[-1] is not info.last:
                info.last = tasks[-1]
                self._observe_task(agent, info, run, str(tasks[-1].task or ""))
            return run

    @staticmethod
    def _new_conversation(info: _Agent) -> str:
        info.conversation = f"sa-{uuid.uuid4().hex}"
        return info.conversation

    def _observe_task(self, agent: Any, info: _Agent, run: str, task: str) -> None:
        if info.parent is None:
            event: dict[str, Any] = {"kind": "user", "text": task}
        else:
            event = {
                "kind": "model",
                "agent": self._info(info.parent).name,
                "to": info.name,
                "text": _own_task(agent, task),
            }
        self._react(run, info, observe_safely(self.guard, run, event))

    # -- verdicts -------------------------------------------------------------------------
    def _react(self, run: str, info: _Agent, verdict: Verdict) -> None:
        if verdict.action is Action.STOP:
            self._stopped.setdefault(run, verdict)
        elif verdict.action is Action.WARN:  # a skip's message is the call's result
            self.pending.add(f"{run}\x00{info.name}", verdict.message)

    def _call(self, agent: Any, tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        run = self._enter(agent)
        info = self._info(agent)
        with self._lock:
            info.calls += 1
        call: dict[str, Any] = {
            "kind": "tool_call",
            "name": tool.name,
            "args": _arguments(tool, args, kwargs),
            "agent": info.name,
        }
        verdict = observe_safely(self.guard, run, call)
        if verdict.action is Action.SKIP or verdict.action is Action.STOP:
            self._react(run, info, verdict)
            return verdict.message or NOT_RUN
        self._react(run, info, verdict)
        result_event: dict[str, Any] = {"kind": "tool_result", "name": tool.name}
        result_event["agent"] = info.name
        try:
            result = tool(*args, **kwargs)
        except Exception as exc:
            result_event.update(text=f"{type(exc).__name__}: {exc}", error=True)
            self._react(run, info, observe_safely(self.guard, run, result_event))
            raise
        result_event["text"] = content_text(
            result if isinstance(result, Mapping | list) else str(result)
        )
        self._react(run, info, observe_safely(self.guard, run, result_event))
        return result

    # -- step callbacks -------------------------------------------------------------------
    def _on_action(self, step: ActionStep, agent: Any = None) -> None:
        if agent is None:
            return
        run = self._enter(agent)
        info = self._info(agent)
        self._clear_note(info)
        if info.calls == 0:
            self._observe_unwrapped(run, info, step)
        info.calls = 0
        event: dict[str, Any] = {
            "kind": "model",
            "text": content_text(step.model_output),
            "agent": info.name,
        }
        usage = step.token_usage
        if usage is not None and usage.total_tokens:
            event["tokens"] = usage.total_tokens
        self._react(run, info, observe_safely(self.guard, run, event))
        self._raise_if_stopped(run, info)
        warnings = self.pending.take(f"{run}\x00{info.name}")
        if warnings:
            before = step.observations
            note = "\n\n".join(warnings)
            step.observations = f"{before}\n\n{note}" if before else note
            info.note = (step, before)

    def _observe_unwrapped(self, run: str, info: _Agent, step: ActionStep) -> None:
        """The step's actions that reached no wrapped tool: a call that failed before
        (unknown tool, bad arguments), the final answer, a CodeAgent's code that called
        no tool. Observed after the fact (nothing left to skip), so that an error
        repeated is seen, and so that every model output follows the action it took."""
        for call in step.tool_calls or ():
            event = {"kind": "tool_call", "name": call.name, "args": call.arguments}
            event.update(id=call.id, agent=info.name)
            self._react(run, info, observe_safely(self.guard, run, event))
            result: dict[str, Any] = {"kind": "tool_result", "name": call.name, "id": call.id}
            result["agent"] = info.name
            if step.error is not None:
                result.update(text=str(step.error), error=True)
            elif call.name != "final_answer" and step.observations is not None:
                result["text"] = step.observations
            else:
                continue
            self._react(run, info, observe_safely(self.guard, run, result))

    def _on_final(self, step: FinalAnswerStep, agent: Any = None) -> None:
        if agent is None:
            return
        info = self._info(agent)
        self._clear_note(info)
        if info.parent is None:
            return
        run = self._enter(agent)
        event = {
            "kind": "model",
            "agent": info.name,
            "to": self._info(info.parent).name,
            "text": content_text(str(step.output)),
        }
        self._react(run, info, observe_safely(self.guard, run, event))

    def _raise_if_stopped(self, run: str, info: _Agent) -> None:
        with self._lock:
            verdict = self._stopped.get(run)
            if verdict is None:
                return
            if info.parent is None:  # the run ends here: a later turn starts clean
                del self._stopped[run]
        self.pending.discard(f"{run}\x00{info.name}")
        raise LoopDetected(verdict)

    @staticmethod
    def _clear_note(info: _Agent) -> None:
        """Take the last warning out of the memory: the model has seen it once."""
        if info.note is not None:
            step, before = info.note
            step.observations = before
            info.note = None


def _arguments(tool: Tool, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The call's arguments by input name (generated code may pass them by position)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], dict):
        return args[0]
    named = dict(zip(tool.inputs, args, strict=False))
    named.update(kwargs)
    return named


def _own_task(agent: Any, task: str) -> str:
    """A managed agent's task without smolagents' template around it (the template
    is the same for every request: left in, two different requests would look alike)."""
    try:
        template = agent.prompt_templates["managed_agent"]["task"]
        framed = populate_template(template, variables={"name": agent.name, "task": _SENTINEL})
    except Exception:  # a custom template without these variables
        return task
    head, _, tail = str(framed).partition(_SENTINEL)
    if task.startswith(head) and task.endswith(tail) and len(task) >= len(head) + len(tail):
        return task[len(head) : len(task) - len(tail)]
    return task
