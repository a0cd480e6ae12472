"""Error loop: the same failure again and again."""

from __future__ import annotations

from typing import Any

from ..events import TOOL_RESULT
from ..findings import Finding
from .base import C_ARGS, C_NAME, Context, Detector, preview, severity_for, trim

_KEYS_MAX = 32
_STEPS_MAX = 8


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
    kinds = frozenset({TOOL_RESULT})

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
        st: dict[str, Any] = self.my_state(ctx)
        errs: dict[str, list[Any]] = st.setdefault("errors", {})
        tools: dict[str, list[Any]] = st.setdefault("tools", {})
        ev = ctx.event
        rec = ctx.call
        tool = ev.name or (rec[C_NAME] if rec else "")
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
        entry = errs.pop(key, None) or [0, []]
        entry[0] += attempt
        entry[1].append(ctx.step)
        trim(entry[1], _STEPS_MAX)
        errs[key] = entry
        if len(errs) > _KEYS_MAX:
            del errs[next(iter(errs))]
        t_entry = tools.setdefault(tool, [0, []])
        t_entry[0] += attempt
        t_entry[1].append(ctx.step)
        trim(t_entry[1], _STEPS_MAX)
        args = f"({rec[C_ARGS]})" if rec else ""
        severity = severity_for(entry[0], self.warn_at, self.stop_at)
        if severity is not None:
            return Finding(
                self.name,
                severity,
                ctx.step,
                tuple(entry[1]),
                f"The same error came back {entry[0]} times (last from {tool}{args}): "
                f"{preview(ev.text, 100)!r}. Retrying will not fix it: read the error and "
                "change what you do.",
                key,
            )
        severity = severity_for(t_entry[0], self.tool_warn_at, self.tool_stop_at)
        if severity is not None:
            return Finding(
                self.name,
                severity,
                ctx.step,
                tuple(t_entry[1]),
                f"{tool} failed {t_entry[0]} times in a row. Stop and work out why it fails "
                "before calling it again.",
                "tool:" + tool,
            )
        return None
