"""Policy: turns a step's findings into what the agent loop should do."""

from __future__ import annotations

from re import Pattern
from typing import Final, Literal

from .engine import Engine
from .events import TOOL_CALL, TOOL_RESULT, Event
from .findings import Action, Finding, Severity, Verdict
from .redact import redact_extra
from .state import WARNED_MAX, RunState

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

    ``tell_first`` (default): a stop is earned (:func:`escalate`): the agent is told
    first and stopped when it persists. False stops at the first stop-severity finding.
    """

    def __init__(
        self,
        on_loop: OnLoop = "stop",
        max_skips: int = 3,
        tell_first: bool = True,
        redact: tuple[Pattern[str], ...] = (),
    ) -> None:
        if on_loop not in ON_LOOP_CHOICES:
            raise ValueError(f"on_loop must be one of {ON_LOOP_CHOICES}, not {on_loop!r}")
        self.on_loop: OnLoop = on_loop
        self.max_skips = max_skips
        self.tell_first = tell_first
        # the user's redaction patterns (Engine.redact): what escalation adds to a
        # message goes through them as the detectors' own words did
        self.redact = redact

    def decide(
        self, step: int, kind: str, findings: list[Finding], state: RunState | None = None
    ) -> Verdict:
        """The verdict for one step. ``state`` (the run state) holds what the run was
        told (see :func:`escalate`) and counts skips."""
        if not findings:
            return Verdict(Action.OK, step)
        told = False
        if state is not None and self.tell_first:
            findings, told = escalate(step, findings, state, self.redact, kind)
        stops = [f for f in findings if f.severity is Severity.STOP]
        if told and not stops and kind == TOOL_CALL and self.on_loop != "warn":
            # The call that would have been stopped is the one the agent is told about:
            # it does not run (its outcome is known), and the model reads why.
            ordered = sorted(findings, key=_told_first)
            message = f"{NOT_RUN} " + " ".join(f.message for f in ordered)
            return Verdict(Action.SKIP, step, tuple(ordered), message)
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

    def blocks(self, verdict: Verdict) -> bool:
        """Whether a verdict ends the run or blocks a call because a detector is sure
        (what the scan reports as ``first_stop``). A call skipped because the agent is
        being told (see :func:`escalate`) is the warning, not the stop."""
        action = verdict.action
        if action is Action.STOP:
            return True
        return action is Action.SKIP and any(f.severity is Severity.STOP for f in verdict.findings)


# What a told finding adds to its sentence, and what a stop that was told says first.
_TOLD: Final = "If you do it again, the run will be stopped."


def _told_first(found: Finding) -> int:
    return 0 if found.message.endswith(_TOLD) else 1


def escalate(
    step: int,
    findings: list[Finding],
    state: RunState,
    redact: tuple[Pattern[str], ...] = (),
    kind: str = "",
) -> tuple[list[Finding], bool]:
    """A stop is earned: return ``findings`` with every stop the agent was not told
    about turned into the warning that tells it, and whether there was one.

    A stop-severity finding holds when the run was told about this loop before this
    step and went on: a warning of the same detector and pattern (the detector's own
    warning below its stop threshold, or an earlier stop turned into a warning here),
    or any warning given during the finding's evidence (another detector's warning on
    the same stretch). Its message then says when ("You were told at step N."). A stop
    that was not told becomes the warning, recorded in ``RunState.warned``, so the next
    stop-severity finding of the loop stops the run; a finding marked ``decisive``
    (overwhelming on its own, or a budget the user set) stops at once.

    Told means heard: a warning reaches the model with its next turn, so a tool result
    answering a call made before the warning (the warned call's own result, a parallel
    call's) cannot earn a stop; the agent has not acted since. Measured: one labelled
    loop fewer stopped (the agent transferred to a person after its third identical
    failure: the recovery this rule is for) and some stops one call later, no other change.

    Why: the first sign of a repeat may still be a hiccup (three identical failures
    after which an agent changes approach and solves the task); a stop ends a working
    agent, a warning costs a line of context.
    """
    warned = state.warned
    # The agent heard a warning only if it acted after it: a tool result answers a call
    # made before (a warning given on that very call, or on another result since, has
    # not reached the model yet); any other event is the agent's or follows its turn.
    heard = step
    if kind == TOOL_RESULT and state.calls:
        heard = state.calls[-1].step
    told_any = False
    out: list[Finding] | None = None
    for i, found in enumerate(findings):
        if found.severity is not Severity.STOP or found.decisive:
            continue
        # told: a warning of this very loop (its detector and pattern), or the latest
        # warning given during its evidence, before this step
        key = f"{found.detector}:{found.pattern}"
        at = warned.get(key)
        if at is not None and at >= heard:
            at = None
        start = found.steps[0] if found.steps else step
        for t in warned.values():
            if start <= t < heard and (at is None or t > at):
                at = t
        if out is None:
            out = list(findings)
        if at is not None:
            said = f"{found.message} You were told at step {at}."
            out[i] = _reworded(found, found.severity, said, redact)
            continue
        told_any = True
        warned.pop(key, None)
        warned[key] = step
        if len(warned) > WARNED_MAX:
            del warned[next(iter(warned))]
        out[i] = _reworded(found, Severity.WARN, f"{found.message} {_TOLD}", redact)
    return (findings if out is None else out), told_any


def _reworded(
    found: Finding, severity: Severity, message: str, redact: tuple[Pattern[str], ...]
) -> Finding:
    if redact:
        message = redact_extra(message, redact)
    return Finding(
        found.detector, severity, found.step, found.steps, message, found.pattern, found.decisive
    )


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
