"""Every conformance run, exported to every format by the real libraries, scans the same.

The runs of tests/data/conformance.jsonl are converted by tests/helpers/traces_convert.py,
written in the shapes those tools export (JSON Lines, documents, .gz), read back
through ``read_runs`` with the format sniffed (and forced), and scanned: the
verdict, first_warn / first_stop and every finding (steps, messages) must equal
those of the native run, and the events must be the same kinds in the same order.
"""

from __future__ import annotations

import gzip
import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from conftest import load_scenarios

from loopwatch import Config, Guard, scan
from loopwatch.events import Event
from loopwatch.traces import InputError, TraceRun, read_runs

RUNS = load_scenarios()
NATIVE = {r["run_id"]: r for r in RUNS}


def _lines(path: Path, records: list[Any], gz: bool = False) -> Path:
    text = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        path = path.with_name(path.name + ".gz")
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


def _merge_otlp(docs: list[dict[str, Any]]) -> dict[str, Any]:
    return {"resourceSpans": [rs for d in docs for rs in d["resourceSpans"]]}


def _trace_hex(run_id: str) -> str:
    return uuid.uuid5(uuid.NAMESPACE_URL, run_id).hex


# variant -> (writer(tmp_dir) -> path, forced format, reader run -> native run_id)
Writer = Callable[[Path], Path]
VARIANTS: dict[str, tuple[Writer, str, Callable[[TraceRun], str]]] = {}


def variant(
    name: str, fmt: str, native_id: Callable[[TraceRun], str]
) -> Callable[[Writer], Writer]:
    def register(fn: Writer) -> Writer:
        VARIANTS[name] = (fn, fmt, native_id)
        return fn

    return register


_BY_TRACE_HEX = {_trace_hex(r["run_id"]): r["run_id"] for r in RUNS}
_BY_LS = {str(uuid.uuid5(uuid.NAMESPACE_URL, "ls:" + r["run_id"])): r["run_id"] for r in RUNS}
_BY_LF = {uuid.uuid5(uuid.NAMESPACE_URL, "lf:" + r["run_id"]).hex: r["run_id"] for r in RUNS}


@variant("otlp-genai-protobuf-json-lines", "otlp", lambda r: r.run_id)
def _otlp_genai(tmp: Path) -> Path:
    return _lines(tmp / "genai.jsonl", tc.otlp_documents(RUNS, "genai"))


@variant("otlp-genai-hex-ids-gz", "otlp", lambda r: r.run_id)
def _otlp_genai_hex(tmp: Path) -> Path:
    docs = [tc.otlp_hex(d) for d in tc.otlp_documents(RUNS, "genai")]
    return _lines(tmp / "genai-hex.jsonl", docs, gz=True)


@variant("otlp-genai-old-names-one-document", "otlp", lambda r: _BY_TRACE_HEX[r.run_id])
def _otlp_old(tmp: Path) -> Path:
    path = tmp / "old.json"
    path.write_text(json.dumps(_merge_otlp(tc.otlp_documents(RUNS, "genai_old")), indent=2))
    return path


@variant("otlp-openinference", "otlp", lambda r: r.run_id)
def _otlp_oi(tmp: Path) -> Path:
    return _lines(
        tmp / "oi.jsonl", [tc.otlp_hex(d) for d in tc.otlp_documents(RUNS, "openinference")]
    )


@variant("langsmith-run-per-line-children-first", "langsmith", lambda r: _BY_LS[r.run_id])
def _langsmith_lines(tmp: Path) -> Path:
    records = []
    for run in RUNS:  # list_runs returns no particular order: children before parents here
        records.extend(reversed([tc.langsmith_dict(r) for r in tc.langsmith_runs(run)]))
    return _lines(tmp / "langsmith.jsonl", records)


@variant("langsmith-array-document", "langsmith", lambda r: _BY_LS[r.run_id])
def _langsmith_array(tmp: Path) -> Path:
    path = tmp / "langsmith.json"
    records = [tc.langsmith_dict(r) for run in RUNS for r in tc.langsmith_runs(run)]
    path.write_text(json.dumps(records, indent=1))
    return path


