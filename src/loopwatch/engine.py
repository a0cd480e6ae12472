"""The one engine behind both doors: feeds events to detectors over one run's state.

The runtime guard calls :meth:`Engine.step` for each event as it happens; the
offline scan calls the same method for each recorded event. Both therefore see the
same findings at the same steps, by construction.

Run state is a typed :class:`~loopwatch.state.RunState` and stays bounded: a window
of call records, a few counters, and each detector's own bounded slot.
"""

from __future__ import annotations

from collections.abc import Iterable
from re import Pattern
from typing import Final

from mypy_extensions import mypyc_attr

from .detectors.base import Context, Detector
from .events import KINDS, MODEL, TOOL_CALL, TOOL_RESULT, USER, Event
from .findings import Finding, Severity
from .fingerprints import (
    acknowledges_action,
    acknowledges_move,
    call_moves_view,
    declared_wait,
    is_reflection,
    reflection_tool,
    reports_pending,
    waiting_tool,
)
from .redact import compile_patterns, redact_extra
from .state import WARNED_MAX, CallRecord, RunState
from .text import (
    ARGS_PREVIEW_BYTES,
    args_text,
    echo_values,
    fingerprint,
    negative,
    said_of,
    specifics,
)

__all__ = ["CALL_WINDOW", "Engine", "new_state"]

# Calls kept in the shared window. Large enough for a cycle of period 6 seen 4 times
# (24 calls) plus slack; a repeat farther back than this counts as new again.
CALL_WINDOW: Final = 32
_PENDING_MAX: Final = 64


_RESULTS_SEEN_MAX: Final = 64  # result / user-input fingerprints remembered per run
# What every answer of loopwatch's starts with (policy.NOT_RUN, "[loopwatch] Run stopped"),
# and how far into a result it is looked for: an agent may wrap the answer it was handed
# (Claude Code records a denied call as "PreToolUse:<tool> hook error: [loopwatch] ...",
# an MCP tool name included, well under 200 characters).
_OWN_ANSWER: Final = "[loopwatch] "
_OWN_ANSWER_WITHIN: Final = 200


def new_state() -> RunState:
    """A fresh, empty run state."""
    return RunState()


