"""The SQLite store: the Store contract, TTL, size bound, corrupt data, concurrent
processes on one run, and the same verdicts as the memory store on the conformance
scenarios (each step from a different process, like hook processes)."""

from __future__ import annotations

import multiprocessing as mp
import sqlite3
import threading
import traceback
from pathlib import Path
from typing import Any

import pytest
from conftest import load_scenarios, meets_expectation

from loopwatch import Config, Guard
from loopwatch.engine import new_state
from loopwatch.errors import StoreUnavailable
from loopwatch.findings import Verdict
from loopwatch.stores import store_from_url
from loopwatch.stores.sqlite import SqliteStore, default_state_path


def verdict_summary(v: Verdict) -> tuple[Any, ...]:
    return (
        str(v.action),
        v.step,
        v.message,
        v.state_available,
        tuple((f.detector, str(f.severity), f.step, f.steps, f.pattern) for f in v.findings),
    )


def bump(state: dict[str, Any]) -> int:
    state.n += 1
    n: int = state.n
    return n


def test_apply_get_reset_len(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    assert store.get("r") is None and len(store) == 0
    assert store.apply("r", bump, new_state) == 1
    assert store.apply("r", bump, new_state) == 2
    state = store.get("r")
    assert state is not None and state.n == 2
    store.apply("other", bump, new_state)
    assert len(store) == 2
    store.reset("r")
    assert store.get("r") is None and len(store) == 1
    store.close()
    # The state is on disk: a new store (a new hook process) sees it.
    again = SqliteStore(tmp_path / "s.db")
    assert again.apply("other", bump, new_state) == 2


def test_url_scheme_and_options(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "deep" / "dir" / "state.db"
    store = store_from_url(f"sqlite://{path}?ttl_seconds=60&max_runs=5&timeout=0.5")
    assert isinstance(store, SqliteStore)
    assert store.path == path and store.ttl_seconds == 60 and store.max_runs == 5
    assert store.timeout == 0.5
    store.apply("r", bump, new_state)
    assert path.exists()
    with pytest.raises(TypeError, match="unknown SQLite store option"):
        store_from_url(f"sqlite://{path}?colour=red")
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "env.db"))
    assert default_state_path() == tmp_path / "env.db"
    bare = store_from_url("sqlite://")
    assert isinstance(bare, SqliteStore) and bare.path == tmp_path / "env.db"
    monkeypatch.delenv("LOOPWATCH_STATE")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert default_state_path() == tmp_path / "xdg" / "loopwatch" / "state.db"
    guard = Guard(Config(), store=f"sqlite://{tmp_path / 'g.db'}")
    assert isinstance(guard.store, SqliteStore) and guard.store.ttl_seconds == 3600.0