@variant("langfuse-v5-observation-per-line", "langfuse", lambda r: _BY_LF[r.run_id])
def _langfuse_v5(tmp: Path) -> Path:
    return _lines(tmp / "lf5.jsonl", [o for run in RUNS for o in tc.langfuse_observations(run)])


@variant("langfuse-v5-api-pages", "langfuse", lambda r: _BY_LF[r.run_id])
def _langfuse_pages(tmp: Path) -> Path:
    pages = [{"data": tc.langfuse_observations(run), "meta": {"cursor": None}} for run in RUNS]
    return _lines(tmp / "lf5-pages.jsonl", pages)


@variant("langfuse-v3-trace-per-line", "langfuse", lambda r: _BY_LF[r.run_id])
def _langfuse_v3(tmp: Path) -> Path:
    return _lines(tmp / "lf3.jsonl", [tc.langfuse_trace_v3(run) for run in RUNS])


@variant("openai-agents-exports", "openai_agents", lambda r: r.meta["workflow_name"])
def _openai_agents(tmp: Path) -> Path:
    return _lines(tmp / "agents.jsonl", tc.openai_agents_records(RUNS))


# What a format cannot express, and so is not compared for that format.
INEXPRESSIBLE = {
    # Generation spans carry no agent name; the SDK only nests them in agent spans,
    # which would be span events of their own.
    ("openai-agents-exports", "A-ping-pong"): "a model message's agent",
}


@pytest.fixture(scope="module")
def native_reports() -> dict[str, Any]:
    return {r["run_id"]: scan(r, Config()) for r in RUNS}


def _read(path: Path, fmt: str | None, native_id: Callable[[TraceRun], str]) -> dict[str, TraceRun]:
    got: dict[str, TraceRun] = {}
    for item in read_runs(str(path), fmt):
        assert not isinstance(item, InputError), str(item)
        key = native_id(item)
        assert key not in got, f"run {key} read twice"
        got[key] = item
    return got


@pytest.mark.parametrize("name", list(VARIANTS))
@pytest.mark.parametrize("forced", [False, True], ids=["sniffed", "forced"])
def test_every_run_scans_the_same_as_native(
    name: str, forced: bool, tmp_path: Path, native_reports: dict[str, Any]
) -> None:
    writer, fmt, native_id = VARIANTS[name]
    got = _read(writer(tmp_path), fmt if forced else None, native_id)
    assert set(got) == set(NATIVE)
    for run_id, native in NATIVE.items():
        if (name, run_id) in INEXPRESSIBLE:
            continue
        events = got[run_id].events
        assert [e["kind"] for e in events] == [e["kind"] for e in native["events"]], run_id
        want = native_reports[run_id]
        have = scan(got[run_id].to_dict(), Config())
        assert (have.verdict, have.first_warn, have.first_stop) == (
            want.verdict,
            want.first_warn,
            want.first_stop,
        ), run_id
        assert [f.to_dict() for f in have.findings] == [f.to_dict() for f in want.findings], run_id


@pytest.mark.parametrize("name", list(VARIANTS))
def test_tool_calls_keep_their_arguments_and_results(name: str, tmp_path: Path) -> None:
    writer, _fmt, native_id = VARIANTS[name]
    got = _read(writer(tmp_path), None, native_id)
    for run_id, native in NATIVE.items():
        for mine, theirs in zip(got[run_id].events, native["events"], strict=True):
            if theirs["kind"] == "tool_call":
                assert (mine["name"], mine["args"]) == (theirs["name"], theirs["args"])
            if theirs["kind"] in ("tool_result", "model"):
                assert mine.get("text", "") == theirs.get("text", ""), run_id
                assert bool(mine.get("error")) == bool(theirs.get("error")), run_id


def test_the_conversions_cover_every_kind_of_native_event() -> None:
    kinds = {e["kind"] for r in RUNS for e in r["events"]}
    assert kinds == {"model", "tool_call", "tool_result", "span"}
    assert any(e.get("error") for r in RUNS for e in r["events"])
    assert any(e.get("parent") for r in RUNS for e in r["events"])


