"""OpenTelemetry spans read as they start and end: the OTLP reader's mapping, streamed.

``loopwatch scan`` reads an exported file whole: it has every span of a run with its
final attributes, and the tree. A span processor sees each span twice, when it starts
(the attributes set so far, and the span still open) and when it ends (all of them,
read-only from then on), and must answer at once. :class:`SpanStream` turns those two
moments into the events :class:`~loopwatch.traces.otlp.OtlpReader` lists for the same
spans, in the same order, through the reader's own functions (classification, the
mapping of tool, model and other spans, the run-key rule
:class:`~loopwatch.traces.otlp.RunKeys`): one mapping, so that a live verdict and the
scan of the exported file agree step for step.

When each span is read:

* a tool span's call at its start when the span already carries its arguments
  (OpenInference's instrumentations write them then): the span is still open, so a
  verdict can be written on it. Instrumentations that write them later (the GenAI
  ``execute_tool`` spans of ``opentelemetry-util-genai`` and the OpenAI Agents
  instrumentation: when the tool returns) have the call read when the span ends, just
  before its result, or as soon as another event of the run comes after it. The result
  is read when the span ends;
* a model span when it ends (its output is not there before), at its place in the run;
* an agent or other span at its start when it carries its input, else as soon as the
  next event of the run comes after it, with what it carries by then (or at its end).

What the reader decides over a whole run, the stream decides as soon as the run shows it:

* tool calls in a model's output are events only in a run without tool spans: they are
  held back until the run shows which (a tool span starts: dropped; the next model call
  ends with no tool span in between: events, and the run is taken to have no tool spans
  from then on, so that later calls are judged at once);
* an OpenInference LLM span that made no call (request preparation) is no event in a
  run whose model calls are recorded as messages: held until the next model span ends.

Held events, and the run's events after them, wait in order: the run's events are
judged in the order the reader lists them. When every span of a run's traces has ended,
whatever is held goes. A trace that joins a conversation after some of its events were
judged (the conversation id on a later span) has those events replayed into the
conversation's run, as the reader moves them.

Where the two can differ, because the future is not known yet: a value written only
when a span ends is not there when the span is read earlier (an agent span's input, with
the OpenAI Agents instrumentation's chat spans: unknown live); a span that says what it
is only when it ends (LlamaIndex's OpenInference spans are written whole then) is read
then if it is a tool or model span, and is no event if it is an enclosing span whose
contents were read before it ended; a run whose model asked for tools and was called
again before any tool span came is taken to have no tool spans, where a later tool span
tells the reader otherwise.

Bounded: at most ``_TRACES_MAX`` open traces and ``_SPANS_MAX`` spans each (the ended
ones forgotten first), ``_RUNS_MAX`` runs' bookkeeping (least recently active forgotten
first: a run outlives its traces, as a conversation or a chain of parentless calls
does), ``_QUEUE_MAX`` waiting entries per run (the oldest is then read with what it
has); a trace's bookkeeping is dropped when its last span ends. This module imports no
OpenTelemetry: the processor (:mod:`loopwatch.integrations.opentelemetry`) hands it
decoded spans and opaque handles.
"""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import Any, Final, NamedTuple

from .otlp import (
    _ARG_KEYS,
    _CONVERSATION_KEYS,
    _INPUT_KEYS,
    _REDACTED,
    RunKeys,
    _classify,
    _emit,
    _is_oi_llm,
    _made_no_call,
    _tool_call,
    _tool_call_id,
    _tool_name,
    _tool_result,
    _with_parent,
    agent_name_above,
    outermost_layer,
)
from .otlp_decode import _Span

__all__ = ["Batch", "Judge", "LiveRun", "Opened", "SpanStream"]

log = logging.getLogger("loopwatch")

_TRACES_MAX: Final = 10_000
_SPANS_MAX: Final = 10_000
_RUNS_MAX: Final = 10_000
_QUEUE_MAX: Final = 256
_JUDGED_MAX: Final = 2_000
_PENDING_MAX: Final = 1_000
_ALIASES_MAX: Final = 10_000
_CHAINS_MAX: Final = 10_000

# what a run's waiting entry is
_START: Final = 0  # a span started: its start events (call, span, model turn)
_END: Final = 1  # a tool span ended: its result (and its call, if not read before)
_CALLS: Final = 2  # tool calls of a model's output, until the run shows its tool spans
_NOCALL: Final = 3  # a model span that may have made no call, until the next model span


