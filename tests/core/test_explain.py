"""The --explain timeline shows the run's events and marks each finding's evidence."""

from __future__ import annotations

import pytest
from conftest import DATA

from loopwatch.cli import main


def test_explain_marks_evidence_and_findings(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["scan", str(DATA / "conformance.jsonl"), "--explain", "A-alternate-same-args"]) == 0
    )
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert "A-alternate-same-args" in lines[0] and "stop" in lines[0]
    event_lines = [ln for ln in lines if ln[:7].strip().lstrip("▌").strip().isdigit()]
    assert len(event_lines) == 24  # short run: every event shown
    # futility warns first (3 results the run already had); the defaults then stop the 3rd
    # identical web_fetch (its two before returned the same page); futility and the cycle
    # stop later
    assert any("◀ STOP" in ln and " 10 " in ln for ln in lines)
    assert any("◀ WARN" in ln and " 9 " in ln for ln in lines)
    assert "repeated_call stop" in out and "futility stop" in out
    assert "cycle stop" in out and "web_search -> web_fetch" in out
    marked = {int(ln[1:6]) for ln in event_lines if ln.startswith("▌")}
    assert {0, 2, 4, 14} <= marked


def test_explain_unknown_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["scan", str(DATA / "conformance.jsonl"), "--explain", "nope"]) == 2
    assert "no run 'nope'" in capsys.readouterr().err
