"""Policy: turns a step's findings into what the agent loop should do."""

from __future__ import annotations

from typing import Final, Literal

from .engine import Engine
from .events import TOOL_CALL, Event
from .findings import Action, Finding, Severity, Verdict
from .state import RunState

__all__ = ["NOT_RUN", "ON_LOOP_CHOICES", "STOPPED", "OnLoop", "Policy", "Step"]

OnLoop = Literal["stop", "skip", "warn"]
ON_LOOP_CHOICES: Final = ("stop", "skip", "warn")
# How a skipped call's answer starts; integrations answer with it alone when a
# verdict carries no message.
NOT_RUN: Final = "[loopwatch] This call was not executed."
# What integrations end a run with when a stop's verdict carries no message (a stop's
# own message is "[loopwatch] Run stopped: " and its reasons).
STOPPED: Final = "[loopwatch] Run stopped."


class Policy:
    """What to do when a detector is sure (``stop`` severity), like Fuze's kill/skip/warn.

    * ``on_loop="stop"`` (default): end the run.
    * ``on_loop="skip"``: block the tool call about to run and hand the model the
      explanation as its result; on a step that is not a tool call (a model output
      that chants, say) there is nothing to block, so the model is warned instead.
      A model that keeps making blocked calls would otherwise loop on the blocks:
      after ``max_skips`` skips in one run, the next stop-severity finding stops it.
    * ``on_loop="warn"``: never block; every finding becomes a warning.

    Warn-severity findings always become ``warn``: a message injected into the
    model's next request, once per pattern (the engine deduplicates them).
    """

    def __init__(self, on_loop: OnLoop = "stop", max_skips: int = 3) -> None:
        if on_loop not in ON_LOOP_CHOICES:
            raise ValueError(f"on_loop must be one of {ON_LOOP_CHOICES}, not {on_loop!r}")
        self.on_loop: OnLoop = on_loop
        self.max_skips = max_skips

    def decide(
        self, step: int, kind: str, findings: list[Finding], state: RunState | None = None
    ) -> Verdict:
        """The verdict for one step; ``state`` (the run state) counts skips for escalation."""
        if not findings:
            return Verdict(Action.OK, step)
        stops = [f for f in findings if f.severity is Severity.STOP]
        if stops:
            if self.on_loop == "stop":
                action = Action.STOP
            elif self.on_loop == "skip":
                skips = state.skips if state is not None else 0
                if skips >= self.max_skips:
                    action = Action.STOP
                elif kind == TOOL_CALL:
                    action = Action.SKIP
                    if state is not None:
                        state.skips = skips + 1
                else:
                    action = Action.WARN
            else:
                action = Action.WARN
            ordered = stops + [f for f in findings if f.severity is not Severity.STOP]
        else:
            action = Action.WARN
            ordered = findings
        message = " ".join(f.message for f in ordered)
        if action is Action.SKIP:
            message = f"{NOT_RUN} {message}"
        elif action is Action.STOP:
            message = f"[loopwatch] Run stopped: {message}"
        else:
            message = f"[loopwatch] Warning: {message}"
        return Verdict(action, step, tuple(ordered), message)

    def blocks(self, action: Action) -> bool:
        """Whether an action ends or blocks (what the scan reports as ``first_stop``)."""
        return action is Action.STOP or action is Action.SKIP


class Step:
    """One event's update of a run's state and the verdict on it: what the guard hands
    its store to run under the run's lock. A small compiled object rather than a
    closure, because one is built for every observed event."""

    __slots__ = ("engine", "event", "policy")

    def __init__(self, engine: Engine, policy: Policy, event: Event) -> None:
        self.engine = engine
        self.policy = policy
        self.event = event

    def __call__(self, state: RunState) -> Verdict:
        n = state.n
        ev = self.event
        findings = self.engine.step(state, ev)
        verdict = (
            self.policy.decide(n, ev.kind, findings, state) if findings else Verdict(Action.OK, n)
        )
        if state.reset_reason is not None:
            # the store could not read this run's state and started it afresh
            verdict.extra["state_reset"] = state.reset_reason
            state.reset_reason = None
        return verdict
