"""OpenTelemetry traces in OTLP JSON: GenAI semantic conventions and OpenInference.

Input: the OpenTelemetry file exporter's JSON Lines (one ``TracesData`` per
line), a single ``ExportTraceServiceRequest`` document, or one span object per
line. Ids may be hex or base64 (protobuf's JSON mapping), enums integers or
names, int64 strings or numbers, field names lowerCamelCase or snake_case.

Spans are grouped into runs by ``gen_ai.conversation.id`` (OpenInference:
``session.id``) when a trace carries one, else by trace id, rebuilt into a tree
from ``parentSpanId`` and ordered by time. The mapping:

* ``execute_tool`` / OpenInference ``TOOL``: a ``tool_call`` when the span
  starts and a ``tool_result`` when it ends (``gen_ai.tool.name``,
  ``gen_ai.tool.call.arguments`` / ``input.value`` (never OpenInference's
  ``tool.parameters``, the tool's schema), ``gen_ai.tool.call.result`` /
  ``output.value``; on the older conventions, the span events
  ``gen_ai.tool.message`` (``content``: the arguments) and ``gen_ai.choice``
  (``message``: the result), as Strands writes them by default; failed when the
  status is ERROR or ``error.type`` is set). A tool span directly inside a tool
  span of the same tool is the same call recorded twice (a wrapper tool, or two
  instrumentations): one call;
* ``chat`` / ``generate_content`` / ``text_completion`` / OpenInference ``LLM``:
  a ``model`` event (output messages, ``gen_ai.completion`` and its flattened
  forms, ``llm.output_messages.*``; usage tokens, ``llm.cost.total``). Tool
  calls in the output become ``tool_call`` events only in traces that have no
  tool spans (otherwise the tool spans already record them), and their
  ``tool_result`` events come from the tool messages of the next call's input
  (``tool_call_response`` parts, or ``tool`` messages with a ``tool_call_id``).
  An OpenInference LLM span with no messages and no token counts, in a run whose
  model calls are recorded as messages, made no call (request preparation): no event;
* ``invoke_agent`` / ``create_agent`` / OpenInference ``AGENT``: a ``span`` of
  type ``agent`` whose text is the input (recursion detection); any other
  GenAI operation or OpenInference kind: a ``span`` of that type;
* Langfuse SDK v5 spans (``langfuse.observation.type``, ``.input``, ``.output``,
  ``.level``, ``.usage_details``, ``.cost_details``), when a span has neither
  GenAI nor OpenInference attributes: ``tool``, ``generation`` and the span
  types map as above, ``event`` gives no event;
* spans with no GenAI, OpenInference or Langfuse attributes (HTTP, database...),
  and the bookkeeping spans some instrumentations mark with the operation name
  ``unknown`` (the OpenAI Agents v2 instrumentation's task and turn spans): no
  event; they stay in the tree so that their children keep their ancestry.

Absent is not equal (docs/FORMAT.md, ``unknown``): instrumentations capture no
message content by default, so a value the span does not carry is never read as
empty. A tool call whose arguments are not there has no ``args`` and
``"unknown": ["args"]``; a result or span input that is not there has no
``text`` and ``"unknown": ["text"]``; a model span without its output gives no
model event at all (an event with no text would read as the model saying
nothing). OpenInference writes ``__REDACTED__`` in place of what its trace config
hides (``hide_inputs``, ``hide_outputs``, ``hide_output_text``...): not captured
either. Each run's ``meta["unknown"]`` counts what was missing and one
``InputError`` line per run says so, naming the setting that captures it.

Calls with no enclosing span (an instrumented client called in a plain loop)
are each a trace of their own. Such parentless model spans are joined into one
run when their input messages carry on a previous call's conversation: a call
whose input starts with an earlier call's input followed by its output
continues that call's run.
"""

from __future__ import annotations

import ast
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TypeVar

import xxhash

from ..content import media_only
from ..fingerprints import canonical_args
from ._common import (
    _NOTES_MAX,
    GroupingReader,
    Item,
    Node,
    as_text,
    assemble,
    call_input,
    input_text,
    maybe_json,
    missing_note,
    number,
    orphan_error,
    output_text_and_calls,
    tool_output,
)
from .base import InputError, TraceRun
from .otlp_decode import _Bad, _decode_span, _get, _Span, _spans_of

__all__ = ["OtlpReader", "RunKeys", "looks_like"]

