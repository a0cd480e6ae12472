"""OpenTelemetry: a span processor that guards whatever already exports GenAI or
OpenInference spans (``provider.add_span_processor(LoopwatchSpanProcessor())``).

::

    from opentelemetry.sdk.trace import TracerProvider
    from loopwatch.integrations.opentelemetry import LoopwatchSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(LoopwatchSpanProcessor(on_verdict=print))

The agent loop is not touched: the instrumentation the team already runs (OpenLLMetry,
OpenInference, the OpenAI Agents, Pydantic AI / Logfire, Strands or ADK spans) writes
spans, and the processor reads them as they start and end, with the mapping
``loopwatch scan`` applies to an exported OTLP file (:mod:`loopwatch.traces.otlp_live`
streams it): a tool span's call when it starts (or, when the instrumentation writes the
arguments later, when it ends), its result when it ends, a model's output when its span
ends; one run per trace, or per conversation id (``gen_ai.conversation.id``,
``session.id``). The verdicts therefore equal the scan's of the same run's export, step
for step.

A warning or stop is written on the trace where the SDK allows it:

* a call judged when its span starts (still open): attributes ``loopwatch.verdict``,
  ``loopwatch.detector`` and ``loopwatch.message`` on the tool span;
* anything judged when its span has ended (read-only from then on): a
  ``loopwatch.verdict`` span event on the enclosing agent span, or the nearest
  enclosing span still open.

Metrics, from the ``meter_provider`` given or the global one: ``loopwatch.findings``
(a counter: every finding, by ``detector`` and ``severity``) and
``loopwatch.runs.stopped`` (a run's first stop, by ``detector``): loops per hour on a
dashboard. ``on_verdict(found)`` is called with every warn, skip or stop (a
:class:`SpanVerdict`), on the thread that ended or started the span: the application
can cancel the run there (a span processor cannot stop it).

The processor runs on the thread that starts or ends each span, as every SDK processor
does, and costs what the guard costs plus the reading of the span
(``benchmarks/bench_otel.py``). It never raises into the SDK: a loopwatch bug, a store
failure or a callback's exception is logged (once per kind) and the span goes on, as
do the exporters after it.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, cast

try:
    from opentelemetry import metrics
    from opentelemetry.context import Context
    from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor
    from opentelemetry.trace import StatusCode
except ModuleNotFoundError as _exc:  # the SDK is an extra
    from ..extras import missing_extra

    raise missing_extra(_exc, "otel", "the OpenTelemetry SDK (opentelemetry-sdk)") from _exc

from ..findings import Action, Verdict
from ..guard import Guard
from ..redact import redact
from ..traces._common import missing_note
from ..traces.otlp import _CAPTURE_HINT, _CONVERSATION_KEYS, _classify, hide_redacted
from ..traces.otlp_decode import _Bad, _check_types, _Span
from ..traces.otlp_live import Batch, Judge, LiveRun, Opened, SpanStream
from ._common import make_guard

__all__ = ["LoopwatchSpanProcessor", "SpanVerdict"]

log = logging.getLogger("loopwatch")

VERDICT_EVENT: Final = "loopwatch.verdict"
_ERRORS_LOGGED_MAX: Final = 100
_ANCESTORS_MAX: Final = 256


@dataclass(frozen=True, slots=True)
class SpanVerdict:
    """A warn, skip or stop the guard gave on a step read from a span.

    ``run_id``: the trace id (hex) or the conversation id, as ``loopwatch scan`` names
    the run; ``event``: the step as the guard saw it (FORMAT.md); ``span_id`` and
    ``span_name``: the span it was read from.
    """

    run_id: str
    verdict: Verdict
    event: Mapping[str, Any]
    trace_id: str
    span_id: str
    span_name: str

    @property
    def action(self) -> str:
        """``warn``, ``skip`` or ``stop``."""
        return self.verdict.action.value

    @property
    def message(self) -> str:
        return self.verdict.message or ""


class LoopwatchSpanProcessor(SpanProcessor):
    """Loop detection on the spans an instrumented agent already writes.

    Parameters: a :class:`~loopwatch.Guard` (default: one built from ``loopwatch.toml``
    and the keyword arguments, which are its configuration keys: ``on_loop``,
    ``repeated_call={"stop_at": 8}``, ``store="redis://..."``...); ``meter_provider``
    for the counters (default: the global one); ``on_verdict``, called with a
    :class:`SpanVerdict` for every warn, skip and stop.
    """

    def __init__(
        self,
        guard: Guard | None = None,
        *,
        meter_provider: metrics.MeterProvider | None = None,
        on_verdict: Callable[[SpanVerdict], object] | None = None,
        **config: Any,
    ) -> None:
        self._owns_guard = guard is None
        self.guard = make_guard(guard, config)
        self.on_verdict = on_verdict
        self._stream = SpanStream(_reread)
        self._lock = threading.Lock()
        provider = meter_provider if meter_provider is not None else metrics.get_meter_provider()
        meter = provider.get_meter("loopwatch")
        self._findings = meter.create_counter(
            "loopwatch.findings",
            unit="{finding}",
            description="Findings of loopwatch's detectors on agent runs, by detector and severity",
        )
        self._stops = meter.create_counter(
            "loopwatch.runs.stopped",
            unit="{run}",
            description="Agent runs loopwatch said to stop (a run's first stop), by detector",
        )
        self._errors_logged: set[str] = set()
        self._noted = False

    # -- the SDK's hooks ----------------------------------------------------------------
    def on_start(self, span: Span, parent_context: Context | None = None) -> None:
        try:
            view = _view(span)
            self._through_stream(lambda: self._stream.started(view, span))
        except Exception as exc:
            self._failed(exc)

    def on_end(self, span: ReadableSpan) -> None:
        try:
            attrs = _attributes(span)
            if _classify(attrs)[0] is None and not any(k in attrs for k in _CONVERSATION_KEYS):
                decoded = _view(span, {})  # no step and no run of its own: nothing to read
            else:
                decoded = _decoded(span)
            self._through_stream(lambda: self._stream.ended(decoded, span))
        except Exception as exc:
            self._failed(exc)

    def shutdown(self) -> None:
        try:
            with self._lock:
                self._stream.close()
            if self._owns_guard:
                self.guard.close()
        except Exception as exc:
            self._failed(exc)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # nothing is buffered for export; held steps wait for their run

    # -- judging -----------------------------------------------------------------------
    def _through_stream(self, step: Callable[[], Batch]) -> None:
        """One start or end through the stream (under the processor's lock), then the
        events it made due judged (under their run's lock only)."""
        with self._lock:
            batch = step()
            run = self._hand_over(batch)
        if run is not None:
            self._judge_held(run, batch)

    def _hand_over(self, batch: Batch) -> LiveRun | None:
        """Take the run's lock before the processor's is let go (called under it): the
        run's events are judged in the order the stream gave them, and other runs'
        spans are not kept waiting while the guard (maybe a Redis round trip) works."""
        run = batch.run
        if run is None or not (batch.judge or batch.forget):
            return None
        run.lock.acquire()
        return run

    def _judge_held(self, run: LiveRun, batch: Batch) -> None:
        """Judge a batch's events under the run's lock (taken by :meth:`_hand_over`)."""
        try:
            for run_id in batch.forget:
                self.guard.reset(run_id)  # its events were replayed into a conversation
            for judge in batch.judge:
                verdict = self._observe(run.run_id, judge.event)
                if verdict is not None and not judge.replay and verdict.action is not Action.OK:
                    try:
                        self._report(run, judge, verdict)
                    except Exception as exc:  # the next steps are still judged
                        self._failed(exc, "recording a verdict")
        finally:
            run.lock.release()
        if not self._noted and self._stream.missing:
            self._noted = True
            note = missing_note(run.run_id, self._stream.missing, 1, 1, _CAPTURE_HINT)
            if note is not None:
                log.warning("loopwatch: %s", note.replace("in the trace", "in the spans"))

    def _observe(self, run_id: str, event: dict[str, Any]) -> Verdict | None:
        try:
            return self.guard.observe(run_id, event)
        except Exception as exc:  # the store with on_store_error="raise", a detector's bug
            self._failed(exc)
            return None

    def _report(self, run: LiveRun, judge: Judge, verdict: Verdict) -> None:
        for finding in verdict.findings:
            self._count(self._findings, detector=finding.detector, severity=finding.severity.value)
        detector = verdict.findings[0].detector if verdict.findings else ""
        if verdict.action is Action.STOP and not run.stopped:
            run.stopped = True
            self._count(self._stops, detector=detector)
        op = judge.op
        self._record(op, judge, verdict, detector)
        callback = self.on_verdict
        if callback is not None:
            name = op.final.name if op.final is not None else str(op.handle.name)
            found = SpanVerdict(run.run_id, verdict, judge.event, op.trace.id, op.span_id, name)
            try:
                callback(found)
            except Exception as exc:
                self._failed(exc, "on_verdict raised")

    def _count(self, counter: metrics.Counter, **attributes: str) -> None:
        try:
            counter.add(1, attributes)
        except Exception as exc:
            self._failed(exc, "a metric")

    def _record(self, op: Opened, judge: Judge, verdict: Verdict, detector: str) -> None:
        """The verdict on the trace: attributes on the span while it is open, else an
        event on the enclosing agent span (or the nearest enclosing span still open)."""
        attrs = {
            "loopwatch.verdict": verdict.action.value,
            "loopwatch.detector": detector,
            "loopwatch.message": verdict.message or "",
        }
        handle = op.handle
        if judge.at_start and isinstance(handle, Span) and handle.is_recording():
            handle.set_attributes(attrs)
            return
        target = _enclosing(op)
        if target is None:
            return
        event = judge.event
        attrs["loopwatch.event"] = str(event.get("kind", ""))
        if event.get("name") is not None:
            attrs["loopwatch.name"] = str(event["name"])
        attrs["loopwatch.span_id"] = op.span_id
        target.add_event(VERDICT_EVENT, attrs)

    def _failed(self, exc: Exception, what: str = "internal error") -> None:
        """Logged with its traceback once per kind of error; never raised into the SDK."""
        key = redact(f"{what}: {type(exc).__name__}: {exc}"[:200])
        first = key not in self._errors_logged
        if first and len(self._errors_logged) < _ERRORS_LOGGED_MAX:
            self._errors_logged.add(key)
        if first:
            log.error("loopwatch span processor: %s; the span goes on", key, exc_info=exc)


def _enclosing(op: Opened) -> Span | None:
    """The nearest enclosing agent span still open, else the nearest open span."""
    first_open: Span | None = None
    current = op.parent
    for _ in range(_ANCESTORS_MAX):
        if current is None:
            break
        handle = current.handle
        if isinstance(handle, Span) and handle.is_recording():
            if _classify(_attributes(handle))[1] == "agent":
                return handle
            if first_open is None:
                first_open = handle
        current = current.parent
    return first_open


# -- SDK spans as the OTLP reader's spans ---------------------------------------------------
def _attributes(span: Any) -> Mapping[str, Any]:
    """The span's attributes as they are, not copied. The SDK keeps them in a plain dict
    inside its ``BoundedAttributes``; read through the public mapping (a proxy over a
    lock-taking mapping) they cost several times more, on every span the agent writes.
    Any SDK without that dict is read through the public mapping."""
    inner = getattr(getattr(span, "_attributes", None), "_dict", None)
    if isinstance(inner, dict):
        return inner
    return span.attributes or {}


def _view(span: ReadableSpan, attrs: Mapping[str, Any] | None = None) -> _Span:
    """The span's ids, name, times and attributes (``attrs``, default: its own, not
    copied), without its events or status: what the stream decides with."""
    ctx = span.get_span_context()
    if ctx is None:
        raise ValueError(f"span {span.name!r} has no span context")
    parent = span.parent
    return _Span(
        f"{ctx.trace_id:032x}",
        f"{ctx.span_id:016x}",
        None if parent is None else f"{parent.span_id:016x}",
        span.name,
        span.start_time or 0,
        span.end_time,
        cast("dict[str, Any]", _attributes(span) if attrs is None else attrs),
        False,
        "",
        [],
        None,
        None,
    )


def _plain(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Attributes as the OTLP JSON decoder gives them back (arrays as lists), copied."""
    out = dict(attrs)  # one copy in C: safe while another thread sets an attribute
    for key, value in out.items():
        if type(value) is tuple:
            out[key] = list(value)
    return out


_service_cache: list[Any] = [None, None]  # the last resource seen and its service name


def _reread(span: ReadableSpan, view: _Span) -> _Span:
    """An open span decoded as it is so far (the stream's ``snapshot``)."""
    return _decoded(span, view)


def _service(span: ReadableSpan) -> str | None:
    resource = span.resource
    if resource is None:
        return None
    if resource is not _service_cache[0]:
        name = resource.attributes.get("service.name")
        _service_cache[:] = [resource, name if isinstance(name, str) else None]
    service: str | None = _service_cache[1]
    return service


def _decoded(span: ReadableSpan, view: _Span | None = None) -> _Span:
    """An SDK span (open or ended) as :mod:`loopwatch.traces.otlp_decode` decodes the
    same span from the OTLP JSON the exporter writes: the same attribute values (and
    checks of their types), events, status and ids, so that the mapping reads both alike.
    ``view``: the span's view, whose ids are taken rather than formatted again."""
    attrs = _plain(_attributes(span))
    if view is None:
        decoded = _view(span, attrs)
    else:
        decoded = _Span(view.trace_id, view.span_id, view.parent_id, span.name, view.start,
                        span.end_time, attrs, False, "", [], None, None)  # fmt: skip
    with contextlib.suppress(_Bad):
        _check_types(decoded.attrs)  # the reader drops a mistyped well-known key, so does this
    events = span.events
    if events:
        decoded.events = [(e.name, _plain(_attributes(e))) for e in events]
    status = span.status
    if status.status_code is StatusCode.ERROR:
        decoded.error = True
        decoded.status_message = status.description or ""
    decoded.service = _service(span)
    hide_redacted(decoded)
    return decoded
