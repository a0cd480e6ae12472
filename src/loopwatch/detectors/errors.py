"""Error loop: the same failure again and again."""

from __future__ import annotations

from typing import Any, final

from ..events import TOOL_RESULT, USER
from ..findings import Finding
from ..state import DetectorState, Tally, dump_map, load_map
from .base import Context, Detector, preview, severity_for, trim

_KEYS_MAX = 32
_STEPS_MAX = 8


@final
class ErrorState(DetectorState):
    """Failures since the last success: by error signature and by tool."""

    __slots__ = ("errors", "tools")

    def __init__(self) -> None:
        self.errors: dict[str, Tally] = {}  # error key -> failures (LRU, at most 32)
        self.tools: dict[str, Tally] = {}  # tool name -> failures in a row

    def dump(self) -> Any:
        return [dump_map(self.errors), dump_map(self.tools)]

    @classmethod
    def load(cls, data: Any) -> ErrorState:
        st = cls()
        st.errors, st.tools = load_map(Tally, data[0]), load_map(Tally, data[1])
        return st


class ErrorLoop(Detector):
    """The same error text coming back, or one tool failing call after call.

    Two patterns, each with its own thresholds:

    * the same error (error text with volatile values masked) returned
      ``warn_at``/``stop_at`` times with no successful result in between, whatever
      the calls were: rewording a command that fails the same
      way is not progress;
    * one tool failing ``tool_warn_at``/``tool_stop_at`` times in a row, even with
      different errors and arguments (Hermes: warn at 3, halt at 8). We stop at 10:
      the longest failure streak in a solved corpus run is 8 (a mini-swe-agent run
      rejected 8 times for its output format, which then recovered), while the
      bioagent runs that loop on failures reach 10 and 20.

    Deliberately ignores: a transient error followed by a success (the success
    resets both counts), and errors not marked as such in the trace (a shell
    command's non-zero exit code printed as text is just a result).
    """

    name = "error_loop"
    kinds = frozenset({TOOL_RESULT, USER})

    def __init__(
        self,
        warn_at: int = 3,
        stop_at: int | None = 5,
        tool_warn_at: int = 5,
        tool_stop_at: int | None = 10,
    ) -> None:
        self.warn_at = warn_at
        self.stop_at = stop_at
        self.tool_warn_at = tool_warn_at
        self.tool_stop_at = tool_stop_at

    def observe(self, ctx: Context) -> Finding | None:
        st = ctx.state.slot(self.name, ErrorState)
        errs, tools = st.errors, st.tools
        ev = ctx.event
        rec = ctx.call
        tool = ev.name or (rec.name if rec else "")
        if ev.kind == USER:
            # A user turn that brings something new (RunState.news_step) resets both
            # counts: the user has seen the failure and changed the request. One that
            # defers or says "please try again" does not make the same failure new.
            if ctx.state.news_step == ctx.step:
                tools.clear()
                errs.clear()
            return None
        if not ev.error:
            # A success resets both counts: something worked, something moved (an
            # edit between two failing builds is progress for the build).
            tools.clear()
            errs.clear()
            return None
        key = ev.result_key
        # Failures of different calls issued together in one turn (a parallel batch
        # all hitting the same broken tool) are one attempt, not several.
        attempt = 0 if ctx.batched else 1
        entry = errs.pop(key, None) or Tally()
        entry.count += attempt
        entry.steps.append(ctx.step)
        trim(entry.steps, _STEPS_MAX)
        errs[key] = entry
        if len(errs) > _KEYS_MAX:
            del errs[next(iter(errs))]
        t_entry = tools.get(tool)
        if t_entry is None:
            t_entry = tools[tool] = Tally()
        t_entry.count += attempt
        t_entry.steps.append(ctx.step)
        trim(t_entry.steps, _STEPS_MAX)
        args = f"({rec.args})" if rec else ""
        severity = severity_for(entry.count, self.warn_at, self.stop_at)
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
        return None