_TOOL_OPS = frozenset({"execute_tool"})
_MODEL_OPS = frozenset({"chat", "generate_content", "text_completion", "completion"})
_AGENT_OPS = frozenset({"invoke_agent", "create_agent"})
_CONVERSATION_KEYS = ("gen_ai.conversation.id", "session.id")
_ALIASES_MAX = 100_000
# Operation names instrumentations give spans that are not GenAI operations (the
# OpenAI Agents v2 instrumentation's task / turn bookkeeping): no event of their own.
_BOOKKEEPING_OPS = frozenset({"unknown"})
# Where each kind of value can be: a span carrying none of a group's keys did not
# capture that value (unknown), which is not the same as capturing an empty one.
# (Not OpenInference's ``tool.parameters``: that is the tool's parameter schema, the same
# for every call, so read as arguments it would make every call look identical.)
_ARG_KEYS = ("gen_ai.tool.call.arguments", "input.value", "langfuse.observation.input")
_RESULT_KEYS = ("gen_ai.tool.call.result", "output.value", "langfuse.observation.output")
_INPUT_KEYS = (
    "gen_ai.input.messages",
    "gen_ai.prompt",
    "input.value",
    "langfuse.observation.input",
)
_UNKNOWN = "unknown"
# What OpenInference's TraceConfig (hide_inputs, hide_outputs, hide_output_text...) writes
# in place of a value it hides: a value that was not captured, never a value to compare.
_REDACTED = "__REDACTED__"
# Where a model span keeps its output: a hidden one there leaves the output unknown.
_OUTPUT_KEYS = ("llm.output_messages.", "output.value", "gen_ai.completion", "gen_ai.output.")
# Where an OpenInference LLM span shows that a model call took place (see _made_no_call).
_CALL_EVIDENCE = ("llm.input_messages.", "llm.output_messages.", "llm.token_count.")
# Layers of one tool call followed upwards at most (see _tool_layers).
_LAYERS_MAX = 16
_CAPTURE_HINT = (
    "GenAI instrumentations capture no message content by default: set "
    "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=span_only (older ones, on the "
    "legacy conventions, write content to log records, which a traces file does not hold: "
    "add OTEL_SEMCONV_STABILITY_OPT_IN=gen_ai_latest_experimental); OpenInference "
    "instrumentations capture it unless OPENINFERENCE_HIDE_INPUTS / _OUTPUTS are set"
)
_CHAINS_MAX = 100_000


def looks_like(obj: Any) -> bool:
    """True for an OTLP ``TracesData`` / ``ExportTraceServiceRequest`` or a span object."""
    if isinstance(obj, list):
        return bool(obj) and looks_like(obj[0])
    if not isinstance(obj, dict):
        return False
    if "resourceSpans" in obj or "resource_spans" in obj:
        return True
    return (
        _get(obj, "traceId", "trace_id") is not None
        and (_get(obj, "spanId", "span_id") is not None)
        and ("startTimeUnixNano" in obj or "start_time_unix_nano" in obj or "attributes" in obj)
    )


# -- which run a span belongs to (the reader and the live span processor) ----------------
def hide_redacted(span: _Span) -> None:
    """Take the attributes an instrumentation wrote as a redaction placeholder out of the
    span, remembered by key in ``span.hidden``: a value that was not captured, which is
    never compared (and a hidden output is not an empty one)."""
    if _REDACTED not in span.attrs.values():  # the common case, checked in C
        return
    hidden = [k for k, v in span.attrs.items() if v == _REDACTED]
    if hidden:
        for k in hidden:
            del span.attrs[k]
        span.hidden = frozenset(hidden)


def conversation_of(attrs: Mapping[str, Any]) -> str | None:
    """The conversation (session) id a span carries, if any (a redaction placeholder is
    none: the span processor looks at attributes :func:`hide_redacted` has not seen)."""
    return next(
        (
            c
            for k in _CONVERSATION_KEYS
            if isinstance(c := attrs.get(k), str) and c and c != _REDACTED
        ),
        None,
    )


