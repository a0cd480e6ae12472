"""The command line: FORMAT.md output, input errors, exit codes, config and demo."""

from __future__ import annotations

import gzip
import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA, load_scenarios
from runs import tool

from loopwatch import Config, scan
from loopwatch.cli import main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def write_runs(
    path: Path, runs: list[dict[str, Any]], extra_lines: dict[int, str] | None = None
) -> None:
    lines = [json.dumps(r) for r in runs]
    for index, text in sorted((extra_lines or {}).items()):
        lines.insert(index, text)
    path.write_text("\n".join(lines) + "\n")


def json_lines(out: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_scan_json_matches_the_python_api_in_input_order(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["scan", "--json", str(DATA / "conformance.jsonl")]) == 0
    got = json_lines(capsys.readouterr().out)
    runs = load_scenarios()
    assert [g["run_id"] for g in got] == [r["run_id"] for r in runs]
    for line, run in zip(got, runs, strict=True):
        assert line == scan(run, Config()).to_dict()
        assert set(line) == {
            "run_id",
            "verdict",
            "score",
            "first_warn",
            "first_stop",
            "findings",
            "metrics",
        }
        assert set(line["metrics"]) >= {
            "iteration_count", "empty_outputs", "terminated_coherently",
            "efficiency_ratio", "degenerate_loop", "max_iterations_hit",
        }  # fmt: skip


def test_malformed_lines_are_reported_and_the_rest_is_scanned(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = load_scenarios()[:3]
    path = tmp_path / "mixed.jsonl"
    write_runs(path, runs, {1: "{not json", 3: '{"events": []}', 4: '{"run_id": "x"}'})
    assert main(["scan", "--json", str(path)]) == 0
    captured = capsys.readouterr()
    assert [r["run_id"] for r in json_lines(captured.out)] == [r["run_id"] for r in runs]
    errors = captured.err.strip().splitlines()
    assert errors[0].startswith(f"{path}:2: invalid JSON")
    assert errors[1].startswith(f"{path}:4: ") and "run_id" in errors[1]
    assert errors[2].startswith(f"{path}:5: ") and "events" in errors[2]


def test_fail_on_sets_the_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    looping: list[dict[str, Any]] = []
    for _ in range(6):
        looping += tool("search", {"q": "x"}, "same")
    path = tmp_path / "runs.jsonl"
    write_runs(path, [{"run_id": "loop", "events": looping}, {"run_id": "fine", "events": []}])
    assert main(["scan", "--json", str(path)]) == 0
    assert main(["scan", "--json", "--fail-on", "stop", str(path)]) == 1
    assert main(["scan", "--json", "--fail-on", "warn", str(path)]) == 1
    write_runs(path, [{"run_id": "fine", "events": []}])
    assert main(["scan", "--json", "--fail-on", "warn", str(path)]) == 0
    capsys.readouterr()


def test_unreadable_input_and_usage_errors_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan", "--json", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    # one unreadable file among readable ones: the others are scanned, exit is still 2
    good = tmp_path / "good.jsonl"
    write_runs(good, load_scenarios()[:2])
    assert main(["scan", "--json", str(tmp_path / "missing.jsonl"), str(good)]) == 2
    captured = capsys.readouterr()
    assert len(json_lines(captured.out)) == 2 and "missing.jsonl" in captured.err
    with pytest.raises(SystemExit) as exc:
        main(["scan", "--fail-on", "sometimes", "x"])
    assert exc.value.code == 2
    assert main([]) == 2


def test_stdin_and_gzip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = load_scenarios()[:2]
    data = "".join(json.dumps(r) + "\n" for r in runs).encode()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["scan", "--json", "-"]) == 0
    from_stdin = json_lines(capsys.readouterr().out)
    gz = tmp_path / "runs.jsonl.gz"
    gz.write_bytes(gzip.compress(data))
    assert main(["scan", "--json", str(gz)]) == 0
    assert json_lines(capsys.readouterr().out) == from_stdin
    assert [r["run_id"] for r in from_stdin] == [r["run_id"] for r in runs]


def test_parallel_scan_keeps_input_order(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from loopwatch.scan import Report, scan_stream
    from loopwatch.traces import read_runs

    runs = load_scenarios() * 40
    for i, r in enumerate(runs):
        r["run_id"] = f"{r['run_id']}#{i}"
    path = tmp_path / "many.jsonl"
    write_runs(path, runs, {10: "garbage"})
    serial = list(scan_stream(read_runs(str(path)), Config(), jobs=1))
    parallel = list(scan_stream(read_runs(str(path)), Config(), jobs=2))
    assert [getattr(x, "run_id", str(x)) for x in parallel] == [
        getattr(x, "run_id", str(x)) for x in serial
    ]
    assert [x.to_dict() for x in parallel if isinstance(x, Report)] == [
        x.to_dict() for x in serial if isinstance(x, Report)
    ]


def test_human_table(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(DATA / "conformance.jsonl")]) == 0
    out = capsys.readouterr().out
    assert "A-exact-repeat" in out and "repeated_call" in out
    assert "stop" in out and "ok" in out


def test_config_file_changes_the_scan_and_config_prints_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    conf = tmp_path / "loopwatch.toml"
    conf.write_text('on_loop = "warn"\n[repeated_call]\nwarn_at = 2\n')
    assert main(["scan", "--json", "--config", str(conf), str(DATA / "conformance.jsonl")]) == 0
    lines = {r["run_id"]: r for r in json_lines(capsys.readouterr().out)}
    assert lines["A-exact-repeat"]["first_stop"] is None  # on_loop = warn never stops
    assert lines["A-exact-repeat"]["first_warn"] == 4  # warn at the 2nd identical call
    assert main(["config", "--config", str(conf)]) == 0
    shown = tomllib.loads(capsys.readouterr().out)
    assert shown["on_loop"] == "warn" and shown["repeated_call"]["warn_at"] == 2
    # What `config` prints is itself a valid configuration with the same effect.
    again = Config.from_mapping(shown)
    assert again.to_dict() == Config.load(conf).to_dict()
    conf.write_text("[repeated_call]\nwarn_after = 2\n")
    assert main(["scan", "--json", "--config", str(conf), str(DATA / "conformance.jsonl")]) == 2
    assert "warn_after" in capsys.readouterr().err


def test_demo_runs(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    # wide enough for whole run ids: at 80 columns the table shortens them (its own test)
    monkeypatch.setenv("COLUMNS", "160")
    assert main(["demo"]) == 0
    out = capsys.readouterr().out
    assert "research-alternation-loop" in out
    assert "stopped the run" in out and "warn" in out
