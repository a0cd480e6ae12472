"""Nothing reads as a clean scan unless it was read: empty inputs, files whose events
are not FORMAT.md events, and the table and explain outputs a script reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA

from loopwatch import Config, InputError
from loopwatch.cli import main
from loopwatch.traces.sniff import native_ranges

scan_module = sys.modules["loopwatch.scan"]  # loopwatch.scan is the function

# a looping run: the same call, the same result (stopped at its 3rd call)
LOOP = [
    {"kind": "tool_call", "name": "search", "args": {"q": "x"}},
    {"kind": "tool_result", "name": "search", "text": "nothing new"},
] * 6


def write(path: Path, *runs: dict[str, Any]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in runs))
    return path


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, list[str]]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err.splitlines()


@pytest.mark.parametrize("content", ["", "\n\n  \n"])
def test_an_empty_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str
) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text(content)
    code, out, err = run_cli(capsys, "scan", str(path))
    assert (code, out, err) == (2, "", [f"{path}: empty file: no trace in it"])


def test_an_empty_directory_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("not a trace")
    code, out, err = run_cli(capsys, "scan", "--json", str(tmp_path))
    assert code == 2 and out == "" and len(err) == 1
    assert err[0].startswith(f"{tmp_path}: no trace files in this directory (looked for *.jsonl")


def test_an_empty_input_does_not_hide_the_others(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    loop = write(tmp_path / "loop.jsonl", {"run_id": "r", "events": LOOP})
    code, out, err = run_cli(capsys, "scan", "--json", str(empty), str(loop))
    assert code == 2 and [json.loads(line)["verdict"] for line in out.splitlines()] == ["stop"]
    assert err == [f"{empty}: empty file: no trace in it"]


def test_a_file_of_foreign_events_is_not_ok(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Misspelled kinds and other tools' field names: a looping run the scan cannot
    see. One line names what was not understood, and exit 2 says nothing was."""
    foreign = [{"type": "tool_call", "tool": "search", "arguments": {"q": "x"}}] * 4
    typo = [{"kind": "tool-call", "name": "search", "args": {"q": "x"}}] * 4
    path = write(tmp_path / "t.jsonl", {"run_id": "a", "events": foreign + typo})
    for fail_on in ([], ["--fail-on", "stop"]):
        code, _, err = run_cli(capsys, "scan", "--json", *fail_on, str(path))
        assert code == 2 and len(err) == 1, err
        line = err[0]
        assert line.startswith(f"{path}: nothing in this file was understood")
        assert "4 without 'kind' (fields: arguments, tool, type)" in line
        assert "4 with kind 'tool-call' (fields: args, name)" in line


def test_a_file_partly_understood_gets_one_warning_and_is_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    typo = {"kind": "tool-call", "name": "search", "args": {"q": "y"}}
    named = {"kind": "tool_call", "tool": "search", "arguments": {"q": "y"}}
    output = {"kind": "model", "content": "the answer"}
    runs = [{"run_id": f"r{i}", "events": [*LOOP, typo, named, output]} for i in range(3)]
    path = write(tmp_path / "t.jsonl", *runs)
    code, out, err = run_cli(capsys, "scan", "--json", str(path))
    assert code == 0 and [json.loads(x)["verdict"] for x in out.splitlines()] == ["stop"] * 3
    assert len(err) == 1, err  # one line for the file, not one per run or per event
    total = 3 * (len(LOOP) + 3)
    assert err[0].startswith(f"{path}: 9 of {total} events are not FORMAT.md events")
    for part in ("3 with kind 'tool-call'", "3 'tool_call' without 'name'", "'model' without"):
        assert part in err[0]


def test_the_parallel_scan_reports_a_file_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers read a big native file in ranges; the file still gets one line, with
    the counts of all its ranges, after its last run."""
    monkeypatch.setattr(scan_module, "_RANGE_BYTES", 400)
    typo = {"kind": "tool-call", "name": "search"}
    runs = [{"run_id": f"r{i}", "events": [*LOOP, typo]} for i in range(40)]
    path = write(tmp_path / "t.jsonl", *runs)
    assert len(native_ranges(str(path), 400) or []) > 5
    for jobs in (1, 2):
        items = list(scan_module.scan_paths([str(path)], Config(), jobs))
        errors = [x for x in items if isinstance(x, InputError)]
        assert [x.run_id for x in items[:-1]] == [f"r{i}" for i in range(40)]  # type: ignore[union-attr]
        assert errors == [items[-1]] and not errors[0].whole_file
        assert str(errors[0]).startswith(f"{path}: 40 of {40 * (len(LOOP) + 1)} events")


def test_events_that_say_their_text_is_unknown_are_understood(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    events = [
        {"kind": "tool_call", "name": "s", "unknown": ["args"]},
        {"kind": "tool_result", "name": "s", "unknown": ["text"]},
        {"kind": "model"},  # an output not recorded, nothing else said
        {"kind": "user", "text": "hi", "ts": 3},
    ]
    path = write(tmp_path / "t.jsonl", {"run_id": "a", "events": events})
    assert run_cli(capsys, "scan", "--json", str(path))[0::2] == (0, [])


def test_the_scenarios_are_understood(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "scan", "--json", str(DATA))
    assert (code, err) == (0, [])


def test_explain_with_json_is_one_json_object(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path / "t.jsonl", {"run_id": "loop", "events": LOOP})
    code, out, _ = run_cli(capsys, "scan", "--json", "--explain", "loop", str(path))
    (line,) = out.splitlines()
    got = json.loads(line)
    assert code == 0 and got["run_id"] == "loop" and got["verdict"] == "stop"
    assert [e["step"] for e in got["timeline"]] == list(range(len(LOOP)))
    assert got["timeline"][got["first_stop"]]["mark"] == "stop"
    # the first warning is marked "warn", unless it is the stop itself (no warning first)
    first_warn_mark = "stop" if got["first_warn"] == got["first_stop"] else "warn"
    assert got["timeline"][got["first_warn"]]["mark"] == first_warn_mark
    cited = {s for f in got["findings"] for s in f["steps"]}
    assert {e["step"] for e in got["timeline"] if e["evidence"]} == cited
    assert got["timeline"][0]["summary"].startswith("search(")


def test_the_piped_table_honours_columns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path / "t.jsonl", {"run_id": "loop", "events": LOOP})
    widths = {}
    for columns in ("72", "130", None):
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        code, out, _ = run_cli(capsys, "scan", str(path))
        assert code == 0
        assert any(line.strip() == "loopwatch scan: 1 run" for line in out.splitlines())
        widths[columns] = max(len(line) for line in out.splitlines())
    assert 60 < widths["72"] <= 72 < widths["130"] <= 130 < widths[None] <= 160