def test_wal_mode(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.apply("r", bump, new_state)
    conn = sqlite3.connect(tmp_path / "s.db")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_ttl_expires_idle_runs(tmp_path: Path) -> None:
    now = [1000.0]
    store = SqliteStore(tmp_path / "s.db", ttl_seconds=10, clock=lambda: now[0])
    store.apply("r", bump, new_state)
    store.apply("r", bump, new_state)
    now[0] += 9
    assert store.apply("r", bump, new_state) == 3  # touched again: the TTL restarts
    now[0] += 11
    assert store.get("r") is None and len(store) == 0
    assert store.apply("r", bump, new_state) == 1  # expired: a fresh state


def test_size_bound_drops_least_recently_used(tmp_path: Path) -> None:
    now = [0.0]
    store = SqliteStore(tmp_path / "s.db", max_runs=3, ttl_seconds=None, clock=lambda: now[0])
    for run in ("a", "b", "c", "d"):
        now[0] += 1
        store.apply(run, bump, new_state)
    assert len(store) == 3
    assert store.get("a") is None and store.get("d") is not None


def test_corrupt_row_starts_afresh(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.apply("r", bump, new_state)
    store.apply("r", bump, new_state)
    conn = sqlite3.connect(tmp_path / "s.db")
    conn.execute("UPDATE runs SET state = ? WHERE run_id = 'r'", (b"\xff not json",))
    conn.commit()
    conn.close()
    with caplog.at_level("WARNING", logger="loopwatch"):
        assert store.apply("r", bump, new_state) == 1
    assert "unreadable state" in caplog.text
    assert store.apply("r", bump, new_state) == 2


def test_corrupt_file_is_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    path.write_bytes(b"this is not a database at all" * 100)
    store = SqliteStore(path)
    assert store.apply("r", bump, new_state) == 1
    assert list(tmp_path.glob("s.db.corrupt-*"))
    guard = Guard(Config(), store=f"sqlite://{tmp_path / 'g.db'}")
    (tmp_path / "g.db").write_bytes(b"garbage" * 1000)
    assert guard.observe("r", {"kind": "tool_call", "name": "x"}).ok


def test_locked_file_raises_store_unavailable_and_guard_allows(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    store = SqliteStore(path, timeout=0.2)
    store.apply("r", bump, new_state)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(StoreUnavailable, match="locked"):
            store.apply("r", bump, new_state)
        guard = Guard(Config(), store=SqliteStore(path, timeout=0.1))
        verdict = guard.observe("r", {"kind": "tool_call", "name": "x"})
        assert verdict.ok and not verdict.state_available
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert store.apply("r", bump, new_state) == 2  # nothing was half-applied


def test_fn_error_rolls_back(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")
    store.apply("r", bump, new_state)

    def broken(state: dict[str, Any]) -> None:
        state.n = 99
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError):
        store.apply("r", broken, new_state)
    assert store.apply("r", bump, new_state) == 2


def test_threads_share_one_store(tmp_path: Path) -> None:
    store = SqliteStore(tmp_path / "s.db")

    def work() -> None:
        for _ in range(100):
            store.apply("r", bump, new_state)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    state = store.get("r")
    assert state is not None and state.n == 400


def _hammer(path: str, steps: int, out: Any) -> None:
    try:
        store = SqliteStore(path, timeout=30)
        seen = []
        for _ in range(steps):
            seen.append(store.apply("shared", bump, new_state))
        store.close()
        out.put((seen, None))
    except BaseException:
        out.put(([], traceback.format_exc()))


def test_four_processes_lose_no_step(tmp_path: Path) -> None:
    path = str(tmp_path / "s.db")
    SqliteStore(path).apply("warm", bump, new_state)  # create the file once
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_hammer, args=(path, 200, out)) for _ in range(4)]
    for p in procs:
        p.start()
    seen: list[int] = []
    for _ in procs:
        values, error = out.get(timeout=120)
        assert error is None, error
        seen.extend(values)
    for p in procs:
        p.join(timeout=30)
    # Every step saw a distinct count: no two were applied to the same state.
    assert sorted(seen) == list(range(1, 801))
    state = SqliteStore(path).get("shared")
    assert state is not None and state.n == 800


def _observe_some(path: str, work: list[tuple[int, str, dict[str, Any]]], out: Any) -> None:
    try:
        guard = Guard(Config(), store=f"sqlite://{path}", on_store_error="raise")
        out.put(([(key, verdict_summary(guard.observe(run, ev))) for key, run, ev in work], None))
    except BaseException:
        out.put(([], traceback.format_exc()))


def test_conformance_scenarios_match_memory_store(tmp_path: Path) -> None:
    """Every step in its own guard and connection (as in one hook process per call)
    gives the verdict one in-memory guard gives."""
    runs = load_scenarios()
    path = str(tmp_path / "s.db")
    for run in runs:
        memory = Guard(Config())
        first_warn = first_stop = None
        for i, ev in enumerate(run["events"]):
            expected = verdict_summary(memory.observe(run["run_id"], ev))
            fresh = Guard(Config(), store=f"sqlite://{path}", on_store_error="raise")
            got = verdict_summary(fresh.observe(run["run_id"], ev))
            fresh.close()
            assert got == expected, f"{run['run_id']} step {i}"
            if got[0] != "ok" and first_warn is None:
                first_warn = i
            if got[0] in ("stop", "skip") and first_stop is None:
                first_stop = i
        problem = meets_expectation(run["expect"], first_warn, first_stop)
        assert not problem, f"{run['run_id']}: {problem}"


def test_conformance_scenarios_over_processes(tmp_path: Path) -> None:
    """Runs split over 4 processes (run r goes to process r % 4), all on one file."""
    runs = load_scenarios()
    path = str(tmp_path / "s.db")
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    shares: list[list[tuple[int, str, dict[str, Any]]]] = [[] for _ in range(4)]
    for r, run in enumerate(runs):
        for i, ev in enumerate(run["events"]):
            shares[r % 4].append((r * 100_000 + i, run["run_id"], ev))
    procs = [ctx.Process(target=_observe_some, args=(path, s, out)) for s in shares]
    for p in procs:
        p.start()
    got: dict[int, Any] = {}
    for _ in procs:
        results, error = out.get(timeout=120)
        assert error is None, error
        got.update(dict(results))
    for p in procs:
        p.join(timeout=30)
    for r, run in enumerate(runs):
        memory = Guard(Config())
        for i, ev in enumerate(run["events"]):
            assert got[r * 100_000 + i] == verdict_summary(memory.observe(run["run_id"], ev))
