"""Error loop: the same failure again and again."""

from __future__ import annotations

from typing import Any, final

from ..events import TOOL_RESULT, USER
from ..findings import Finding, Severity
from ..state import DetectorState, Tally, dump_map, load_map
from .base import Context, Detector, preview, severity_for, trim

_KEYS_MAX = 32
_STEPS_MAX = 8


@final
class ErrorState(DetectorState):
    """Failures since the last success: by error signature and by tool."""

    __slots__ = ("errors", "recurring", "tools")

    def __init__(self) -> None:
        self.errors: dict[str, Tally] = {}  # error key -> failures (LRU, at most 32)
        self.tools: dict[str, Tally] = {}  # tool name -> failures in a row
        # tool + error key -> failures since that tool last succeeded (LRU, at most 32)
        self.recurring: dict[str, Tally] = {}

    def dump(self) -> Any:
        return [dump_map(self.errors), dump_map(self.tools), dump_map(self.recurring)]

    @classmethod
    def load(cls, data: Any) -> ErrorState:
        st = cls()
        st.errors, st.tools = load_map(Tally, data[0]), load_map(Tally, data[1])
        st.recurring = load_map(Tally, data[2])
        return st


class ErrorLoop(Detector):
    """The same error text coming back, or one tool failing call after call.

    Two patterns, each with its own thresholds, and two refinements below:

    * the same error (error text with volatile values masked) returned
      ``warn_at``/``stop_at`` times with no successful result in between, whatever
      the calls were: rewording a command that fails the same
      way is not progress;
    * one tool failing ``tool_warn_at``/``tool_stop_at`` times in a row, even with
      different errors and arguments (Hermes: warn at 3, halt at 8). We stop at 10:
      the longest failure streak in a solved corpus run is 8 (a mini-swe-agent run
      rejected 8 times for its output format, which then recovered), while the
      bioagent runs that loop on failures reach 10 and 20.

    Third, ``resent_stop_at``: the same error that many times when the agent
    re-sent a call that had already failed with it (the same call, arguments
    reworded at most, among the failures): it knew the outcome and asked again.
    Different calls failing the same way ("file not found" for three paths) are
    exploration and wait for ``stop_at``. Measured with ``benchmarks/quality.py``:
    stopping at the 3rd same error whatever the calls stops one more labelled loop
    (a booking re-sent with a flight the tool said is unavailable) and one run the
    two readers disagree on (a payment re-sent with the card that was declined);
    requiring a re-sent call keeps both and guards the exploring case. It also
    stops 6 labelled coding and support loops 1-8 events earlier (a failing command
    re-run between other commands), and no run labelled not-a-loop or solved.

    Fourth, ``recurring_warn_at`` (a warning only): one tool failing with the same
    error that many times while other tools' calls worked in between (a booking
    rejected for its total three times, a recalculation between each try; a fetch
    refused by the same domain policy). Those successes reset the first pattern,
    as an edit between two failing builds should; a success of the failing tool
    itself resets this one. The error is compared with its small numbers kept (its
    result key): a test run failing 6, then 5, then 4 tests between edits moves.
    Measured: a warning on 2 more labelled loops, and on no run labelled not-a-loop,
    no solved run and no unlabelled run.

    ``stop_at`` 3 is a stop told first (see :func:`~loopwatch.policy.escalate`): the
    3rd same error is a warning that says the next one stops, and it stops only if the
    error comes back after that, or in a later streak of 3 once the agent was told (a
    harness rejecting the same format mistake again). Measured on the 8 sources of the
    corpus: stopping at the 4th stops one labelled loop fewer (that later streak), at
    the 5th two fewer, and neither spares a run labelled not-a-loop or a solved run;
    an agent that fails three times and then changes approach is warned, not stopped.

    Deliberately ignores: a transient error followed by a success (the success
    resets both counts), and errors not marked as such in the trace (a shell
    command's non-zero exit code printed as text is just a result).
    """

    name = "error_loop"
    kinds = frozenset({TOOL_RESULT, USER})

    def __init__(
        self,
        warn_at: int = 3,
        stop_at: int | None = 3,
        tool_warn_at: int = 5,
        tool_stop_at: int | None = 10,
        resent_stop_at: int | None = 3,
        recurring_warn_at: int | None = 3,
    ) -> None:
        self.recurring_warn_at = recurring_warn_at
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.resent_stop_at = resent_stop_at
        self.tool_warn_at = tool_warn_at
        self.tool_stop_at = tool_stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.slot_name(), ErrorState)
        errs, tools = st.errors, st.tools
        ev = ctx.event
        rec = ctx.call
        if rec is not None and rec.poll:
            return None  # a service not up yet while the agent waits for it: WaitBudget
        tool = ev.name or (rec.name if rec else "")
        if ev.kind == USER:
            # A user turn that brings something new (RunState.news_step) resets both
            # counts: the user has seen the failure and changed the request. One that
            # defers or says "please try again" does not make the same failure new.
            if ctx.state.news_step == ctx.step:
                tools.clear()
                errs.clear()
                st.recurring.clear()
            return None
        if not ev.error:
            # A success resets both counts: something worked, something moved (an
            # edit between two failing builds is progress for the build).
            tools.clear()
            errs.clear()
            recurring = st.recurring
            if recurring:
                prefix = tool + "\0"
                for k in [k for k in recurring if k.startswith(prefix)]:
                    del recurring[k]
            return None
        # every number masked: a harness rejecting the same format mistake says "found
        # 2 actions", then "found 3 actions"
        key = ev.error_key
        # Failures of different calls issued together in one turn (a parallel batch
        # all hitting the same broken tool) are one attempt, not several.
        attempt = 0 if ctx.batched else 1
        entry = _count(errs, key, attempt, ctx.step)
        t_entry = _count(tools, tool, attempt, ctx.step)
        # small numbers kept: a test run failing fewer tests after each edit moves
        r_key = tool + "\0" + ev.result_key
        r_entry = _count(st.recurring, r_key, attempt, ctx.step)
        args = f"({rec.args})" if rec else ""
        severity = severity_for(entry.count, self.warn_at, self.stop_at)
        resent = self.resent_stop_at
        if (
            severity is not Severity.STOP
            and resent is not None
            and entry.count >= resent
            and _resent(ctx, key, entry.steps)
        ):
            severity = Severity.STOP
        if severity is not None:
            return Finding(
                self.name,
                severity,
                ctx.step,
                tuple(entry.steps),
                f"The same error came back {entry.count} times (last from {tool}{args}): "
                f"{preview(ev.text, 100)!r}. Retrying will not fix it: read the error and "
                "change what you do.",
                key,
            )
        severity = severity_for(t_entry.count, self.tool_warn_at, self.tool_stop_at)
        if severity is not None:
            return Finding(
                self.name,
                severity,
                ctx.step,
                tuple(t_entry.steps),
                f"{tool} failed {t_entry.count} times in a row. Stop and work out why it fails "
                "before calling it again.",
                "tool:" + tool,
            )
        severity = severity_for(r_entry.count, self.recurring_warn_at, None)
        if severity is not None:
            return Finding(
                self.name,
                severity,
                ctx.step,
                tuple(r_entry.steps),
                f"{tool}{args} failed with the same error {r_entry.count} times although "
                f"other calls worked in between: {preview(ev.text, 100)!r}. What you do "
                "between the tries does not fix it: read the error and change the call.",
                "recur:" + r_key,
            )
        return None


def _count(tallies: dict[str, Tally], key: str, attempt: int, step: int) -> Tally:
    """Count one failure under ``key`` (most recently failed last; at most 32 kept)."""
    entry = tallies.pop(key, None) or Tally()
    entry.count += attempt
    entry.steps.append(step)
    trim(entry.steps, _STEPS_MAX)
    tallies[key] = entry
    if len(tallies) > _KEYS_MAX:
        del tallies[next(iter(tallies))]
    return entry


def _resent(ctx: Context, key: str, steps: list[int]) -> bool:
    """Whether two of the failures with this error came from the same call (by
    normalised key): the agent asked again for what had already failed."""
    seen: set[str] = set()
    for rec in ctx.calls:
        if rec.rstep in steps:
            if rec.norm in seen:
                return True
            seen.add(rec.norm)
    return False
