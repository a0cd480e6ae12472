"""Hostile input through the real command line: the exit-status contract, corrupt
files among good ones, and argument values too deep for a recursive walk."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwatch import Config, Guard, scan
from loopwatch.cli import main
from loopwatch.events import Event
from loopwatch.scan import Report, ScanFailure, Scanner, scan_stream
from loopwatch.traces import read_runs

DEPTH = 500


def looping_run(run_id: str, args: Any = None, times: int = 6) -> dict[str, Any]:
    events: list[dict[str, Any]] = []
    for _ in range(times):
        events.append({"kind": "tool_call", "name": "search", "args": args or {"q": "x"}})
        events.append({"kind": "tool_result", "name": "search", "text": "same"})
    return {"run_id": run_id, "events": events}


def clean_run(run_id: str) -> dict[str, Any]:
    return {"run_id": run_id, "events": [{"kind": "model", "text": "done"}]}


def write(path: Path, runs: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return path


def deep_json(depth: int, leaf: str = "1") -> str:
    return '{"k":' * depth + leaf + "}" * depth


def deep_run_line(run_id: str, leaf: str = "1", times: int = 6) -> str:
    call = '{"kind":"tool_call","name":"search","args":' + deep_json(DEPTH, leaf) + "}"
    result = '{"kind":"tool_result","name":"search","text":"same"}'
    events = ",".join([call, result] * times)
    return '{"run_id":"' + run_id + '","events":[' + events + "]}"


def run_ids(out: str) -> list[str]:
    return [json.loads(line)["run_id"] for line in out.splitlines() if line.strip()]


# -- exit status ---------------------------------------------------------------------
def test_exit_0_when_clean_and_1_only_when_fail_on_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clean = write(tmp_path / "clean.jsonl", [clean_run("a"), clean_run("b")])
    looping = write(tmp_path / "loop.jsonl", [looping_run("l")])
    assert main(["scan", "--json", str(clean)]) == 0
    assert main(["scan", "--json", "--fail-on", "warn", str(clean)]) == 0
    assert main(["scan", "--json", str(looping)]) == 0  # findings alone do not fail
    assert main(["scan", "--json", "--fail-on", "stop", str(looping)]) == 1
    assert capsys.readouterr().err == ""


def test_corrupt_gzip_among_good_files_is_reported_and_the_rest_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = write(tmp_path / "first.jsonl", [looping_run("first")])
    data = bytearray(gzip.compress(json.dumps(clean_run("lost")).encode() * 50))
    for i in range(20, 60):  # inside the deflate stream
        data[i] ^= 0xFF
    bad = tmp_path / "bad.jsonl.gz"
    bad.write_bytes(bytes(data))
    last = write(tmp_path / "last.jsonl", [looping_run("last")])
    code = main(["scan", "--json", "--fail-on", "stop", str(first), str(bad), str(last)])
    captured = capsys.readouterr()
    assert code == 2  # unreadable input outranks --fail-on
    assert run_ids(captured.out) == ["first", "last"]
    assert captured.err.startswith(f"{bad}: ")
    assert len(captured.err.strip().splitlines()) == 1
    assert "Traceback" not in captured.err


def test_truncated_gzip_keeps_the_runs_before_the_cut(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    whole = gzip.compress(
        b"".join(json.dumps(clean_run(f"r{i}")).encode() + b"\n" for i in range(200))
    )
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(whole[: len(whole) * 2 // 3])
    assert main(["scan", "--json", str(cut)]) == 2
    captured = capsys.readouterr()
    ids = run_ids(captured.out)
    assert ids and ids == [f"r{i}" for i in range(len(ids))]
    assert captured.err.startswith(f"{cut}: ") and "Traceback" not in captured.err


def test_a_run_that_cannot_be_scanned_costs_that_run_only(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "runs.jsonl", [clean_run("a"), clean_run("boom"), clean_run("c")])
    real = Scanner.scan

    def flaky(self: Scanner, run: Any, run_id: str | None = None) -> Report:
        if run.get("run_id") == "boom":
            raise ZeroDivisionError("simulated bug")
        return real(self, run, run_id)

    monkeypatch.setattr(Scanner, "scan", flaky)
    assert main(["scan", "--json", str(path)]) == 2
    captured = capsys.readouterr()
    assert run_ids(captured.out) == ["a", "c"]
    assert captured.err.startswith(f"{path}:2: run 'boom' could not be scanned")
    assert "ZeroDivisionError" in captured.err and "Traceback" not in captured.err


# -- deep arguments ------------------------------------------------------------------
def test_arguments_nested_500_deep_are_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.jsonl"
    path.write_text(deep_run_line("deep") + "\n" + json.dumps(clean_run("after")) + "\n")
    assert main(["scan", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    reports = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["run_id"] for r in reports] == ["deep", "after"]
    assert reports[0]["verdict"] == "stop"  # the same deep call six times is a loop
    assert captured.err == ""


def test_deep_runs_are_scanned_with_several_jobs(tmp_path: Path) -> None:
    path = tmp_path / "deep.jsonl"
    lines = [deep_run_line(f"d{i}") for i in range(40)]
    lines.insert(20, json.dumps(looping_run("shallow")))
    path.write_text("\n".join(lines) + "\n")
    serial = list(scan_stream(read_runs(str(path)), Config(), jobs=1))
    parallel = list(scan_stream(read_runs(str(path)), Config(), jobs=2))
    assert all(isinstance(r, Report) for r in parallel)
    assert [r.to_dict() for r in parallel] == [r.to_dict() for r in serial]  # type: ignore[union-attr]
    assert len(parallel) == 41 and {r.verdict for r in parallel} == {"stop"}  # type: ignore[union-attr]


def test_deep_values_that_differ_at_the_bottom_are_different_calls() -> None:
    one = Event.from_dict(
        {"kind": "tool_call", "name": "s", "args": json.loads(deep_json(DEPTH, "1"))}
    )
    two = Event.from_dict(
        {"kind": "tool_call", "name": "s", "args": json.loads(deep_json(DEPTH, "2"))}
    )
    again = Event.from_dict(
        {"kind": "tool_call", "name": "s", "args": json.loads(deep_json(DEPTH, "1"))}
    )
    assert one.call_key != two.call_key and one.norm_key != two.norm_key
    assert one.call_key == again.call_key and one.norm_key == again.norm_key
    # alternating two deep calls is not "the same call six times"
    events = []
    for i in range(6):
        events.append(
            {"kind": "tool_call", "name": "s", "args": json.loads(deep_json(DEPTH, str(i)))}
        )
    report = scan({"run_id": "r", "events": events}, Config())
    assert not any(f.detector == "repeated_call" for f in report.findings)


def test_cyclic_arguments_from_python_do_not_break_the_guard() -> None:
    args: dict[str, Any] = {"q": "x"}
    args["self"] = args
    args["list"] = [args, args]
    guard = Guard(Config())
    verdicts = []
    for _ in range(6):
        verdicts.append(guard.observe("r", {"kind": "tool_call", "name": "s", "args": args}))
        verdicts.append(guard.observe("r", {"kind": "tool_result", "name": "s", "text": "same"}))
    assert all("error" not in v.extra for v in verdicts)
    assert verdicts[-2].action == "stop"


# -- findings bounded by patterns ----------------------------------------------------
def test_a_long_loop_is_one_finding_per_pattern_not_one_per_event(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = looping_run("long", times=10_000)  # 20,000 events
    path = write(tmp_path / "long.jsonl", [run])
    assert main(["scan", "--json", str(path)]) == 0
    out = capsys.readouterr().out
    assert len(out) < 10_000  # was 5.9 MB: every later event repeated the stop
    report = json.loads(out)
    keys = [(f["detector"], f["severity"], f["message"]) for f in report["findings"]]
    assert len(keys) == len(set(keys))
    stops = [f for f in report["findings"] if f["severity"] == "stop"]
    assert stops and stops[0]["step"] == report["first_stop"]
    assert max(f["last_step"] for f in stops) == 19_999  # the last event
    assert sum(f["count"] for f in report["findings"]) > 9_000
    guard = Guard(Config())
    reported = sum(len(guard.observe("r", ev).findings) for ev in run["events"])
    assert sum(f["count"] for f in report["findings"]) == reported


def test_a_broken_document_among_good_files_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps([looping_run("in-doc")], indent=2)[:-40])  # cut short
    good = write(tmp_path / "good.jsonl", [clean_run("a")])
    assert main(["scan", "--json", str(doc), str(good)]) == 2
    captured = capsys.readouterr()
    assert run_ids(captured.out) == ["a"]
    assert captured.err.startswith(f"{doc}:") and len(captured.err.splitlines()) == 1


def test_a_bad_record_in_a_readable_document_does_not_fail_the_scan(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = tmp_path / "doc.json"
    doc.write_text(json.dumps([clean_run("a"), {"run_id": "no-events"}], indent=2))
    assert main(["scan", "--json", str(doc)]) == 0
    captured = capsys.readouterr()
    assert run_ids(captured.out) == ["a"] and "no-events" in captured.err


@pytest.mark.skipif(sys.platform == "darwin", reason="workers are spawned there, not forked")
def test_a_run_that_fails_in_a_worker_process_costs_that_run_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "runs.jsonl", [looping_run(f"r{i}") for i in range(30)])
    real = Scanner.scan

    def flaky(self: Scanner, run: Any, run_id: str | None = None) -> Report:
        if run.get("run_id") == "r7":
            raise ZeroDivisionError("simulated bug")
        return real(self, run, run_id)

    monkeypatch.setattr(Scanner, "scan", flaky)  # workers are forked: they inherit it
    items = list(scan_stream(read_runs(str(path)), Config(), jobs=2))
    assert [type(i).__name__ for i in items].count("ScanFailure") == 1
    failure = items[7]
    assert isinstance(failure, ScanFailure) and failure.line == 8
    assert "r7" in failure.reason and "ZeroDivisionError" in failure.reason
    assert [i.run_id for i in items if isinstance(i, Report)] == [
        f"r{i}" for i in range(30) if i != 7
    ]


@pytest.mark.parametrize("reader", ["files", "stream"])
def test_a_scan_worker_that_dies_loses_no_run_and_the_scan_ends(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, reader: str
) -> None:
    """A worker process killed mid-scan (out of memory, a crash in native code) must
    not hang the scan or lose the runs it held: they are scanned in the main process
    (with a warning), and the output is the serial scan's. With multiprocessing.Pool
    the dead worker's result never arrived and the scan waited forever."""
    import os
    import signal

    scan_module = sys.modules["loopwatch.scan"]  # the package's `scan` is the function

    parent = os.getpid()
    real_scan = scan_module.Scanner.scan

    def dies_in_a_worker(self: Scanner, run: Any, run_id: str | None = None) -> Any:
        if os.getpid() != parent and isinstance(run, dict) and run.get("run_id") == "victim":
            os._exit(9)  # the worker process dies at once, as if killed
        return real_scan(self, run, run_id)

    runs = [looping_run(f"r{i}") if i % 2 else clean_run(f"r{i}") for i in range(30)]
    runs.insert(7, looping_run("victim"))
    path = tmp_path / "runs.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    serial = [r.to_dict() for r in scan_module.scan_paths([str(path)], Config())]  # type: ignore[union-attr]

    monkeypatch.setattr(scan_module.Scanner, "scan", dies_in_a_worker)
    signal.signal(signal.SIGALRM, signal.default_int_handler)
    signal.alarm(120)  # a hang fails the test (KeyboardInterrupt) instead of the suite
    try:
        if reader == "files":
            parallel = list(scan_module.scan_paths([str(path)], Config(), jobs=2))
        else:
            parallel = list(scan_stream(read_runs(str(path)), Config(), jobs=2))
    finally:
        signal.alarm(0)
    assert all(isinstance(r, Report) for r in parallel)
    assert [r.to_dict() for r in parallel] == serial  # type: ignore[union-attr]
    assert len(serial) == 31
    if reader == "files":
        assert "the main process reads it instead" in caplog.text
