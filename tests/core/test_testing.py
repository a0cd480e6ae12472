"""loopwatch.testing: ``assert_no_loops`` over recorded runs (the bundled examples,
generated runs, every input it takes and the input it refuses), and the record a
``RecordedGuard`` keeps. Detectors are pinned: these tests do not move with the
defaults."""

from __future__ import annotations

import asyncio
import gzip
import threading
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch import Config, Guard, RepeatedCall, TraceRun, read_runs, scan
from loopwatch.testing import LoopRecord, RecordedGuard, assert_no_loops

EXAMPLES = resources.files("loopwatch") / "examples" / "agents.jsonl"


def pinned(warn_at: int = 2, stop_at: int | None = 3) -> list[RepeatedCall]:
    return [
        RepeatedCall(warn_at=warn_at, stop_at=stop_at, window_warn_at=None, window_stop_at=None)
    ]


def repeats(run_id: str, times: int, result: str = "18C, cloudy") -> dict[str, Any]:
    """A run that calls search with the same argument ``times`` times."""
    events: list[dict[str, Any]] = []
    for i in range(times):
        events.append(
            {"kind": "tool_call", "name": "search", "args": {"q": "paris"}, "id": f"c{i}"}
        )
        events.append({"kind": "tool_result", "name": "search", "id": f"c{i}", "text": result})
    return {"run_id": run_id, "events": events}


# -- the bundled examples ----------------------------------------------------------------------
def test_the_bundled_examples_fail_naming_each_looping_run_with_its_evidence() -> None:
    runs = [r for r in read_runs(str(EXAMPLES)) if isinstance(r, TraceRun)]
    reports = {r.run_id: scan(r, detectors=pinned()) for r in runs}
    looping = [rid for rid, rep in reports.items() if rep.verdict == "stop"]
    clean = [rid for rid, rep in reports.items() if rep.verdict == "ok"]
    assert looping and clean  # the examples hold both, with RepeatedCall alone

    with pytest.raises(AssertionError) as failed:
        assert_no_loops(str(EXAMPLES), detectors=pinned())
    message = str(failed.value)
    assert message.startswith(f"loopwatch: {len(looping)} of {len(runs)} runs in {EXAMPLES} looped")
    for run in runs:
        rep = reports[run.run_id]
        if run.run_id in looping:
            top = rep.top_finding
            assert top is not None
            assert (
                f"run {run.run_id!r} ({run.path}:{run.line}): stop, "
                f"first warn at step {rep.first_warn}, first stop at step {rep.first_stop}"
            ) in message
            steps = ", ".join(str(s) for s in top.steps[:12])
            assert f"{top.detector} (stop) at step {top.step}, evidence steps {steps}: " in message
            assert top.message in message
        else:
            assert f"run {run.run_id!r}" not in message


def test_the_clean_examples_pass_and_the_reports_come_back() -> None:
    runs = [r for r in read_runs(str(EXAMPLES)) if isinstance(r, TraceRun)]
    clean = [r for r in runs if scan(r, detectors=pinned()).verdict == "ok"]
    reports = assert_no_loops(clean, detectors=pinned())
    assert [r.run_id for r in reports] == [r.run_id for r in clean]
    assert all(r.verdict == "ok" for r in reports)


def test_fail_on_warn_also_fails_a_run_that_was_only_warned() -> None:
    warned = repeats("r-warned", 2)
    assert assert_no_loops([warned], detectors=pinned(stop_at=None))[0].verdict == "warn"
    with pytest.raises(AssertionError, match=r"run 'r-warned': warn, first warn at step 2"):
        assert_no_loops([warned], fail_on="warn", detectors=pinned(stop_at=None))


def test_a_sure_detector_fails_under_on_loop_warn_too(tmp_path: Path) -> None:
    """``on_loop = "warn"`` turns every finding into a warning: the scan never says
    stop; a stop-severity finding still counts as a loop for fail_on='stop'."""
    config = tmp_path / "loopwatch.toml"
    config.write_text('on_loop = "warn"\n')
    with pytest.raises(AssertionError, match=r"run 'r1': stop"):
        assert_no_loops([repeats("r1", 4)], config=Config.load(config), detectors=pinned())


# -- generated runs ---------------------------------------------------------------------------
@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(min_value=0, max_value=6), st.sampled_from(["same", "moving"])),
        min_size=1,
        max_size=5,
    ),
    st.sampled_from(["warn", "stop"]),
)
def test_raises_exactly_when_a_run_reaches_fail_on(
    shapes: list[tuple[int, str]], fail_on: str
) -> None:
    runs = []
    for i, (times, kind) in enumerate(shapes):
        run = repeats(f"g{i}", times)
        if kind == "moving":  # a result that changes every time: progress, not a loop
            for n, ev in enumerate(e for e in run["events"] if e["kind"] == "tool_result"):
                ev["text"] = f"page {n}"
        runs.append(run)
    verdicts = {r["run_id"]: scan(r, detectors=pinned()).verdict for r in runs}
    rank = {"ok": 0, "warn": 1, "stop": 2}
    expected = [rid for rid, v in verdicts.items() if rank[v] >= rank[fail_on]]
    if expected:
        with pytest.raises(AssertionError) as failed:
            assert_no_loops(runs, fail_on=fail_on, detectors=pinned())
        for run_id in verdicts:
            assert (f"run {run_id!r}:" in str(failed.value)) == (run_id in expected)
    else:
        assert len(assert_no_loops(runs, fail_on=fail_on, detectors=pinned())) == len(runs)