class RunKeys:
    """Which run each span belongs to, as spans arrive: one rule for a file and a live
    process, so that ``loopwatch scan`` of an export and the span processor
    (:mod:`loopwatch.integrations.opentelemetry`) see the same runs.

    A span with a conversation id (``gen_ai.conversation.id``, OpenInference's
    ``session.id``) belongs to that conversation, and so does every later span of its
    trace; a parentless model call whose input messages carry on an earlier call's
    conversation belongs to that call's run; any other span to its trace. Keys are
    ``c:<conversation>`` or ``t:<trace id>``; the run id is the key without its prefix.
    Both maps are bounded (oldest forgotten first).
    """

    def __init__(self, aliases_max: int = _ALIASES_MAX, chains_max: int = _CHAINS_MAX) -> None:
        # trace id -> the key of the run its spans belong to (a conversation, or the
        # first call of a chain of parentless calls)
        self.key_of: OrderedDict[str, str] = OrderedDict()
        # hash of a call's input + output messages -> the key of that call's run
        self.chains: OrderedDict[str, str] = OrderedDict()
        self.aliases_max = aliases_max
        self.chains_max = chains_max

    def place(self, span: _Span) -> tuple[str, bool, bool]:
        """(the key of the span's run; whether this span moved its trace from
        ``t:<trace id>`` to another run, which then takes the trace's earlier spans;
        whether the span completes a run: the root of a run that is its own trace)."""
        conversation = conversation_of(span.attrs)
        known = self.key_of.get(span.trace_id)
        chained = _call_messages(span) if span.parent_id is None and conversation is None else None
        target = None
        if conversation is not None:
            target = f"c:{conversation}"
        elif known is None and chained is not None:
            target = self._continues(chained[0])
        moved = False
        if target is not None and known != target:
            self.key_of[span.trace_id] = target
            if len(self.key_of) > self.aliases_max:
                self.key_of.popitem(last=False)
            moved = True
            known = target
        key = known if known is not None else f"t:{span.trace_id}"
        if chained is not None:
            self._register(chained, key)
        # Conversations span several traces, and so may a chain of parentless calls:
        # only idleness (or the end) completes them.
        is_root = span.parent_id is None and known is None and chained is None
        return key, moved, is_root

    def _continues(self, inputs: list[str]) -> str | None:
        """The run a parentless call continues: the longest prefix of its input messages
        that is an earlier call's input followed by that call's output."""
        hashes = _prefix_hashes(inputs)
        for h in reversed(hashes):
            found = self.chains.get(h)
            if found is not None:
                return found
        return None

    def _register(self, chained: tuple[list[str], list[str]], key: str) -> None:
        inputs, outputs = chained
        if not outputs:
            return
        self.chains[_prefix_hashes(inputs + outputs)[-1]] = key
        if len(self.chains) > self.chains_max:
            self.chains.popitem(last=False)


N = TypeVar("N")


def _itself(span: _Span) -> _Span:
    return span


def agent_name_above(
    node: N, parent_of: Callable[[N], N | None], span_of: Callable[[N], _Span]
) -> str | None:
    """The name of the nearest agent span enclosing ``node``: over a file's spans (the
    reader) or a live process's open spans (the processor), hence the two functions."""
    current = parent_of(node)
    for _ in range(256):
        if current is None:
            return None
        span = span_of(current)
        if _classify(span.attrs)[1] == "agent":
            return _span_name(span, "agent")
        current = parent_of(current)
    return None


def outermost_layer(
    node: N, parent_of: Callable[[N], N | None], span_of: Callable[[N], _Span]
) -> N:
    """The outermost of the tool spans that record the same call as ``node`` (``node``
    itself when its parent is not a span of the same tool; see :func:`_tool_layers`)."""
    name = _tool_name(span_of(node))
    top = node
    for _ in range(_LAYERS_MAX):
        up = parent_of(top)
        if up is None:
            break
        span = span_of(up)
        if _classify(span.attrs)[0] != "tool" or _tool_name(span) != name:
            break
        top = up
    return top


