"""Random corruption of exported traces: no exception escapes, no intact run is lost.

Files hold the conformance runs in each format with every line belonging to one
run. Hypothesis cuts lines, flips bytes and deletes keys; reading must never
raise, and every run none of whose lines was touched must come back exactly as
it does from the intact file.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from conftest import load_scenarios
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwatch.traces import InputError, TraceRun, read_runs

RUNS = load_scenarios()


def _lines_by_run(fmt: str) -> list[tuple[str, str]]:
    """(native run id, line) for a file in ``fmt``, one run's records per line or lines."""
    out: list[tuple[str, str]] = []
    if fmt == "otlp":
        for run, doc in zip(RUNS, tc.otlp_documents(RUNS, "genai"), strict=True):
            out.append((run["run_id"], json.dumps(tc.otlp_hex(doc))))
    elif fmt == "langsmith":
        for run in RUNS:
            out += [
                (run["run_id"], json.dumps(tc.langsmith_dict(r))) for r in tc.langsmith_runs(run)
            ]
    elif fmt == "langfuse":
        for run in RUNS:
            out += [(run["run_id"], json.dumps(o)) for o in tc.langfuse_observations(run)]
    elif fmt == "openai_agents":
        records = tc.openai_agents_records(RUNS)
        owner: dict[str, str] = {}
        for rec in records:
            if rec["object"] == "trace":
                owner[rec["id"]] = rec["workflow_name"]
        out = [(owner[r.get("trace_id", r["id"])], json.dumps(r)) for r in records]
    return out


FILES = {fmt: _lines_by_run(fmt) for fmt in ("otlp", "langsmith", "langfuse", "openai_agents")}


_NATIVE_ID = {
    **{str(uuid.uuid5(uuid.NAMESPACE_URL, "ls:" + r["run_id"])): r["run_id"] for r in RUNS},
    **{uuid.uuid5(uuid.NAMESPACE_URL, "lf:" + r["run_id"]).hex: r["run_id"] for r in RUNS},
}


def _key(run: TraceRun) -> str:
    """The native run id a read run stands for."""
    return str(run.meta.get("workflow_name") or _NATIVE_ID.get(run.run_id, run.run_id))


def _read(path: Path) -> tuple[dict[str, list[TraceRun]], list[InputError]]:
    runs: dict[str, list[TraceRun]] = {}
    errors = []
    for item in read_runs(str(path)):
        if isinstance(item, InputError):
            errors.append(item)
        else:
            runs.setdefault(_key(item), []).append(item)
    return runs, errors


def _delete_a_key(obj: Any, pick: int) -> bool:
    """Delete the ``pick``-th key met in a depth-first walk; False if there are fewer."""
    stack = [obj]
    seen = 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            for k in list(node):
                if seen == pick:
                    del node[k]
                    return True
                seen += 1
                stack.append(node[k])
        elif isinstance(node, list):
            stack.extend(node)
    return False


corruption = st.tuples(
    st.sampled_from(["cut", "flip", "delete"]), st.integers(0, 10**6), st.integers(0, 10**6)
)


def _corrupt(line: str, how: tuple[str, int, int]) -> bytes:
    kind, a, b = how
    raw = line.encode()
    if kind == "cut":
        return raw[: a % max(len(raw), 1)]
    if kind == "flip":
        pos = a % len(raw)
        return raw[:pos] + bytes([(raw[pos] + 1 + b % 255) % 256]) + raw[pos + 1 :]
    obj = json.loads(line)
    _delete_a_key(obj, a % 200)
    return json.dumps(obj).encode()


@pytest.fixture(scope="module")
def intact(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, list[TraceRun]]]:
    out = {}
    for fmt, lines in FILES.items():
        path = tmp_path_factory.mktemp(fmt) / "intact.jsonl"
        path.write_text("".join(line + "\n" for _, line in lines))
        runs, errors = _read(path)
        assert not errors and len(runs) == len(RUNS)
        out[fmt] = runs
    return out


@pytest.mark.parametrize("fmt", list(FILES))
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_corruption_never_raises_and_never_loses_an_intact_run(
    fmt: str, data: st.DataObject, intact: dict[str, dict[str, list[TraceRun]]], tmp_path: Path
) -> None:
    lines = FILES[fmt]
    hits = data.draw(
        st.lists(st.tuples(st.integers(0, len(lines) - 1), corruption), min_size=1, max_size=4)
    )
    corrupted = dict((i, how) for i, how in hits)
    touched = {lines[i][0] for i in corrupted}
    blob = b"".join(
        (_corrupt(line, corrupted[i]) if i in corrupted else line.encode()) + b"\n"
        for i, (_, line) in enumerate(lines)
    )
    path = tmp_path / f"{uuid.uuid4().hex}.jsonl"
    path.write_bytes(blob)
    runs, errors = _read(path)  # must not raise
    for run_id, expected in intact[fmt].items():
        if run_id in touched:
            continue
        assert run_id in runs, f"intact run {run_id} lost; errors: {[str(e) for e in errors]}"
        assert [r.events for r in runs[run_id]] == [r.events for r in expected], run_id
    for error in errors:
        assert error.path == str(path) and error.reason


_KNOWN_KINDS = st.sampled_from(["model", "tool_call", "tool_result", "user", "span"])
_EVENT_VALUES = (
    st.none()
    | st.sampled_from(["t", "tool-call", "", "text", "name"])
    | st.lists(st.sampled_from(["text", "args"]), max_size=2)
)
_NATIVE_EVENTS = st.lists(
    # mostly known kinds, each with or without its main field, "unknown", a field of
    # its own; now and then an odd kind or none
    st.fixed_dictionaries(
        {"kind": _KNOWN_KINDS | _EVENT_VALUES | st.integers(0, 2)},
        optional={k: _EVENT_VALUES for k in ("name", "text", "args", "unknown", "output")},
    )
    | st.dictionaries(st.sampled_from(["name", "text", "ts"]), _EVENT_VALUES, max_size=2),
    max_size=8,
)


@given(_NATIVE_EVENTS)
def test_a_native_run_is_understood_the_same_at_once_or_event_by_event(
    events: list[dict[str, Any]],
) -> None:
    """A list of events that every one is understood is counted at once; whatever the
    events, the count and what is noted are those of going through them one by one
    (an iterator takes that way)."""
    from loopwatch.traces.jsonl import Understanding

    def counted(given: Any) -> tuple[int, dict[str, list[Any]], str]:
        seen = Understanding("f")
        try:
            seen.add(given)
        except TypeError as exc:  # a kind that is a list: the reader reports the record
            return seen.events, seen.unread, str(exc)
        return seen.events, seen.unread, ""

    at_once = counted(events)
    assert at_once == counted(iter(events))
    if not at_once[2]:
        assert at_once[0] == len(events)