# -- every input it takes, and what it refuses --------------------------------------------------
def test_it_takes_a_path_a_gzipped_file_a_folder_a_dict_a_trace_run_and_a_list(
    tmp_path: Path,
) -> None:
    data = EXAMPLES.read_bytes()
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "a.jsonl").write_bytes(data)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(data))
    first = next(r for r in read_runs(str(EXAMPLES)) if isinstance(r, TraceRun))
    for source in (tmp_path / "traces", str(tmp_path / "b.jsonl.gz")):
        with pytest.raises(AssertionError, match="looped"):
            assert_no_loops(source, detectors=pinned())
    clean = repeats("one", 1)
    assert [r.run_id for r in assert_no_loops(clean, detectors=pinned())] == ["one"]
    assert len(assert_no_loops([first.to_dict(), first], fail_on="stop", detectors=[])) == 2


def test_bad_lines_name_path_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "runs.jsonl"
    bad.write_text('{"run_id": "ok", "events": []}\n{not json\n{"events": []}\n')
    with pytest.raises(ValueError) as refused:
        assert_no_loops(bad)
    message = str(refused.value)
    assert f"{bad}:2: " in message and f"{bad}:3: " in message
    assert "run_id" in message


@pytest.mark.parametrize(
    ("given", "error", "words"),
    [
        ("/nowhere/runs.jsonl", ValueError, "/nowhere/runs.jsonl"),
        ([], ValueError, "no runs given"),
        (
            [{"run_id": "a", "events": []}, {"events": []}],
            ValueError,
            "runs[1]: run has no 'run_id'",
        ),
        (
            [{"run_id": "a", "events": []}, 42],
            ValueError,
            "runs[1]: expected a run dict or a TraceRun, got int",
        ),
        (42, TypeError, "not int"),
        (b"{}", TypeError, "not bytes"),
    ],
)
def test_input_that_is_not_runs_is_refused_clearly(given: Any, error: type, words: str) -> None:
    with pytest.raises(error) as refused:
        assert_no_loops(given)
    assert words in str(refused.value)


def test_an_empty_file_is_not_a_pass(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.jsonl"):
        assert_no_loops(empty)


@pytest.mark.parametrize("fail_on", ["never", "ok", "STOP", None])
def test_fail_on_is_checked(fail_on: Any) -> None:
    with pytest.raises(ValueError, match="fail_on must be 'warn' or 'stop'"):
        assert_no_loops([repeats("a", 1)], fail_on=fail_on)


# -- the record a RecordedGuard keeps -----------------------------------------------------------
@pytest.mark.parametrize("on_loop", ["stop", "skip", "warn"])
def test_recording_changes_no_verdict_and_keeps_what_the_scan_says(on_loop: str) -> None:
    plain = Guard(detectors=pinned(), on_loop=on_loop)
    recorded = RecordedGuard(detectors=pinned(), on_loop=on_loop)
    run = repeats("r", 6)
    for event in run["events"]:
        assert plain.observe("r", event) == recorded.observe("r", event)
    report = scan(run, config=recorded.config, detectors=pinned())
    [looped] = recorded.record.runs()
    assert looped.run_id == "r" and looped.verdict == "stop"
    assert looped.first_warn == report.first_warn
    if on_loop != "warn":  # under warn the scan has no first stop; the record says when it was sure
        assert looped.first_stop == report.first_stop
    assert [f.detector for f in looped.top_first()][:1] == ["repeated_call"]
    assert recorded.record.verdict == "stop"


def test_a_record_is_shared_and_thread_safe() -> None:
    record = LoopRecord()
    guards = [RecordedGuard(detectors=pinned(), record=record) for _ in range(4)]

    def drive(guard: RecordedGuard, n: int) -> None:
        for event in repeats(f"t{n}", 5)["events"]:
            guard.observe(f"t{n}", event)

    threads = [threading.Thread(target=drive, args=(g, n)) for n, g in enumerate(guards)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(r.run_id for r in record.runs()) == ["t0", "t1", "t2", "t3"]
    assert all(r.verdict == "stop" for r in record.runs())
    # a guard repeats its stop at every later step: one finding per loop, not per step
    assert all(len(r.findings) <= 2 for r in record.runs())


def test_the_async_path_records_too() -> None:
    guard = RecordedGuard(detectors=pinned())

    async def drive() -> None:
        for event in repeats("a", 4)["events"]:
            await guard.aobserve("a", event)

    asyncio.run(drive())
    assert guard.record.verdict == "stop"