# -- the reader --------------------------------------------------------------------------
class OtlpReader(GroupingReader[_Span]):
    """Streams OTLP JSON into runs (see the module docstring for the mapping)."""

    def __init__(self, path: str) -> None:
        super().__init__(path)
        self.keys = RunKeys()
        self.problems: dict[str, list[tuple[int | None, str]]] = {}
        self.notes_left = _NOTES_MAX
        self.notes_held = 0

    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        records = obj if isinstance(obj, list) else [obj]
        for record in records:
            if not isinstance(record, dict):
                yield InputError(self.path, line, "expected an OTLP JSON object")
                continue
            try:
                for raw, service in _spans_of(record):
                    try:
                        span, problems = _decode_span(raw, service, line)
                    except _Bad as exc:
                        yield InputError(self.path, line, f"skipped a span: {exc}")
                        continue
                    self._add(span, problems)
            except _Bad as exc:
                yield InputError(self.path, line, f"not OTLP JSON: {exc}")

    def _add(self, span: _Span, problems: list[str]) -> None:
        hide_redacted(span)
        key, moved, is_root = self.keys.place(span)
        if moved:
            # Spans of this trace seen before the run was known: move them over.
            earlier = self.groups.take(f"t:{span.trace_id}")
            if earlier is not None:
                for old in earlier.records:
                    self.groups.add(key, old, old.line, False)
                carried = self.problems.pop(f"t:{span.trace_id}", None)
                if carried:
                    self.problems.setdefault(key, []).extend(carried)
        self.groups.add(key, span, span.line, is_root)
        if problems:
            self.problems.setdefault(key, []).extend((span.line, p) for p in problems)

    def build(self, key: str, spans: list[_Span]) -> Iterator[Item]:
        run_id = key[2:]
        problems = self.problems.pop(key, None)
        if problems:
            line, first = problems[0]
            more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
            yield InputError(self.path, line, f"run {run_id!r}: {first}{more}; read without it")
        has_tool_spans = any(_classify(s.attrs)[0] == "tool" for s in spans)
        calls_as_messages = any(
            _is_oi_llm(s.attrs) and any(k.startswith("llm.output_messages.") for k in s.attrs)
            for s in spans
        )
        nodes = [
            Node(s.span_id, s.parent_id, s.start / 1e9, None if s.end is None else s.end / 1e9,
                 i, s, s.line)
            for i, s in enumerate(spans)
        ]  # fmt: skip
        missing: dict[str, int] = {}
        pending: dict[str, str] = {}  # tool call id -> tool name, awaiting its result
        by_id = {s.span_id: s for s in spans}
        layers, inner_layers = _tool_layers(spans, by_id)

        def parent_of(span: _Span) -> _Span | None:
            return by_id.get(span.parent_id) if span.parent_id else None

        def agent_above(span: _Span) -> str | None:
            return agent_name_above(span, parent_of, _itself)

        def emit(node: Node, parent: str | None) -> tuple[list[Any], list[Any], str | None]:
            span = node.data
            if span.span_id in inner_layers:
                return [], [], None  # read with the outermost span of its call
            inner = layers.get(span.span_id, ())
            if calls_as_messages and _made_no_call(span):
                return [], [], None
            return _emit(span, parent, has_tool_spans, missing, pending, agent_above, inner)

        events, orphans = assemble(nodes, emit)
        if orphans:
            yield orphan_error(self.path, orphans, run_id)
        meta: dict[str, Any] = {"format": "otlp"}
        service = next((s.service for s in spans if s.service), None)
        if service:
            meta["service"] = service
        if key.startswith("c:"):
            meta["conversation_id"] = run_id
        else:
            meta["trace_id"] = run_id
            traces = len({s.trace_id for s in spans})
            if traces > 1:
                meta["traces"] = traces  # parentless calls joined by their messages
        if missing:
            meta["unknown"] = dict(sorted(missing.items()))
        first_line = min((s.line for s in spans if s.line is not None), default=None)
        note = missing_note(run_id, missing, len(events), len(spans), _CAPTURE_HINT)
        if note is not None:
            if self.notes_left > 0:
                self.notes_left -= 1
                yield InputError(self.path, first_line, note)
            else:
                self.notes_held += 1
        yield TraceRun(run_id, events, meta, {}, self.path, first_line)

    def finish(self) -> Iterator[Item]:
        yield from super().finish()
        if self.notes_held:
            yield InputError(
                self.path,
                None,
                f"and {self.notes_held} more runs with notes like the ones above "
                "(see meta.unknown in each run)",
            )


# -- mapping spans to events ----------------------------------------------------------------
def _classify(a: Mapping[str, Any]) -> tuple[str | None, str]:
    """(what the span is: tool / model / span / None, its span type)."""
    op = a.get("gen_ai.operation.name")
    kind = a.get("openinference.span.kind")
    key = (op if isinstance(op, str) else None, kind if isinstance(kind, str) else None)
    found = _CLASSES.get(key)
    if found is None:
        found = _classify_named(*key)
        if found is None:
            return _classify_unnamed(a)
        if len(_CLASSES) < _CLASSES_MAX:
            _CLASSES[key] = found
    return found


# (operation name, OpenInference kind) -> what they say: the span processor asks for
# every span at its start and end, and a handful of names covers them all
_CLASSES: dict[tuple[str | None, str | None], tuple[str | None, str]] = {}
_CLASSES_MAX = 4096


def _classify_named(op: str | None, kind: str | None) -> tuple[str | None, str] | None:
    """What a span's GenAI operation name or OpenInference kind says it is; None when
    it has neither."""
    op = op.strip().lower() if op is not None and op.strip() else None
    if op in _BOOKKEEPING_OPS:
        return None, ""
    kind = kind.strip().upper() if kind is not None and kind.strip() else None
    if op in _TOOL_OPS or kind == "TOOL":
        return "tool", "tool"
    if op in _MODEL_OPS or kind == "LLM":
        return "model", "llm"
    if op in _AGENT_OPS or kind == "AGENT":
        return "span", "agent"
    if op is not None:
        return "span", op
    if kind is not None:
        return "span", kind.lower()
    return None


def _classify_unnamed(a: Mapping[str, Any]) -> tuple[str | None, str]:
    """A span with neither an operation name nor a kind: older GenAI conventions by
    their attributes, Langfuse observations by their type."""
    if any(k in a for k in ("gen_ai.completion", "gen_ai.output.messages", "gen_ai.system")):
        return "model", "llm"
    lf = a.get("langfuse.observation.type")
    lf = lf.strip().lower() if isinstance(lf, str) and lf.strip() else None
    if lf == "tool":
        return "tool", "tool"
    if lf == "generation":
        return "model", "llm"
    if lf is not None and lf != "event":
        return "span", lf
    return None, ""


