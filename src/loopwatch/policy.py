"""Policy: turns a step's findings into what the agent loop should do."""

from __future__ import annotations

from typing import Final, Literal

from .events import TOOL_CALL
from .findings import Action, Finding, Severity, Verdict
from .state import RunState

__all__ = ["ON_LOOP_CHOICES", "OnLoop", "Policy"]

OnLoop = Literal["stop", "skip", "warn"]
ON_LOOP_CHOICES: Final = ("stop", "skip", "warn")


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
            message = f"[loopwatch] This call was not executed. {message}"
        elif action is Action.STOP:
            message = f"[loopwatch] Run stopped: {message}"
        else:
            message = f"[loopwatch] Warning: {message}"
        return Verdict(action, step, tuple(ordered), message)

    def blocks(self, action: Action) -> bool:
        """Whether an action ends or blocks (what the scan reports as ``first_stop``)."""
        return action is Action.STOP or action is Action.SKIP