class Opened:
    """One span the stream follows, from its start until its trace is done."""

    __slots__ = (
        "call_id",
        "final",
        "handle",
        "head_done",
        "layer_of",
        "layers",
        "lost",
        "own",
        "parent",
        "pev",
        "span_id",
        "trace",
        "view",
        "what",
    )

    def __init__(
        self, span_id: str, parent: Opened | None, handle: Any, trace: _Trace, view: _Span
    ) -> None:
        self.span_id = span_id
        self.parent = parent
        self.handle = handle  # the caller's span object (the processor's SDK span)
        self.trace = trace
        self.view = view  # the span as it is (attributes not copied), to decide with
        self.what = _classify(view.attrs)[0]  # tool, model, span or None, as last seen
        self.final: _Span | None = None  # the span as it ended
        self.head_done = False  # its start events were read
        self.lost = False  # read before it said what it was: nothing at its start
        self.own: str | None = None  # the span event id its children name as parent
        self.pev: str | None = None  # the span event id its own events name as parent
        self.call_id: str | None = None  # the id of the call read at its start
        self.layer_of: Opened | None = None  # the outer span recording the same call
        self.layers: list[_Span] = []  # the inner spans of its call that ended


class _Trace:
    __slots__ = ("id", "judged", "key", "open", "spans")

    def __init__(self, trace_id: str, key: str) -> None:
        self.id = trace_id
        self.key = key
        self.open = 0
        self.spans: dict[str, Opened] = {}
        # events judged while the trace is its own run (t:<id>), to replay into the
        # conversation it may join later; None once it belongs to another run
        self.judged: list[dict[str, Any]] | None = [] if key == f"t:{trace_id}" else None


class _Entry:
    __slots__ = ("events", "kind", "op", "resolved")

    def __init__(self, kind: int, op: Opened, events: list[dict[str, Any]] | None = None) -> None:
        self.kind = kind
        self.op = op
        self.events = events or []
        self.resolved = False


class LiveRun:
    """One run's bookkeeping: its waiting entries, what the run has shown so far, and
    the lock that keeps its events judged in order across threads."""

    __slots__ = (
        "calls_as_messages",
        "key",
        "lock",
        "pending",
        "queue",
        "run_id",
        "stopped",
        "tool_spans",
        "traces",
    )

    def __init__(self, key: str) -> None:
        self.key = key
        self.run_id = key[2:]
        self.queue: deque[_Entry] = deque()
        self.tool_spans: bool | None = None  # None: not shown yet
        self.calls_as_messages = False
        self.pending: dict[str, str] = {}  # tool call id -> name, awaiting its result
        self.traces = 0  # open traces in the run
        self.lock = threading.RLock()
        self.stopped = False  # the guard said stop once (the processor's bookkeeping)


class Judge(NamedTuple):
    """An event to judge, and where it was read."""

    event: dict[str, Any]
    op: Opened
    at_start: bool  # read while its span was still open (a verdict can go on it)
    replay: bool = False  # judged before under the trace's earlier run: observe only


class Batch:
    """What one start or end of a span gives the processor to do: the events to judge,
    in order, for one run, and the runs to forget (moved into a conversation)."""

    __slots__ = ("forget", "judge", "run")

    def __init__(self) -> None:
        self.run: LiveRun | None = None
        self.judge: list[Judge] = []
        self.forget: list[str] = []

    def add(self, event: dict[str, Any], op: Opened, at_start: bool) -> None:
        self.judge.append(Judge(event, op, at_start))
        judged = op.trace.judged
        if judged is not None and len(judged) < _JUDGED_MAX:
            judged.append(event)


def _parent(op: Opened) -> Opened | None:
    return op.parent


