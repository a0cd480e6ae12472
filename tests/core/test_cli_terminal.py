"""The command line as a new user meets it: every subcommand answers ``--help`` (the
hook's answer on its fast path, importing neither the CLI nor the guard), and the
scan table stays readable in a narrow terminal: the top finding keeps its column,
the short columns their headers, and a long run id gives way first."""

from __future__ import annotations

import argparse
import contextlib
import io
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from _loopwatch_entry import main as entry
from loopwatch.cli import _HumanTable, _parser, main
from loopwatch.config import DETECTORS
from loopwatch.findings import Finding, Severity
from loopwatch.scan import Report

KNOWN = {"scan", "report", "hook", "install", "uninstall", "doctor", "config", "calibrate", "demo"}


def subcommands() -> list[str]:
    """Every subcommand the parser has, those added later included."""
    parser = _parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sorted(subs.choices)


def test_the_subcommands_are_found() -> None:
    assert set(subcommands()) >= KNOWN


@pytest.mark.parametrize("flag", ["--help", "-h"])
@pytest.mark.parametrize("command", subcommands())
def test_every_subcommand_answers_help_with_its_usage(command: str, flag: str) -> None:
    """Through the console script's entry point, as ``loopwatch COMMAND --help`` runs."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = entry([command, flag], exit_now=False)
        except SystemExit as done:  # argparse's help exits
            code = int(done.code or 0)
    assert code == 0, err.getvalue()
    assert out.getvalue().startswith(f"usage: loopwatch {command}")
    assert "-h, --help" in out.getvalue()
    assert err.getvalue() == ""


def test_hook_help_after_the_agent_too_and_from_the_cli_module() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert entry(["hook", "claude-code", "--help"], exit_now=False) == 0
        assert main(["hook", "-h"]) == 0
    text = out.getvalue()
    assert text.count("usage: loopwatch hook AGENT") == 2
    for agent in ("claude-code", "codex", "gemini-cli", "copilot-cli", "opencode", "cursor"):
        assert agent in text


def test_hook_help_stays_on_the_fast_path() -> None:
    """``loopwatch hook`` runs once per tool call: its help must not pull the CLI or
    the guard in either (a process of its own, as the console script runs it)."""
    probe = (
        "import sys, _loopwatch_entry\n"
        "code = _loopwatch_entry.main(['hook', '--help'], exit_now=False)\n"
        "loaded = [m for m in ('loopwatch.cli', 'loopwatch.guard', 'loopwatch.config') "
        "if m in sys.modules]\n"
        "print('CODE', code, 'LOADED', loaded)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == "CODE 0 LOADED []"
    command = [sys.executable, "-m", "_loopwatch_entry", "hook", "--help"]
    real = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert real.returncode == 0 and real.stdout.startswith("usage: loopwatch hook")


def test_an_unknown_agent_is_still_a_usage_error() -> None:
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        assert entry(["hook", "--nonsense"], exit_now=False) == 2
    assert "unknown agent '--nonsense'" in err.getvalue()


# -- the scan table in a narrow terminal --------------------------------------------------------
LONG_ID = "nightly-eval-2026-03-14/customer-support/ticket-000417-retry-3"
MESSAGE = (
    "You called lookup_order({'id': 417}) with the same arguments 3 times and got the "
    "same result each time."
)


def reports() -> list[Report]:
    finding = Finding("repeated_call", Severity.STOP, 12345, (3, 5, 12345), MESSAGE)
    return [
        Report(LONG_ID, "stop", 0.4, 3, 12345, [finding], {}),
        Report("short-run", "ok", 1.0, None, None, [], {}),
    ]


def render(width: int) -> list[str]:
    table = _HumanTable()
    for report in reports():
        table.add(report)
    out = io.StringIO()
    table.render(console=Console(file=out, width=width, color_system=None, force_terminal=False))
    return out.getvalue().splitlines()


def finding_column(lines: list[str]) -> str:
    """The text of the last column, all its lines, without whitespace."""
    cells = [line.split("│")[-2] for line in lines if line.count("│") >= 7]
    return "".join("".join(cells).split())


def check_readable(lines: list[str], width: int) -> None:
    assert all(len(line) <= width for line in lines), "\n".join(lines)
    head = "\n".join(line for line in lines if "┃" in line)
    for word in ("run", "verdict", "score", "first", "warn", "stop", "top finding"):
        assert word in head, (word, head)
    assert "…" not in head  # no header is cut
    body = [line for line in lines if "│" in line]
    first = next(line for line in body if "stop" in line)
    assert "12345" in first and "0.40" in first  # the short cells are whole
    short = next(line for line in body if " ok " in line).split("│")[1].strip()
    run_cell = first.split("│")[1].strip()
    # cut, if at all, at their end; from 80 columns on, a short id is whole
    assert LONG_ID.startswith(run_cell.rstrip("…")) and "short-run".startswith(short.rstrip("…"))
    if width >= 80:
        assert short == "short-run"
    assert "".join(f"repeated_call: {MESSAGE}".split()) in finding_column(lines)


@pytest.mark.parametrize("width", [60, 80, 120])
def test_the_table_is_readable_at_common_widths(width: int) -> None:
    lines = render(width)
    check_readable(lines, width)
    heads = [line for line in lines if "┃" in line]
    if width >= 100:  # room for one header line
        assert any("first warn" in line and "first stop" in line for line in heads)
    if width == 120:  # 40% of the room left: the long id's first 25 characters
        assert any(LONG_ID[:25] in line for line in lines)


@settings(max_examples=30, deadline=None)
@given(st.integers(min_value=60, max_value=200))
def test_the_table_is_readable_at_any_width_from_60(width: int) -> None:
    check_readable(render(width), width)


def test_loopwatch_scan_at_80_columns_shows_the_finding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's case, through the command: stdout is not a terminal here, so the
    width is COLUMNS, as ``COLUMNS=80 loopwatch scan ... | less`` asks."""
    config = tmp_path / "loopwatch.toml"
    others = "\n".join(f"[{n}]\nenabled = false" for n in DETECTORS if n != "repeated_call")
    config.write_text(
        "[repeated_call]\nwarn_at = 2\nstop_at = 3\nwindow_warn_at = 0\nwindow_stop_at = 0\n"
        + others
        + "\n"
    )
    call = '{"kind": "tool_call", "name": "lookup_order", "args": {"id": 417}}'
    result = '{"kind": "tool_result", "name": "lookup_order", "text": "shipped"}'
    events = ", ".join([call, result] * 4)
    traces = tmp_path / "traces.jsonl"
    traces.write_text(f'{{"run_id": "{LONG_ID}", "events": [{events}]}}\n')
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["scan", "--config", str(config), str(traces)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert all(len(line) <= 80 for line in lines)
    assert "top finding" in "\n".join(lines)
    column = finding_column(lines)
    assert column.startswith("repeated_call:")
    assert "Youcalledlookup_order(" in column and "withthesamearguments" in column