# A plain Python class even when compiled (its methods are still compiled): callers
# and tests may replace ``engine.step`` on an instance, which a native class forbids.
# Not a base class: in the compiled build its methods refuse a subclass's instance as
# ``self`` (why the exceptions live in errors.py, which is never compiled).
@mypyc_attr(native_class=False)
class Engine:
    """Runs a set of detectors over one run's events, step by step."""

    def __init__(
        self,
        detectors: Iterable[Detector],
        exempt_tools: Iterable[str] = (),
        redact_patterns: Iterable[str] = (),
    ) -> None:
        self.detectors = tuple(detectors)
        names = [d.name for d in self.detectors]
        if len(set(names)) != len(names):
            dupes = sorted({n for n in names if names.count(n) > 1})
            raise ValueError(
                f"two detectors share the name(s) {dupes}; each keeps its state under its "
                "name, so a run would be counted twice (default_detectors() already has them)"
            )
        # Tools the user declared exempt (a poller, a clock): their calls and results
        # keep their step index but are invisible to every detector.
        self.exempt_tools = frozenset(exempt_tools)
        by_kind: dict[str, list[Detector]] = {k: [] for k in KINDS}
        for det in self.detectors:
            for kind in det.kinds:
                by_kind.setdefault(kind, []).append(det)
        self._by_kind = {k: tuple(v) for k, v in by_kind.items()}
        # The user's redaction patterns ([redact] patterns), on top of the built-in
        # ones that every preview applies: for the stored previews and the messages.
        self.redact = compile_patterns(redact_patterns)

    def step(self, state: RunState, event: Event) -> list[Finding]:
        """Observe one event; return the findings to report for it (warnings deduplicated).

        A warning is reported once per (detector, pattern); a stop is reported every
        time it holds, so a guard keeps blocking a call the agent keeps repeating.
        """
        step = state.n
        state.n = step + 1
        kind = event.kind
        call = None
        thought = False
        if kind == TOOL_CALL:
            exempt = bool(self.exempt_tools) and event.name in self.exempt_tools
            if exempt or is_reflection(event.name, event.args):
                # Exempt (a poller, a clock) or a reflection (think, plan): no detector
                # sees the call as an action, and its result is dropped too. A
                # reflection's words are the model's own: the detectors of model
                # output read them as one (no new turn: it is not a model event).
                if event.id is not None:
                    state.pending[event.id] = -1
                else:
                    state.quiet = event.name or ""
                if exempt:
                    return []
                event = Event(MODEL, None, None, args_text(event.args), agent=event.agent)
                kind = MODEL
                thought = True
        if kind == MODEL and not thought:
            # One model turn may issue several calls at once (a parallel batch): they
            # are one decision, so detectors count them as one attempt. In a trace
            # with no model events at all, every call is its own turn.
            state.turn += 1
            state.talks = True
        elif kind == TOOL_CALL and not state.talks:
            state.turn += 1
        elif kind == USER:
            # A user turn is new input for the call patterns: calls after it start
            # new turns (Context.turn_calls), so a chat that looks a thing up once
            # per user request is not a loop. Whether it brings *information* is a
            # separate question (RunState.news_step): a user who defers, restates
            # or says "anything else?" does not make a failing call new again.
            state.user_step = step
            if _brings_news(state, event):
                state.news_step = step
        if kind == TOOL_CALL:
            call = _record_call(state, event, step, self.redact)
        elif kind == TOOL_RESULT:
            if event.id is not None:
                if state.pending.get(event.id) == -1:
                    state.pending.pop(event.id, None)
                    return []
            elif state.quiet is not None and (event.name or "") == state.quiet:
                state.quiet = None
                return []
            if (self.exempt_tools and event.name in self.exempt_tools) or (
                event.id is None and reflection_tool(event.name)
            ):
                return []
            if event.text.find(_OWN_ANSWER, 0, _OWN_ANSWER_WITHIN) >= 0:
                # loopwatch's own answer in place of the tool's (a call skipped, a run
                # stopped), as an adapter hands it to the model and a trace records it:
                # the tool did not run, and the guard that answered never saw a result
                return []
            call = _record_result(state, event, step)
        if kind == TOOL_CALL:
            novel = call.novel if call is not None else True
        elif kind in (TOOL_RESULT, USER):
            key = event.result_key if kind == TOOL_RESULT else "u" + event.text_key
            novel = _note_seen(state, key)
        else:
            novel = False
        if novel:
            state.news += 1
        detectors = self._by_kind.get(kind)
        if not detectors:
            return []
        ctx = Context(step, event, state, call, novel)
        findings: list[Finding] = []
        for det in detectors:
            found = det.observe(ctx)
            if found is None:
                continue
            if found.severity is Severity.WARN:
                warned = state.warned
                key = f"{found.detector}:{found.pattern}"
                if key in warned:
                    continue
                warned[key] = step
                if len(warned) > WARNED_MAX:
                    del warned[next(iter(warned))]
            findings.append(found)
        if findings and self.redact:
            findings = [_redacted(f, self.redact) for f in findings]
        return findings


def _redacted(found: Finding, extra: tuple[Pattern[str], ...]) -> Finding:
    """A finding whose message went through the user's redaction patterns."""
    return Finding(
        found.detector,
        found.severity,
        found.step,
        found.steps,
        redact_extra(found.message, extra),
        found.pattern,
        found.decisive,
    )


def _record_call(
    state: RunState, event: Event, step: int, extra: tuple[Pattern[str], ...]
) -> CallRecord:
    """Append the call to the shared window; mark it novel if its key is new there,
    and a poll if it waits (:func:`_waits`)."""
    norm = event.norm_key
    seen = state.seen
    novel = norm not in seen
    if novel:
        state.epoch += 1
    seen[norm] = seen.get(norm, 0) + 1
    command = event.command
    known = event.args_known
    rec = CallRecord(
        step,
        event.call_key,
        norm,
        event.name or "",
        novel,
        # the preview is made (and redacted) when a message or a store first reads it
        None if known else "arguments not recorded",
        state.turn,
        command is not None,
        event.args_json[:ARGS_PREVIEW_BYTES] if known else b"",
        extra,
    )
    if command is None and known and len(event.args_json) <= _ECHO_ARGS_BYTES:
        # a search, a lookup, a booking: what it asks about, and what its result may
        # quote back (a shell command's output does not quote the command), read from
        # its values when needed (CallRecord.said)
        rec.said = said_of(event.args)
    calls = state.calls
    if waiting_tool(event.name) or (command is not None and declared_wait(command) is not None):
        rec.poll = True
        state.wait_step = step
    elif not novel and state.wait_step >= 0:
        # the same call again after a wait (or after a pending status) since it was
        # last made: checking again
        for earlier in reversed(calls):
            if earlier.norm == norm:
                rec.poll = earlier.poll or earlier.step < state.wait_step
                break
    calls.append(rec)
    state.ncalls += 1
    if len(calls) > CALL_WINDOW:
        old = calls.pop(0).norm
        left = seen[old] - 1
        if left:
            seen[old] = left
        else:
            del seen[old]
    if call_moves_view(event.name, event.args, event.args_json):
        rec.moves = True
    if event.id is not None:
        pending = state.pending
        pending[event.id] = step
        if len(pending) > _PENDING_MAX:
            del pending[next(iter(pending))]
    return rec