def _first(a: Mapping[str, Any], *keys: str) -> Any:
    """The value of the first of ``keys`` the span carries."""
    for k in keys:
        value = a.get(k)
        if value is not None:
            return value
    return None


def _flattened(a: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """Rebuild ``prefix.N.rest`` attributes (OpenInference, OpenLLMetry) into a list."""
    items: dict[int, dict[str, Any]] = {}
    plen = len(prefix) + 1
    for key, value in a.items():
        if not key.startswith(prefix + "."):
            continue
        index, _, rest = key[plen:].partition(".")
        if index.isdigit() and rest:
            items.setdefault(int(index), {})[rest] = value
    return [items[i] for i in sorted(items)]


def _oi_messages(a: Mapping[str, Any], prefix: str) -> list[dict[str, Any]]:
    """OpenInference's flattened ``llm.input_messages`` / ``llm.output_messages``."""
    out = []
    for m in _flattened(a, prefix):
        calls = [
            {"id": c.get("tool_call.id"), "name": c.get("tool_call.function.name"),
             "arguments": c.get("tool_call.function.arguments"), "type": "tool_call"}
            for c in _flattened(m, "message.tool_calls")
        ]  # fmt: skip
        content = m.get("message.content")
        if content is None:
            parts = _flattened(m, "message.contents")
            content = [{"type": "text", "text": p.get("message_content.text", "")}
                       for p in parts if p.get("message_content.text") is not None]  # fmt: skip
        message = {"role": m.get("message.role", "assistant"), "content": content,
                   "tool_calls": calls}  # fmt: skip
        if m.get("message.tool_call_id") is not None:
            message["tool_call_id"] = m["message.tool_call_id"]
        out.append(message)
    return out


def _in_events(events: list[tuple[str, dict[str, Any]]], event: str, key: str) -> Any:
    """The value of ``key`` in the first span event named ``event`` that has it."""
    for name, attrs in events:
        if name == event and attrs.get(key) is not None:
            return attrs[key]
    return None


def _model_output(a: Mapping[str, Any], events: list[tuple[str, dict[str, Any]]]) -> Any:
    """The model's output as the span carries it; ``None`` when it carries none (content
    not captured), which is not the same as an empty output."""
    found = _first(a, "gen_ai.output.messages", "gen_ai.completion")
    if found is not None:
        return found
    for name, attrs in events:  # older conventions: content in span events
        if name in ("gen_ai.content.completion", "gen_ai.choice") and attrs:
            return _first(attrs, "gen_ai.completion", "message", "body") or ""
    messages = _oi_messages(a, "llm.output_messages")
    if messages:
        return messages
    completions = _flattened(a, "gen_ai.completion")
    if completions:
        return [
            {"role": c.get("role", "assistant"), "content": c.get("content"),
             "tool_calls": [{"id": t.get("id"), "name": t.get("name"),
                             "arguments": t.get("arguments"), "type": "tool_call"}
                            for t in _flattened(c, "tool_calls")]}
            for c in completions
        ]  # fmt: skip
    return _first(a, "output.value", "langfuse.observation.output")


def _input_messages(a: Mapping[str, Any]) -> list[Any] | None:
    """A model span's input messages (the conversation so far), when it carries them."""
    for key in ("gen_ai.input.messages", "gen_ai.prompt"):
        value = maybe_json(a.get(key))
        if isinstance(value, list) and value:
            return value
    messages: list[Any] = _oi_messages(a, "llm.input_messages")
    if messages:
        return messages
    prompts = _flattened(a, "gen_ai.prompt")
    return prompts or None


_ROLES = {"ai": "assistant", "model": "assistant", "human": "user"}
_NOISE = frozenset({"finish_reason", "index", "role"})


def _message_key(message: Any) -> str:
    """What one message says, the same whether it is a call's output or, on the next
    call, part of its input (where the finish reason and such are gone)."""
    if not isinstance(message, Mapping):
        return "?" + as_text(message)
    role = str(message.get("role") or message.get("message.role") or "").lower()
    role = _ROLES.get(role, role)
    body = {k: v for k, v in message.items() if k not in _NOISE}
    if role != "assistant":
        return role + "\x1f" + canonical_args(body).decode()
    text, calls = output_text_and_calls(body)
    ids = [c["id"] or f"{c['name']}{canonical_args(c['args']).decode()}" for c in calls]
    return role + "\x1f" + text + "\x1f" + "\x1f".join(ids)


def _call_messages(span: _Span) -> tuple[list[str], list[str]] | None:
    """(input message keys, output message keys) of a model span that carries its input
    messages, else None: what joins parentless calls into one conversation."""
    if _classify(span.attrs)[0] != "model":
        return None
    inputs = _input_messages(span.attrs)
    if not inputs:
        return None
    output = maybe_json(_model_output(span.attrs, span.events))
    if isinstance(output, Mapping):
        output = [output]
    elif isinstance(output, str):
        output = [{"role": "assistant", "content": output}]
    elif not isinstance(output, list):
        output = []
    return [_message_key(m) for m in inputs], [_message_key(m) for m in output]


def _prefix_hashes(keys: list[str]) -> list[str]:
    """Hashes of every prefix of a message list (the i-th covers keys[: i + 1])."""
    out = []
    h = ""
    for k in keys:
        h = xxhash.xxh3_64_hexdigest((h + "\x1e" + k).encode("utf-8", "surrogatepass"))
        out.append(h)
    return out


def _tokens(a: Mapping[str, Any]) -> float | None:
    pairs = (
        ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens"),
        ("gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens"),
        ("llm.token_count.prompt", "llm.token_count.completion"),
    )
    total = number(_first(a, "llm.token_count.total", "llm.usage.total_tokens"))
    if total is not None:
        return total
    for inp, out in pairs:
        i, o = number(a.get(inp)), number(a.get(out))
        if i is not None or o is not None:
            return (i or 0.0) + (o or 0.0)
    usage = maybe_json(a.get("langfuse.observation.usage_details"))
    if isinstance(usage, Mapping):
        total = number(usage.get("total"))
        if total is not None:
            return total
        i, o = number(usage.get("input")), number(usage.get("output"))
        if i is not None or o is not None:
            return (i or 0.0) + (o or 0.0)
    return None


def _cost(a: Mapping[str, Any]) -> float | None:
    cost = number(_first(a, "llm.cost.total", "gen_ai.usage.cost"))
    if cost is not None:
        return cost
    details = maybe_json(a.get("langfuse.observation.cost_details"))
    return number(details.get("total")) if isinstance(details, Mapping) else None


def _with_parent(event: dict[str, Any], parent: str | None) -> dict[str, Any]:
    if parent is not None:
        event["parent"] = parent
    return event


def _unknown(event: dict[str, Any], field: str) -> dict[str, Any]:
    """Mark a field the trace does not carry (docs/FORMAT.md: ``unknown``)."""
    event.setdefault(_UNKNOWN, []).append(field)
    return event


def _count(missing: dict[str, int], what: str) -> None:
    missing[what] = missing.get(what, 0) + 1


def _tool_responses(messages: list[Any] | None) -> Iterator[tuple[str, str]]:
    """(tool call id, result text) of the tool results in a call's input messages:
    GenAI ``tool_call_response`` parts, or ``tool`` messages with a ``tool_call_id``."""
    for m in messages or ():
        if not isinstance(m, Mapping):
            continue
        parts = m.get("parts")
        if isinstance(parts, list):
            for p in parts:
                if (
                    isinstance(p, Mapping)
                    and p.get("type") == "tool_call_response"
                    and p.get("id") is not None
                ):
                    yield str(p["id"]), _result_text(p.get("response"))
        elif m.get("role") == "tool" and m.get("tool_call_id") is not None:
            yield str(m["tool_call_id"]), _result_text(m.get("content"))


def _result_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(
        isinstance(v, Mapping) and v.get("type") in ("text", None) for v in value
    ):
        return "\n".join(as_text(v.get("text", v.get("content"))) for v in value)
    return as_text(value)


def _span_name(span: _Span, span_type: str) -> str:
    """A span event's name: the agent's name for agent spans, else the span's. An
    instrumentation's placeholder agent name is not the agent's: the span's name says
    it (the OpenAI Agents v2 instrumentation writes its placeholder when the span starts
    and the agent's name only when it ends)."""
    a = span.attrs
    name = _first(a, "gen_ai.agent.name", "agent.name") if span_type == "agent" else None
    ident = a.get("gen_ai.agent.id")
    if not isinstance(name, str) or (
        isinstance(ident, str) and (name, ident) in _PLACEHOLDER_AGENTS
    ):
        name = span.name
        for prefix in ("invoke_agent ", "create_agent "):
            name = name.removeprefix(prefix)
    return name


# Agent names that are an instrumentation's placeholder, not the agent's: the OpenAI
# Agents v2 instrumentation puts its own default on every span (with id "agent").
_PLACEHOLDER_AGENTS = frozenset({("OpenAI Agent", "agent")})


def _model_agent(span: _Span, agent_above: Callable[[_Span], str | None]) -> str | None:
    """The agent a model span speaks for: its own ``gen_ai.agent.name``, or, when that
    is an instrumentation's placeholder, the nearest enclosing agent span's name."""
    a = span.attrs
    agent = _first(a, "gen_ai.agent.name", "agent.name")
    if not isinstance(agent, str):
        return None
    ident = a.get("gen_ai.agent.id")
    if isinstance(ident, str) and (agent, ident) in _PLACEHOLDER_AGENTS:
        return agent_above(span)
    return agent


def _unrepr(output: Any) -> Any:
    """Output messages whose only text part is a Python ``repr`` of the message itself
    (what the OpenAI Agents v2 instrumentation writes) as that message."""
    output = maybe_json(output)
    if not isinstance(output, list):
        return output
    fixed = []
    for message in output:
        parts = message.get("parts") if isinstance(message, Mapping) else None
        if isinstance(parts, list) and len(parts) == 1 and isinstance(parts[0], Mapping):
            content = parts[0].get("content")
            if (
                isinstance(content, str)
                and content.startswith("{'")
                and content.endswith("}")
                and len(content) < 200_000
                and "'role'" in content
            ):
                try:
                    value = ast.literal_eval(content)
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    value = None
                if isinstance(value, dict) and "role" in value:
                    fixed.append(value)
                    continue
        fixed.append(message)
    return fixed


def _tool_name(span: _Span) -> str:
    name = _first(span.attrs, "gen_ai.tool.name", "tool.name")
    if not isinstance(name, str):
        name = span.name.removeprefix("execute_tool ").strip() or span.name
    return name


def _tool_layers(
    spans: list[_Span], by_id: Mapping[str, _Span]
) -> tuple[dict[str, list[_Span]], set[str]]:
    """Tool spans that record one call more than once.

    A tool span directly inside a tool span of the same tool is the same call, recorded
    at two layers: a tool that wraps another (a guard, a retry or caching wrapper) and
    both instrumented, or two instrumentations of one call (OpenInference's span around
    a framework's own ``execute_tool`` span). Read as two calls, every call would
    count twice, and a call repeated twice would look like four. A tool that calls
    itself with no model turn in between is the program's recursion, not the agent's
    choice, so nothing an agent loop detector needs is lost.

    Returns (the outermost span's id -> its inner spans, outer first; the inner ids).
    """
    layers: dict[str, list[_Span]] = {}
    inner: set[str] = set()

    def parent_of(span: _Span) -> _Span | None:
        return by_id.get(span.parent_id) if span.parent_id else None

    for s in spans:
        if _classify(s.attrs)[0] != "tool":
            continue
        top = outermost_layer(s, parent_of, _itself)
        if top is not s:
            inner.add(s.span_id)
            layers.setdefault(top.span_id, []).append(s)
    for found in layers.values():
        found.sort(key=lambda s: s.start)
    return layers, inner


def _is_oi_llm(a: Mapping[str, Any]) -> bool:
    kind = a.get("openinference.span.kind")
    return isinstance(kind, str) and kind.strip().upper() == "LLM"


def _made_no_call(span: _Span) -> bool:
    """An OpenInference LLM span that shows no model call, in a run whose model calls
    are recorded as messages: not a model turn.

    OpenInference instrumentations mark every method of a model class LLM, request
    preparation included (LlamaIndex's ``_prepare_chat_with_tools``, whose
    ``output.value`` is the request about to be sent). An instrumentation that records
    model calls as messages (``llm.output_messages``) records each call so, with its
    messages or token counts; a span with none of them, and nothing hidden, made no
    call. Read as model turns, their outputs were a growing history restating itself.
    Where no span of the run has output messages (``@tracer.llm``'s plain
    ``output.value``), ``output.value`` stays the model's output.
    """
    a = span.attrs
    return _is_oi_llm(a) and not span.hidden and not any(k.startswith(_CALL_EVIDENCE) for k in a)


def _failed(span: _Span) -> bool:
    level = span.attrs.get("langfuse.observation.level")
    return (
        span.error
        or span.attrs.get("error.type") is not None
        or (isinstance(level, str) and level.upper() == "ERROR")
    )


def _failure_message(span: _Span) -> Any:
    a = span.attrs
    return (
        span.status_message
        or a.get("langfuse.observation.status_message")
        or next(
            (e.get("exception.message") for n, e in span.events if n == "exception"),
            a.get("error.type"),
        )
    )


# A tool call's values, each from the outermost of the spans recording the call that
# carries it (``layers``: outermost first). Two functions rather than one, because the
# span processor reads the call when the span starts and its result when it ends.
def _layered(layers: tuple[_Span, ...], *keys: str) -> Any:
    if len(layers) == 1:
        return _first(layers[0].attrs, *keys)
    return next((v for c in layers if (v := _first(c.attrs, *keys)) is not None), None)


def _layered_event(layers: tuple[_Span, ...], event: str, key: str) -> Any:
    return next((v for c in layers if (v := _in_events(c.events, event, key)) is not None), None)


def _tool_call_id(layers: tuple[_Span, ...]) -> str:
    return as_text(_layered(layers, "gen_ai.tool.call.id", "tool_call.id") or layers[0].span_id)


def _tool_call(
    layers: tuple[_Span, ...], name: str, ident: str, missing: dict[str, int]
) -> dict[str, Any]:
    """The ``tool_call`` event of a tool span (its arguments unknown if not recorded)."""
    call: dict[str, Any] = {"kind": "tool_call", "name": name, "id": ident}
    raw_args = _layered(layers, *_ARG_KEYS)
    if raw_args is None:  # older conventions (Strands' default): in span events
        raw_args = _layered_event(layers, "gen_ai.tool.message", "content")
    if raw_args is None:
        _count(missing, "tool_args")
        _unknown(call, "args")
    else:
        call["args"] = call_input(raw_args)
    return call


def _tool_result(
    layers: tuple[_Span, ...], name: str, ident: str, missing: dict[str, int]
) -> dict[str, Any]:
    """The ``tool_result`` event of a tool span that ended (its text unknown if not
    recorded; failed when a span says so)."""
    failed = any(_failed(c) for c in layers)
    res: dict[str, Any] = {"kind": "tool_result", "name": name, "id": ident}
    result = _layered(layers, *_RESULT_KEYS)
    if result is None:
        result = _layered_event(layers, "gen_ai.choice", "message")
    if result is None and failed:
        result = next((m for c in layers if (m := _failure_message(c))), None)
    if result is None:
        _count(missing, "tool_results")
        _unknown(res, "text")
    elif media_only(result):
        _unknown(res, "text")  # a screenshot: the screen is the result
    elif (whole := tool_output(result)) is not None:
        res["text"], failed = whole[0], failed or whole[1]
    else:
        res["text"] = as_text(maybe_json(result)) if not isinstance(result, str) else result
    if failed:
        res["error"] = True
    return res


def _emit(
    span: _Span,
    parent: str | None,
    has_tool_spans: bool,
    missing: dict[str, int],
    pending: dict[str, str],
    agent_above: Callable[[_Span], str | None],
    inner: tuple[_Span, ...] | list[_Span] = (),
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], str | None]:
    a = span.attrs
    what, span_type = _classify(a)
    if what == "tool":
        # One call, maybe recorded by several nested spans (_tool_layers)
        layers = (span, *inner)
        name = _tool_name(span)
        ident = _tool_call_id(layers)
        call = _tool_call(layers, name, ident, missing)
        res = _tool_result(layers, name, ident, missing)
        return [_with_parent(call, parent)], [_with_parent(res, parent)], None
    if what == "model":
        output = _model_output(a, span.events)
        if output is None:
            # Content not captured: no model event (one with empty text would read as
            # the model saying nothing, turn after turn).
            _count(missing, "model_text")
            return [], [], None
        text, calls = output_text_and_calls(_unrepr(output))
        # Part of the output hidden (OpenInference's hide_output_text keeps the tool calls
        # and redacts the text): the calls are known, the text is not.
        text_hidden = any(k.startswith(_OUTPUT_KEYS) for k in span.hidden)
        event: dict[str, Any] = {"kind": "model", "text": text}
        tokens = _tokens(a)
        if tokens:
            event["tokens"] = tokens
        cost = _cost(a)
        if cost:
            event["cost"] = cost
        agent = _model_agent(span, agent_above)
        if agent is not None:
            event["agent"] = agent
        head = []
        if not has_tool_spans and pending:
            # No tool spans: the results of the calls an earlier turn asked for come
            # back in this call's input messages, just before this turn.
            for ident, text in _tool_responses(_input_messages(a)):
                asked = pending.pop(ident, None)
                if asked is not None:
                    res = {"kind": "tool_result", "name": asked, "id": ident, "text": text}
                    head.append(_with_parent(res, parent))
        if text_hidden:
            _count(missing, "model_text")
        else:
            head.append(_with_parent(event, parent))
        if not has_tool_spans:
            for i, c in enumerate(calls):
                ident = c["id"] or f"{span.span_id}.{i}"
                if c["id"]:
                    pending[ident] = c["name"]
                head.append(
                    _with_parent(
                        {"kind": "tool_call", "name": c["name"], "args": c["args"], "id": ident},
                        parent,
                    )
                )
        return head, [], None
    if what == "span":
        name = _span_name(span, span_type)
        raw_input = _first(a, *_INPUT_KEYS)
        ev: dict[str, Any] = {"kind": "span", "name": name, "type": span_type, "id": span.span_id}
        if raw_input is None:
            _count(missing, "span_inputs")
            _unknown(ev, "text")
        else:
            ev["text"] = input_text(call_input(raw_input))
        return [_with_parent(ev, parent)], [], span.span_id
    return [], [], None
