"""The session-log readers of Qwen Code, Copilot CLI and OpenCode beyond what the real
CLIs' sessions show (tests/hooks/test_hooks_e2e.py scans those, and holds each reader's
verdicts to the live hook's): a SQLite file that is not OpenCode's database is reported,
not read, and a directory scan takes OpenCode's database by its name only."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from loopwatch.traces import InputError, TraceRun, read_runs, trace_files


def test_a_sqlite_file_that_is_not_opencodes_is_reported_not_read(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (id TEXT PRIMARY KEY, data BLOB)")
    [error] = list(read_runs(str(path)))
    assert isinstance(error, InputError) and error.whole_file
    assert "not OpenCode's" in error.reason


def test_a_directory_scan_takes_opencodes_database_by_its_name(tmp_path: Path) -> None:
    for name in ("opencode.db", "state.db"):
        with sqlite3.connect(tmp_path / name) as db:
            db.execute("CREATE TABLE t (x)")
    assert trace_files(str(tmp_path)) == [str(tmp_path / "opencode.db")]


def test_an_empty_opencode_database_has_no_runs(tmp_path: Path) -> None:
    path = tmp_path / "opencode.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE session (id TEXT, directory TEXT, version TEXT, title TEXT, "
                   "parent_id TEXT, time_created INTEGER)")  # fmt: skip
        db.execute("CREATE TABLE message (id TEXT, session_id TEXT, time_created INTEGER, data)")
        db.execute("CREATE TABLE part (id TEXT, message_id TEXT, session_id TEXT, data)")
    assert [r for r in read_runs(str(path)) if isinstance(r, TraceRun)] == []