# A call's arguments whose string values a result may quote back: read from calls whose
# canonical arguments are this short (a search, a click, an id; not a file written).
_ECHO_ARGS_BYTES: Final = 600


def _note_seen(state: RunState, key: str) -> bool:
    """Record a result or input fingerprint; True if it was not among the recent ones.

    Shared by every detector that asks "was this new?", so the question is answered
    once per event and the run keeps one bounded set of fingerprints, not one each.
    """
    seen = state.rseen
    new = key not in seen
    if not new:
        del seen[key]  # re-inserted below: most recent last (native, where pop() is a call)
    seen[key] = state.n
    if len(seen) > _RESULTS_SEEN_MAX:
        del seen[next(iter(seen))]
    return new


def _record_result(state: RunState, event: Event, step: int) -> CallRecord | None:
    """Attach the result to its call: by id when given, else the oldest call still
    waiting for a result (traces without ids list results in call order)."""
    calls = state.calls
    rec = None
    if event.id is not None:
        call_step = state.pending.pop(event.id, None)
        if call_step is not None:
            for r in reversed(calls):
                if r.step == call_step:
                    rec = r
                    break
    if rec is None:
        for r in calls:
            if r.rstep is None and (event.name is None or r.name == event.name):
                rec = r
                break
        else:
            # A result whose call we never saw, or named differently (python ->
            # code_execution): fall back to the latest call without a result.
            for r in reversed(calls):
                if r.rstep is None:
                    rec = r
                    break
    if rec is None:
        return None
    if (
        event.text_known
        and not event.error
        and (acknowledges_move(event.text) if rec.moves else acknowledges_action(event.text))
    ):
        # "Scrolled down the page", "Clicked element #load-more": what came into view is
        # not in the trace, so the result is unknown (two such answers are not the same
        # screen); the agent's narration after it is its observation (NoEffect)
        event.forget_text()
    said = rec.said
    values = echo_values(said) if said is not None and rec.rstep is None else None
    if rec.echo or values or event.id is not None:
        event.forget_echoes(rec.echo, event.id, values)
        rec.echo = []
    rec.result = event.result_key
    rec.rstep = step
    if not rec.novel and not event.error and event.text_known and reports_pending(event.text):
        # a status checked again that says "not yet": polling (read on a repeat only:
        # a first result is no poll yet, and most results never repeat)
        rec.poll = True
        state.wait_step = step
    if rec.novel and (event.error or negative(event.text)):
        # A new call that failed, or a lookup that found nothing, taught nothing:
        # take back the progress its call counted, so a repeat around failed
        # attempts (or reworded searches) is still a repeat.
        state.epoch -= 1
    return rec


_SPECIFICS_MAX: Final = 64  # specifics of user messages remembered per run


def _brings_news(state: RunState, event: Event) -> bool:
    """Whether a user message says something specific it had not said before (an id,
    a code, a number: :func:`~loopwatch.text.specifics`). Remembered as fingerprints,
    never as the text. A message the trace did not record may have said anything (a
    new request, not "please try again"): it is news, so that no count goes on across
    it, as none goes on across a new request."""
    if not event.text_known:
        return True
    seen = state.uspec
    news = False
    for token in specifics(event.text):
        fp = fingerprint(token)
        if seen.pop(fp, None) is None:
            news = True
        seen[fp] = state.n
        if len(seen) > _SPECIFICS_MAX:
            del seen[next(iter(seen))]
    return news
