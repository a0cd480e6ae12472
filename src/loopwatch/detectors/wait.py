"""Wait budget: polling is not looping, until it waits longer than the budget."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Final, final

from ..events import TOOL_CALL, TOOL_RESULT
from ..findings import Finding, Severity
from ..fingerprints import declared_wait, maybe_json
from ..state import DetectorState, Record, StateError, dump_map, load_map
from .base import Context, Detector, preview, trim

__all__ = ["WaitBudget"]

_POLLS_MAX: Final = 8  # statuses being waited for, per run (LRU)
_STEPS_MAX: Final = 8
# Argument names under which a wait tool takes its duration in seconds (wait(seconds=30)).
_SECONDS_KEYS: Final = ("seconds", "secs", "duration", "delay", "interval", "wait")
# Below this many seconds between checks on average, the checks did not wait.
_HAMMERING: Final = 1.0


@final
class Waiting(Record):
    """One status being waited for: how often a check returned it, and since when."""

    __slots__ = ("attempts", "result", "start", "steps", "t0", "waited0")

    def __init__(self, result: str, step: int, t0: float | None, waited0: float) -> None:
        self.result = result  # the status's result key
        self.attempts = 1  # checks that returned this status in a row
        self.start = step  # event index of the first of them
        self.t0 = t0  # when the first was made (event time, else the clock)
        self.waited0 = waited0  # the run's declared waits when the status was first seen
        self.steps = [step]  # evidence: the last few checks


@final
class WaitState(DetectorState):
    """The statuses being waited for, by check (call key), and the seconds the run's
    calls said they wait, in total (``sleep 30``, ``wait(seconds=30)``)."""

    __slots__ = ("polls", "waited")

    def __init__(self) -> None:
        self.polls: dict[str, Waiting] = {}  # LRU, at most 8
        self.waited = 0.0

    def dump(self) -> Any:
        return [dump_map(self.polls), self.waited]

    @classmethod
    def load(cls, data: Any) -> WaitState:
        if not isinstance(data, list) or len(data) != 2:
            raise StateError("WaitState: expected 2 fields")
        st = cls()
        st.polls = load_map(Waiting, data[0])
        st.waited = float(data[1])
        return st


def _tool_seconds(args: Any) -> float:
    """A wait tool's duration in seconds, from its arguments (0.0 when unstated)."""
    args = maybe_json(args)
    if isinstance(args, dict):
        for key in _SECONDS_KEYS:
            value = args.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
                return float(value)
    return 0.0