class SpanStream:
    """Spans in as they start and end, events out in the reader's order (see the module
    docstring). Not thread-safe: the processor calls it under its lock.

    ``snapshot(handle, view)`` decodes a span that is still open, as it is so far (to
    read its events from; ``view`` gives its ids). To decide what a span is, the stream
    looks at the ``view`` it was given when the span started: its attributes as they
    are, not copied, and its name.
    """

    def __init__(self, snapshot: Callable[[Any, _Span], _Span]) -> None:
        self.snapshot = snapshot
        self.keys = RunKeys(_ALIASES_MAX, _CHAINS_MAX)
        self.traces: OrderedDict[str, _Trace] = OrderedDict()
        self.runs: OrderedDict[str, LiveRun] = OrderedDict()
        self.missing: dict[str, int] = {}  # values the spans did not carry, by kind
        self.dropped = 0  # entries let go unread (a bound was reached)

    # -- the two moments -------------------------------------------------------------
    def started(self, view: _Span, handle: Any) -> Batch:
        """A span started (``handle`` is open, ``view`` shows it): the events due now."""
        batch = Batch()
        trace, fresh = self._trace(view.trace_id)
        if len(trace.spans) >= _SPANS_MAX:
            # a trace that never ends (a server's or a session's root span): forget its
            # spans that ended (their children hold them); if all are open, let this go
            trace.spans = {k: o for k, o in trace.spans.items() if o.final is None}
            if len(trace.spans) >= _SPANS_MAX:
                self.dropped += 1
                return batch  # not followed: its events are not read
        parent = trace.spans.get(view.parent_id) if view.parent_id else None
        op = Opened(view.span_id, parent, handle, trace, view)
        trace.spans[view.span_id] = op
        trace.open += 1
        attrs = view.attrs
        if fresh or view.parent_id is None or any(k in attrs for k in _CONVERSATION_KEYS):
            self._place(trace, view, batch)
        run = self._run(trace.key)
        if op.what == "tool":
            self._tool_span_seen(run)
        run.queue.append(_Entry(_START, op))
        self._drain(run, batch, flush=False)
        return batch

    def ended(self, span: _Span, handle: Any) -> Batch:
        """A span ended (``span`` decoded as it ended): the events that are due now."""
        batch = Batch()
        trace, _ = self._trace(span.trace_id)
        op = trace.spans.get(span.span_id)
        what = _classify(span.attrs)[0]
        if span.parent_id is None or any(k in span.attrs for k in _CONVERSATION_KEYS):
            self._place(trace, span, batch)  # (nothing else can change its run)
        run = self._run(trace.key)
        if op is None:  # its start was not seen (or not followed): read it whole now
            parent = trace.spans.get(span.parent_id) if span.parent_id else None
            op = Opened(span.span_id, parent, handle, trace, span)
            if len(trace.spans) < _SPANS_MAX:
                trace.spans[span.span_id] = op
            run.queue.append(_Entry(_START, op))
        else:
            trace.open -= 1
        op.final = span
        op.what = what
        if what == "tool":
            self._tool_span_seen(run)
            run.queue.append(_Entry(_END, op))
        elif what == "model":
            self._model_ended(run, span)
            if op.lost:
                run.queue.append(_Entry(_END, op))
        if trace.open <= 0:
            self._trace_done(trace, run, batch)
        else:
            self._drain(run, batch, flush=False)
        return batch

    def close(self) -> None:
        """Forget everything (the processor shuts down)."""
        self.traces.clear()
        self.runs.clear()

    # -- runs and traces ---------------------------------------------------------------
    def _trace(self, trace_id: str) -> tuple[_Trace, bool]:
        trace = self.traces.get(trace_id)
        if trace is not None:
            self.traces.move_to_end(trace_id)
            return trace, False
        key = self.keys.key_of.get(trace_id) or f"t:{trace_id}"
        trace = self.traces[trace_id] = _Trace(trace_id, key)
        self._run(key).traces += 1
        while len(self.traces) > _TRACES_MAX:  # spans that never end: let the oldest go
            _, old = self.traces.popitem(last=False)
            self._let_go(old)
        return trace, True

    def _run(self, key: str) -> LiveRun:
        run = self.runs.get(key)
        if run is None:
            run = self.runs[key] = LiveRun(key)
            while len(self.runs) > _RUNS_MAX:
                _, old = self.runs.popitem(last=False)
                self.dropped += len(old.queue)
        else:
            self.runs.move_to_end(key)
        return run

    def _let_go(self, trace: _Trace) -> None:
        """An open trace evicted: its waiting entries go unread."""
        run = self.runs.get(trace.key)
        if run is None:
            return
        before = len(run.queue)
        run.queue = deque(e for e in run.queue if e.op.trace is not trace)
        self.dropped += before - len(run.queue)
        run.traces -= 1

    def _place(self, trace: _Trace, span: _Span, batch: Batch) -> None:
        """The reader's run-key rule for this span; a trace that moves to another run
        takes its waiting entries along, and its judged events are replayed there."""
        key, _, _ = self.keys.place(span)
        if key == trace.key:
            return
        own = f"t:{trace.id}"
        old = self.runs.get(trace.key)
        new = self._run(key)
        if old is not None:
            old.traces -= 1
            if trace.key == own:
                new.queue.extend(e for e in old.queue if e.op.trace is trace)
                old.queue = deque(e for e in old.queue if e.op.trace is not trace)
                if trace.judged:
                    stand_in = Opened("", None, None, trace, span)  # replays are not recorded
                    batch.judge.extend(Judge(ev, stand_in, False, True) for ev in trace.judged)
                    if old.traces <= 0:
                        batch.forget.append(old.run_id)
        new.traces += 1
        trace.key = key
        trace.judged = [] if key == own else None

    def _trace_done(self, trace: _Trace, run: LiveRun, batch: Batch) -> None:
        """The trace's last span ended: its bookkeeping goes; when no trace of the run is
        open any more, whatever the run holds is read."""
        self.traces.pop(trace.id, None)
        run.traces -= 1
        self._drain(run, batch, flush=run.traces <= 0)

    # -- what a run has shown -----------------------------------------------------------
    def _tool_span_seen(self, run: LiveRun) -> None:
        """The run has tool spans: the calls of model outputs are not events."""
        if run.tool_spans is True:
            return
        run.tool_spans = True
        run.pending.clear()
        run.queue = deque(e for e in run.queue if e.kind != _CALLS)
        for e in run.queue:
            if e.kind == _NOCALL:
                e.resolved = True

    def _model_ended(self, run: LiveRun, span: _Span) -> None:
        """A model span ended: calls held since the previous model turn were events (no
        tool span came between), and a span that made no call is told apart."""
        for e in run.queue:
            if e.kind == _CALLS:
                e.resolved = True
                run.tool_spans = False
        a = span.attrs
        if _is_oi_llm(a) and any(k.startswith("llm.output_messages.") for k in a):
            run.calls_as_messages = True
            run.queue = deque(e for e in run.queue if e.kind != _NOCALL)
        elif not _made_no_call(span):
            for e in run.queue:
                if e.kind == _NOCALL:
                    e.resolved = True

    # -- reading the waiting entries, in order -------------------------------------------
    def _drain(self, run: LiveRun, batch: Batch, flush: bool) -> None:
        batch.run = run
        q = run.queue
        while q:
            e = q[0]
            force = flush or len(q) > _QUEUE_MAX
            if self._due(e, force) or (not self._waits(e) and self._pushed(q)):
                q.popleft()
                self._take(run, e, batch)
                q = run.queue  # _take may hold entries back at the front
            else:
                break

    def _due(self, e: _Entry, force: bool) -> bool:
        if e.kind == _END:
            return True
        if e.kind in (_CALLS, _NOCALL):
            return e.resolved or force
        return e.op.final is not None or force or self._ready(e.op)

    @staticmethod
    def _waits(e: _Entry) -> bool:
        """An entry later events do not push: held events wait for the run to show what
        they are, and a model turn for its output (the span's end)."""
        if e.kind in (_CALLS, _NOCALL):
            return True
        return e.kind == _START and e.op.final is None and e.op.what == "model"

    def _pushed(self, q: deque[_Entry]) -> bool:
        """Whether an entry after the first gives an event now (then the first is read
        with what it has: it happened before)."""
        for i, e in enumerate(q):
            if i == 0:
                continue
            if e.kind == _END:
                if not self._is_layer(e.op):
                    return True
            elif e.kind == _START:
                op = e.op
                ready = op.what is not None if op.final is not None else self._ready(op)
                if ready and not self._is_layer(op):
                    return True
            elif e.resolved:
                return True
        return False

    def _ready(self, op: Opened) -> bool:
        """A start whose events can be read now: a tool span that carries its arguments
        (or records a call an outer span records), a span that carries its input."""
        what = op.what
        if what == "tool":
            attrs = op.view.attrs
            return any(attrs.get(k) is not None for k in _ARG_KEYS) or self._is_layer(op)
        if what == "span":
            attrs = op.view.attrs
            return any(attrs.get(k) is not None for k in _INPUT_KEYS)
        return False

    def _open_span(self, op: Opened) -> _Span:
        """An open span to read its start events from: its view itself when it holds
        nothing the decoder would change (an array, a redaction placeholder), which is
        the common case and saves a copy; else a snapshot."""
        values = list(op.view.attrs.values())  # one copy in C: another thread may set one
        if _REDACTED in values or any(type(v) is tuple for v in values):
            return self.snapshot(op.handle, op.view)
        return op.view

    @staticmethod
    def _look(op: Opened) -> _Span:
        """The span to decide with: as it ended, else its view."""
        return op.final if op.final is not None else op.view

    def _is_layer(self, op: Opened) -> bool:
        """Whether the span records a call an enclosing span of the same tool records."""
        if op.layer_of is not None:
            return True
        if op.what != "tool" or op.parent is None:
            return False
        return outermost_layer(op, _parent, self._look) is not op

    def _agent_above(self, op: Opened) -> Callable[[_Span], str | None]:
        return lambda _span: agent_name_above(op, _parent, self._look)

    def _take(self, run: LiveRun, e: _Entry, batch: Batch) -> None:
        if e.kind == _START:
            self._read_start(run, e.op, batch)
        elif e.kind == _END:
            self._read_end(run, e.op, batch)
        else:
            for ev in e.events:
                batch.add(ev, e.op, False)

    def _read_start(self, run: LiveRun, op: Opened, batch: Batch) -> None:
        parent = op.parent
        op.pev = None if parent is None else (parent.own if parent.own is not None else parent.pev)
        op.what = what = _classify(self._look(op).attrs)[0]
        if what is None or (what == "model" and op.final is None):
            op.lost = True  # may say what it is when it ends: read then (tool, model)
            return
        if what == "model":
            assert op.final is not None
            op.head_done = True
            self._read_model(run, op, op.final, batch)
            return
        if what == "tool":
            if op.final is not None:
                # nothing came between its start and its end: the call is read with its
                # result, from every span that records it (the reader's way)
                return
            top = outermost_layer(op, _parent, self._look)
            op.head_done = True
            if top is not op:
                op.layer_of = top
                return
            span = self._open_span(op)
            op.call_id = _tool_call_id((span,))
            call = _tool_call((span,), _tool_name(span), op.call_id, self.missing)
            head = [_with_parent(call, op.pev)]
        else:
            op.head_done = True
            span = op.final if op.final is not None else self._open_span(op)
            head, _, op.own = _emit(span, op.pev, True, self.missing, {}, self._agent_above(op))
        for ev in head:
            batch.add(ev, op, op.final is None)

    def _read_end(self, run: LiveRun, op: Opened, batch: Batch) -> None:
        span = op.final
        assert span is not None  # an end entry is queued when the span ends
        what = op.what
        if what == "model":
            op.lost = False
            op.head_done = True
            self._read_model(run, op, span, batch)
            return
        if what != "tool":
            return
        if op.layer_of is None and not op.head_done:
            top = outermost_layer(op, _parent, self._look)
            if top is not op:
                op.layer_of = top
        if op.layer_of is not None:
            op.layer_of.layers.append(span)
            return
        layers = (span, *sorted(op.layers, key=lambda s: s.start))
        name = _tool_name(span)
        if not op.head_done:
            op.call_id = _tool_call_id(layers)
            batch.add(_with_parent(_tool_call(layers, name, op.call_id, self.missing), op.pev),
                      op, False)  # fmt: skip
            op.head_done = True
        # the result answers the call read at the start, under the id it had then
        result = _tool_result(layers, name, op.call_id or _tool_call_id(layers), self.missing)
        batch.add(_with_parent(result, op.pev), op, False)

    def _read_model(self, run: LiveRun, op: Opened, span: _Span, batch: Batch) -> None:
        no_call = _made_no_call(span)
        if no_call and run.calls_as_messages:
            return
        head, _, _ = _emit(
            span, op.pev, run.tool_spans is True, self.missing, run.pending, self._agent_above(op)
        )
        if len(run.pending) > _PENDING_MAX:
            run.pending.clear()
        if no_call:
            run.queue.appendleft(_Entry(_NOCALL, op, head))
            return
        n = len(head)
        while n and head[n - 1]["kind"] == "tool_call":
            n -= 1  # the calls of the output come last
        for ev in head[:n]:
            batch.add(ev, op, False)
        calls = head[n:]
        if calls and run.tool_spans is None:
            run.queue.appendleft(_Entry(_CALLS, op, calls))
        else:
            for ev in calls:
                batch.add(ev, op, False)
