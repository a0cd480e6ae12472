"""Input that loses nothing readable: garbage before, between and after runs (any
amount of it), foreign records, invalid UTF-8, odd arrays, broken first lines.
Each problem is one ``path:line: reason`` line; every intact run is read."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest
import traces_convert as tc
from conftest import load_scenarios

from loopwatch.cli import main
from loopwatch.traces import InputError, TraceRun, read_runs

RUNS = load_scenarios()[:3]
IDS = [r["run_id"] for r in RUNS]


def run_lines() -> list[str]:
    return [json.dumps(r) for r in RUNS]


def split(items: list[TraceRun | InputError]) -> tuple[list[TraceRun], list[InputError]]:
    return (
        [i for i in items if isinstance(i, TraceRun)],
        [i for i in items if isinstance(i, InputError)],
    )


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines))
    return path


@pytest.mark.parametrize("garbage", [64, 65, 200, 2500])
@pytest.mark.parametrize("forced", [None, "jsonl"])
def test_undecodable_lines_at_the_top_do_not_hide_the_runs(
    tmp_path: Path, garbage: int, forced: str | None
) -> None:
    path = write_lines(
        tmp_path / "t.jsonl", [f"oops {i} not json" for i in range(garbage)] + run_lines()
    )
    runs, errors = split(list(read_runs(str(path), forced)))
    assert [r.run_id for r in runs] == IDS
    assert [e.line for e in errors] == list(range(1, garbage + 1))  # each once, in order
    assert all(e.path == str(path) and "invalid JSON" in e.reason for e in errors)


@pytest.mark.parametrize("foreign", [64, 100, 1500])
def test_objects_that_are_not_runs_at_the_top_do_not_hide_the_runs(
    tmp_path: Path, foreign: int
) -> None:
    lines = [json.dumps({"a": i}) for i in range(foreign)] + run_lines()
    path = write_lines(tmp_path / "t.jsonl", lines)
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == IDS
    assert [e.line for e in errors] == list(range(1, foreign + 1))


def test_garbage_between_and_after_runs_is_reported_once_per_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = run_lines()
    lines.insert(1, "{broken")
    lines.insert(3, "\x00\x01 binary")
    lines.append('{"run_id": "x", "events": [')
    path = write_lines(tmp_path / "t.jsonl", lines)
    assert main(["scan", "--json", str(path)]) == 0  # malformed lines do not change the status
    captured = capsys.readouterr()
    assert [json.loads(line)["run_id"] for line in captured.out.splitlines()] == IDS
    err = captured.err.splitlines()
    assert [line.split(": ")[0] for line in err] == [f"{path}:2", f"{path}:4", f"{path}:6"]


def test_invalid_utf8_is_reported_and_the_run_kept(tmp_path: Path) -> None:
    run = {"run_id": "u", "events": [{"kind": "model", "text": "caf\u00e9 PLACEHOLDER"}]}
    raw = json.dumps(run, ensure_ascii=False).encode().replace(b"PLACEHOLDER", b"\xff\xfe")
    path = tmp_path / "t.jsonl"
    path.write_bytes(json.dumps(RUNS[0]).encode() + b"\n" + raw + b"\n")
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == [RUNS[0]["run_id"], "u"]
    assert runs[1].events[0]["text"] == "caf\u00e9 \ufffd\ufffd"
    assert len(errors) == 1 and errors[0].line == 2 and "invalid UTF-8" in errors[0].reason


def test_odd_arrays_are_one_error_each(tmp_path: Path) -> None:
    lines = [*run_lines()[:1], "[]", "[1,2,3]", json.dumps([RUNS[1], 7, RUNS[2]])]
    path = write_lines(tmp_path / "t.jsonl", lines)
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == IDS
    assert [e.line for e in errors] == [2, 3, 4]
    assert "empty array" in errors[0].reason
    assert "3" in errors[1].reason and "more" in errors[1].reason
    assert "item 1" in errors[2].reason


def test_a_broken_first_line_does_not_turn_json_lines_into_a_document(tmp_path: Path) -> None:
    lines = ['{"run_id": "cut", "events": [{"kind":'] + [
        json.dumps(r) for r in load_scenarios()[:12]
    ]
    path = write_lines(tmp_path / "t.jsonl", lines)
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == [r["run_id"] for r in load_scenarios()[:12]]
    assert len(errors) == 1 and errors[0].line == 1


def test_a_byte_order_mark_is_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + "".join(line + "\n" for line in run_lines()).encode())
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == IDS and not errors


def test_a_pretty_printed_array_of_runs_is_still_one_document(tmp_path: Path) -> None:
    path = tmp_path / "runs.json"
    path.write_text("[\n" + ",\n".join(json.dumps(r) for r in RUNS) + "\n]\n")
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == IDS and not errors
    path.write_text(json.dumps(RUNS, indent=2))
    runs, errors = split(list(read_runs(str(path), "jsonl")))
    assert [r.run_id for r in runs] == IDS and not errors


def test_a_file_with_no_trace_in_it_is_one_error_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    notes = write_lines(tmp_path / "notes.txt", ["just some text", "more text"])
    objects = write_lines(tmp_path / "objects.jsonl", [json.dumps({"a": i}) for i in range(70)])
    good = write_lines(tmp_path / "good.jsonl", run_lines())
    assert main(["scan", "--json", str(notes), str(objects), str(good)]) == 2
    captured = capsys.readouterr()
    assert [json.loads(line)["run_id"] for line in captured.out.splitlines()] == IDS
    err = captured.err.splitlines()
    assert len(err) == 2
    assert err[0].startswith(f"{notes}: ") and err[1].startswith(f"{objects}: ")
    assert "70" in err[1] and "--format" in err[1]


def test_a_corrupt_gzip_releases_the_runs_its_reader_was_holding(tmp_path: Path) -> None:
    """Span readers hold a run until it is complete; a read error mid-file must not
    swallow the runs already whole in memory."""
    runs = load_scenarios()[:6]
    docs = [tc.otlp_hex(d) for d in tc.otlp_documents(runs, "genai")]
    body = "".join(json.dumps(d) + "\n" for d in docs).encode()
    whole = tmp_path / "whole.jsonl"
    whole.write_bytes(body)
    expected, _ = split(list(read_runs(str(whole))))
    gz = gzip.compress(body + b"x" * 200_000)  # garbage after the runs, then the cut
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz[: len(gz) - 40])
    got, errors = split(list(read_runs(str(cut))))
    assert [r.run_id for r in got] == [r.run_id for r in expected]
    assert errors and errors[-1].line is None and "read failed" in errors[-1].reason


def test_a_reader_that_trips_over_one_record_loses_that_record_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from loopwatch.traces import sniff

    real = sniff.parse_run

    def fragile(obj: Any, path: str = "", line: int | None = None) -> Any:
        if isinstance(obj, dict) and obj.get("run_id") == IDS[1]:
            raise KeyError("simulated bug")
        return real(obj, path, line)

    monkeypatch.setattr(sniff, "parse_run", fragile)
    path = write_lines(tmp_path / "t.jsonl", run_lines())
    runs, errors = split(list(read_runs(str(path))))
    assert [r.run_id for r in runs] == [IDS[0], IDS[2]]
    assert len(errors) == 1 and errors[0].line == 2 and "KeyError" in errors[0].reason


def test_json_that_orjson_refuses_is_still_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call = (
        '{"kind":"tool_call","name":"s","args":{"q":"\\ud800","n":123456789012345678901234567890}}'
    )
    result = '{"kind":"tool_result","name":"s","text":"no match"}'
    lonely = '{"run_id":"lone\\udc00","events":[' + ",".join([call, result] * 6) + "]}"
    path = write_lines(tmp_path / "t.jsonl", [lonely, *run_lines()])
    assert main(["scan", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    reports = [json.loads(line) for line in captured.out.splitlines()]
    assert [r["run_id"] for r in reports] == ["lone\ufffd", *IDS]
    # six identical calls read (arguments and all), each with the same short result: the
    # defaults tell the 3rd call (event 4) and stop the 4th (event 6)
    assert (reports[0]["verdict"], reports[0]["first_warn"]) == ("stop", 4)
    assert reports[0]["first_stop"] == 6
    assert captured.err.startswith(f"{path}:1: ") and "surrogate" in captured.err
    assert len(captured.err.splitlines()) == 1


def test_a_read_error_after_garbage_is_one_file_error_and_the_lines_before_it(
    tmp_path: Path,
) -> None:
    body = b"not json\n" * 3 + b"y" * 300_000
    gz = gzip.compress(body)
    cut = tmp_path / "cut.jsonl.gz"
    cut.write_bytes(gz[: len(gz) - 40])
    _, errors = split(list(read_runs(str(cut))))
    assert [e.line for e in errors] == [1, 2, 3, None]
    assert [e.whole_file for e in errors] == [False, False, False, True]
    assert "read failed" in errors[-1].reason