class WaitBudget(Detector):
    """Polling: a call that waits for something, checked again and again while its
    status does not change, judged by a wait budget instead of by repetition.

    A call is a poll (the engine marks it, :attr:`~loopwatch.state.CallRecord.poll`)
    when it waits (a ``sleep``, ``watch``, ``--watch`` or ``--wait`` in its command, a
    tool named wait / sleep / poll / watch), when it repeats a call made before such a
    wait, or when its result says the status is still pending (pending, queued, in
    progress, running, not ready...). The repetition detectors leave polls alone: a
    deployment, a CI run or a batch job checked every minute returns "still running"
    many times, as the task says it will.

    This detector counts, per check, the polls in a row that returned the same status,
    and the time waited since that status was first seen: the seconds the run's calls
    said they wait (``sleep 60``), or the events' times when the trace has them (the
    clock for a live guard without them), whichever is longer. A status that changes
    starts the count again.

    * Stop when a status has not changed for more than ``max_attempts`` checks or
      ``max_seconds`` of waiting: the budget is spent. The message says how long it
      waited.
    * Warn at half the budget (the stop then comes after a warning, as every stop).
    * Warn at ``warn_attempts`` checks when they did not wait in between (on average
      less than a second each, nothing declared): checking as fast as possible is no
      way to wait, and a status that never changes is then caught early.

    Defaults: 30 checks or 30 minutes (1800 s), whichever comes first; 5 checks without
    waiting. The corpus holds no polling agent (its few ``sleep`` commands are one-off
    pauses), so these come from what is waited for: a CI run or a deployment takes
    minutes to tens of minutes, and agents check every 10-60 seconds; a status
    unchanged for half an hour is stuck, or waiting longer needs a budget set in
    ``loopwatch.toml`` (``[wait_budget] max_seconds = "2h"``).
    """

    name = "wait_budget"
    kinds = frozenset({TOOL_CALL, TOOL_RESULT})

    def __init__(
        self,
        warn_attempts: int | None = 5,
        max_attempts: int | None = 30,
        max_seconds: float | None = 1800.0,
        clock: Callable[[], float] | None = None,
    ) -> None:
        for key, value in (
            ("warn_attempts", warn_attempts),
            ("max_attempts", max_attempts),
            ("max_seconds", max_seconds),
        ):
            if value is not None and value <= 0:
                raise ValueError(f"WaitBudget {key} must be positive (or None), not {value!r}")
        self.warn_attempts = warn_attempts
        self.max_attempts = max_attempts
        self.max_seconds = max_seconds
        self._clock = clock if clock is not None else time.time

    def observe(self, ctx: Context) -> Finding | None:
        rec = ctx.call
        if rec is None or not rec.poll:
            return None
        st = ctx.state.slot(self.slot_name(), WaitState)
        ev = ctx.event
        if ev.kind == TOOL_CALL:
            command = ev.command
            if command is not None:
                declared = declared_wait(command)
                # a wait of no stated length (--watch, wait) blocks until something
                # changes: it waited, at least as long as checking at once does not
                seconds = (declared or _HAMMERING) if declared is not None else 0.0
            else:
                seconds = _tool_seconds(ev.args)
            if seconds:
                st.waited += seconds
            return None
        result = rec.result
        if result is None or not ev.text_known or not ev.text.strip():
            return None  # a bare wait (sleep 30 prints nothing) reports no status
        now = ev.time
        if now is None:
            now = self._clock()
        polls = st.polls
        key = rec.norm
        entry = polls.pop(key, None)
        if entry is None or entry.result != result:
            entry = Waiting(result, ctx.step, now, st.waited)  # a new status: progress
            for earlier in reversed(ctx.calls):
                if earlier is not rec and earlier.norm == key:
                    if earlier.result == result and earlier.rstep is not None:
                        # the check before said the same: it was the first of them (a
                        # status is read as one only when it repeats)
                        entry.attempts = 2
                        entry.start = earlier.rstep
                        entry.steps = [earlier.rstep, ctx.step]
                    break
        else:
            entry.attempts += 1
            entry.steps.append(ctx.step)
            trim(entry.steps, _STEPS_MAX)
        polls[key] = entry
        if len(polls) > _POLLS_MAX:
            del polls[next(iter(polls))]
        attempts = entry.attempts
        waited = max(st.waited - entry.waited0, now - entry.t0 if entry.t0 is not None else 0.0)
        return self._judge(ctx, rec.name, rec.args, entry, attempts, waited)

    def _judge(
        self, ctx: Context, tool: str, args: str, entry: Waiting, attempts: int, waited: float
    ) -> Finding | None:
        most, longest = self.max_attempts, self.max_seconds
        over = (most is not None and attempts > most) or (longest is not None and waited > longest)
        status = preview(ctx.event.text, 60)
        where = f"{tool}({args})"
        spent = f"{attempts} checks over {_duration(waited)}"
        if over:
            return Finding(
                self.name,
                Severity.STOP,
                ctx.step,
                tuple(entry.steps),
                f"You have waited for {where}: {spent}, and its status has not changed "
                f"({status!r}); that is past the wait budget. Stop waiting: report the "
                "status, or find out why it does not move.",
                f"wait@{entry.start}",
            )
        # a warning is given once per status waited for (the engine keeps one per pattern)
        half = (most is not None and attempts * 2 >= most) or (
            longest is not None and waited * 2 >= longest
        )
        warn_at = self.warn_attempts
        hammering = (
            warn_at is not None and attempts >= warn_at and waited < (attempts - 1) * _HAMMERING
        )
        if not half and not hammering:
            return None
        advice = (
            "If it is worth waiting for, wait between checks: the wait budget is half spent."
            if half
            else "Wait between checks instead of checking again at once."
        )
        return Finding(
            self.name,
            Severity.WARN,
            ctx.step,
            tuple(entry.steps),
            f"You have checked {where} {spent} and its status has not changed "
            f"({status!r}). {advice}",
            f"wait@{entry.start}",
        )


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
