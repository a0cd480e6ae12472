"""LangSmith runs: a JSON array or JSON Lines of ``Run`` objects (``client.list_runs``).

One loopwatch run per ``trace_id``; the tree comes from ``parent_run_id`` (and
from nested ``child_runs`` when runs were loaded with their children), siblings
are ordered by ``dotted_order`` / start time. The mapping:

* ``tool`` runs: a ``tool_call`` (arguments: the ``inputs``, or its single
  ``input`` value, JSON-decoded) and, when the run ends, a ``tool_result``
  (``outputs.output``, a ToolMessage's ``content``; failed when ``error`` is set);
* ``llm`` (and ``chat_model``) runs: a ``model`` event (the generations' or
  the output message's text; ``total_tokens`` or prompt + completion;
  ``total_cost``), attributed to an agent when the metadata names one
  (``lc_agent_name``, ``agent_name``);
* every other run type (``chain``, ``retriever``, ``prompt``...): a ``span``
  whose type is the run type (``agent`` for a chain that is the agent named by
  ``lc_agent_name``) and whose text is the input.

Absent is not equal (docs/FORMAT.md, ``unknown``): with ``LANGSMITH_HIDE_INPUTS``
/ ``HIDE_OUTPUTS`` the SDK records ``{}``, and ``list_runs(select=...)`` can leave
the fields out. Such a tool run gives a call with no ``args`` and
``"unknown": ["args"]`` and a result with no ``text`` and ``"unknown": ["text"]``,
an llm run without outputs no model event, a span without inputs
``"unknown": ["text"]``. ``meta["unknown"]`` counts them and one ``InputError``
line per run says so. (LangChain records a tool's input as ``{"input": ...}`` and
its output as ``{"output": ...}``, so an empty ``{}`` is hidden, not empty.)
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..content import media_only
from ._common import (
    GroupingReader,
    Item,
    Node,
    as_text,
    assemble,
    input_text,
    maybe_json,
    missing_note,
    number,
    orphan_error,
    output_text_and_calls,
    parse_time,
)
from .base import InputError, TraceRun

__all__ = ["LangSmithReader", "looks_like"]

_AGENT_KEYS = ("lc_agent_name", "agent_name", "agent")

_Record = tuple[Mapping[str, Any], int | None]  # (record, line)


def looks_like(obj: Any) -> bool:
    """True for a LangSmith run object (or a list of them)."""
    if isinstance(obj, list):
        return bool(obj) and looks_like(obj[0])
    return (
        isinstance(obj, dict)
        and "run_type" in obj
        and "id" in obj
        and any(k in obj for k in ("trace_id", "dotted_order", "parent_run_id", "start_time"))
    )


def _metadata(run: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = run.get("extra")
    meta = extra.get("metadata") if isinstance(extra, dict) else None
    if not isinstance(meta, dict):
        meta = run.get("metadata")
    return meta if isinstance(meta, dict) else {}


class LangSmithReader(GroupingReader[_Record]):
    """Streams LangSmith runs into loopwatch runs, one per trace."""

    def take_records(self, obj: Any, line: int | None) -> Iterator[Item]:
        stack = list(reversed(obj)) if isinstance(obj, list) else [obj]
        while stack:
            run = stack.pop()
            if not isinstance(run, dict) or "id" not in run:
                yield InputError(self.path, line, "skipped a record that is not a LangSmith run")
                continue
            children = run.get("child_runs")
            if isinstance(children, list):  # loaded with children: flatten them
                parent_trace = run.get("trace_id") or run.get("id")
                for child in reversed(children):
                    if isinstance(child, dict):
                        child = dict(child)
                        child.setdefault("parent_run_id", run["id"])
                        child.setdefault("trace_id", parent_trace)
                    stack.append(child)
            parent = run.get("parent_run_id")
            trace = run.get("trace_id") or (run["id"] if parent is None else None)
            if trace is None:
                yield InputError(
                    self.path, line, f"skipped run {run['id']!r}: it has a parent but no trace_id"
                )
                continue
            self.groups.add(str(trace), (run, line), line, parent is None)

    def build(
        self, key: str, records: list[tuple[Mapping[str, Any], int | None]]
    ) -> Iterator[Item]:
        nodes: list[Node] = []
        for i, (run, line) in enumerate(records):
            start = parse_time(run.get("start_time"))
            end = parse_time(run.get("end_time"))
            parent = run.get("parent_run_id")
            nodes.append(
                Node(str(run["id"]), None if parent is None else str(parent), start or 0.0, end,
                     (str(run.get("dotted_order") or ""), i), run, line)
            )  # fmt: skip
        missing: dict[str, int] = {}

        def emit(node: Node, parent: str | None) -> tuple[list[Any], list[Any], str | None]:
            return _emit(node, parent, missing)

        events, orphans = assemble(nodes, emit)
        if orphans:
            yield orphan_error(self.path, orphans, key)
        root = next((r for r, _ in records if r.get("parent_run_id") is None), records[0][0])
        meta: dict[str, Any] = {"format": "langsmith", "trace_id": key}
        if isinstance(root.get("name"), str):
            meta["name"] = root["name"]
        if root.get("session_id") is not None:
            meta["session_id"] = str(root["session_id"])
        if missing:
            meta["unknown"] = dict(sorted(missing.items()))
        first_line = min((ln for _, ln in records if ln is not None), default=None)
        note = missing_note(key, missing, len(events), len(records), _HINT)
        if note is not None:
            yield InputError(self.path, first_line, note)
        yield TraceRun(key, events, meta, {}, self.path, first_line)


def _single(value: Any, key: str) -> Any:
    """``{"input": x}`` -> x: LangChain wraps a single tool input / output in one key."""
    if isinstance(value, dict) and len(value) == 1 and key in value:
        return value[key]
    return value


_HINT = (
    "LangSmith records {} when LANGSMITH_HIDE_INPUTS / LANGSMITH_HIDE_OUTPUTS is set, and "
    "list_runs(select=...) leaves out what it does not select"
)


def _hidden(value: Any) -> bool:
    """Inputs or outputs that were not recorded (or not fetched): missing, or ``{}``."""
    return value is None or value == {}


def _count(missing: dict[str, int], what: str) -> None:
    missing[what] = missing.get(what, 0) + 1


def _emit(
    node: Node, parent: str | None, missing: dict[str, int]
) -> tuple[list[Any], list[Any], str | None]:
    run: Mapping[str, Any] = node.data
    run_type = str(run.get("run_type") or "chain").lower()
    name = as_text(run.get("name"))
    meta = _metadata(run)

    def at(event: dict[str, Any]) -> dict[str, Any]:
        if parent is not None:
            event["parent"] = parent
        return event

    if run_type == "tool":
        call = at({"kind": "tool_call", "name": name, "id": node.id})
        if _hidden(run.get("inputs")):
            _count(missing, "tool_args")
            call["unknown"] = ["args"]
        else:
            call["args"] = maybe_json(_single(run.get("inputs"), "input"))
        error = run.get("error")
        result = at({"kind": "tool_result", "name": name, "id": node.id})
        if _hidden(run.get("outputs")):
            if error:
                result["text"] = as_text(error)
            else:
                _count(missing, "tool_results")
                result["unknown"] = ["text"]
        else:
            output = _single(run.get("outputs"), "output")
            if isinstance(output, dict) and "content" in output:
                output = output["content"]  # a ToolMessage
            if media_only(output):
                result["unknown"] = ["text"]  # a screenshot: the screen is the result
            else:
                result["text"] = (
                    as_text(maybe_json(output)) if not isinstance(output, str) else output
                )
        if error:
            result["error"] = True
        return [call], [result], None
    if run_type in ("llm", "chat_model"):
        outputs = run.get("outputs")
        if _hidden(outputs) and not run.get("error"):
            _count(missing, "model_text")
            return [], [], None
        text, _calls = output_text_and_calls(
            outputs.get("generations", outputs.get("output", outputs))
            if isinstance(outputs, dict)
            else outputs
        )
        event: dict[str, Any] = {"kind": "model", "text": text}
        tokens = number(run.get("total_tokens"))
        if tokens is None:
            p, c = number(run.get("prompt_tokens")), number(run.get("completion_tokens"))
            tokens = None if p is None and c is None else (p or 0.0) + (c or 0.0)
        if tokens:
            event["tokens"] = tokens
        cost = number(run.get("total_cost"))
        if cost:
            event["cost"] = cost
        agent = next((meta[k] for k in _AGENT_KEYS if isinstance(meta.get(k), str)), None)
        if agent is not None:
            event["agent"] = agent
        return [at(event)], [], None
    span_type = "agent" if meta.get("lc_agent_name") == name else run_type
    span = at({"kind": "span", "name": name, "type": span_type, "id": node.id})
    if _hidden(run.get("inputs")):
        _count(missing, "span_inputs")
        span["unknown"] = ["text"]
    else:
        span["text"] = input_text(_single(_single(run.get("inputs"), "input"), "messages"))
    return [span], [], node.id