# -- a screenshot agent: the screen is the result ----------------------------------------
def _screenshot_run(blocks: Any) -> dict[str, Any]:
    """A computer-use agent scrolling an article: each action answered with a screenshot
    (content blocks, kept by the exporters as their JSON), the narration naming what is
    new on the screen."""
    events: list[dict[str, Any]] = [
        {"kind": "model", "text": "I will read the article about the harbour."}
    ]
    for i in range(6):
        call_id = f"s{i}"
        events += [
            {"kind": "model", "text": f"I can see section {i + 1}. Let me scroll further."},
            {"kind": "tool_call", "name": "computer", "id": call_id,
             "args": {"action": "scroll", "scroll_direction": "down", "scroll_amount": 5}},
            {"kind": "tool_result", "name": "computer", "id": call_id, "text": blocks},
        ]  # fmt: skip
    return {"run_id": "screenshots", "events": events, "meta": {"workflow_name": "screenshots"}}


# the pixels left out by the exporter, as most do: every screenshot reads the same
_SCREENSHOTS = {
    "anthropic-image": [{"type": "image", "source": {"type": "base64", "media_type": "image/png"}}],
    "openai-computer-screenshot": {"type": "computer_screenshot", "image_url": "<omitted>"},
    "langchain-image-url": [{"type": "image_url", "image_url": {"url": "<omitted>"}}],
}
_SCREENSHOT_WRITERS: dict[str, Callable[[dict[str, Any], Path], Path]] = {
    "native": lambda run, tmp: _lines(tmp / "native.jsonl", [run]),
    "otlp-genai": lambda run, tmp: _lines(tmp / "g.jsonl", tc.otlp_documents([run], "genai")),
    "otlp-openinference": lambda run, tmp: _lines(
        tmp / "oi.jsonl", [tc.otlp_hex(d) for d in tc.otlp_documents([run], "openinference")]
    ),
    "langsmith": lambda run, tmp: _lines(
        tmp / "ls.jsonl", [tc.langsmith_dict(r) for r in tc.langsmith_runs(run)]
    ),
    "langfuse": lambda run, tmp: _lines(tmp / "lf.jsonl", tc.langfuse_observations(run)),
    "openai-agents": lambda run, tmp: _lines(tmp / "oa.jsonl", tc.openai_agents_records([run])),
}


@pytest.mark.parametrize("shape", list(_SCREENSHOTS))
@pytest.mark.parametrize("writer", list(_SCREENSHOT_WRITERS))
def test_a_screenshot_result_is_unknown_in_every_format(
    shape: str, writer: str, tmp_path: Path
) -> None:
    """Six identical scrolls, each answered with a screenshot whose pixels the trace does
    not hold: not "the same arguments and the same result" six times (the screen is the
    result, and it is unknown), in the native format and in every export."""
    blocks = _SCREENSHOTS[shape]
    text = blocks if writer == "native" else json.dumps(blocks)
    path = _SCREENSHOT_WRITERS[writer](_screenshot_run(text), tmp_path)
    runs = [r for r in read_runs(str(path)) if isinstance(r, TraceRun)]
    assert len(runs) == 1
    events = runs[0].to_dict()["events"]
    results = [e for e in events if e["kind"] == "tool_result"]
    assert len(results) == 6
    # read as the guard and the scan read them: a result whose text is unknown
    assert not any(Event.from_dict(r).text_known for r in results), results
    report = scan(runs[0].to_dict(), Config())
    assert report.first_stop is None, report.to_dict()
    assert not any("same result" in f.message for f in report.findings)
    # the guard replaying the read run agrees with the scan, step for step
    guard = Guard(Config())
    actions = [guard.observe("replay", e).action for e in events]
    first_warn = next((i for i, a in enumerate(actions) if a != "ok"), None)
    assert ("stop" in actions, first_warn) == (False, report.first_warn)
    # the same run answered in text, the same each time, is six identical calls and results
    (tmp_path / "text").mkdir()
    limit = _screenshot_run("Already at the bottom of the page.")
    again = _SCREENSHOT_WRITERS[writer](limit, tmp_path / "text")
    rerun = next(r for r in read_runs(str(again)) if isinstance(r, TraceRun))
    assert scan(rerun.to_dict(), Config()).first_stop is not None
