"""Nothing secret at rest: what each store holds, ``hook.log`` and every file loopwatch
writes carry fingerprints and redacted previews, never a secret; and those files are
private (0700 folder, 0600 files) whatever the umask. (Recent words of outputs and
messages are kept lower-cased, 16+ characters by their fingerprint.)

Every covered format (tests/core/test_redact.py CASES) goes through the guard as a looping
shell command with its results, so that previews are stored, warnings fire and quote
the call, and (through the hooks) a warning is held in the store for the next result.
What a store holds is read back decompressed (the zstd frame's JSON) as well as raw.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
import sys
from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import orjson
import pytest
import zstandard
from redis_server import (  # noqa: F401 - imported fixtures are registered by pytest
    Backend,
    RedisServer,
    prefix_fixture,
    redis_server_fixture,
    single_redis_fixture,
)
from test_redact import CASES

from loopwatch import Event, Guard
from loopwatch.hooks._dispatch import run_hook
from loopwatch.hooks._log import log_failure
from loopwatch.state import RunState
from loopwatch.stores.memory import MemoryStore
from loopwatch.stores.redis import RedisStore
from loopwatch.stores.sqlite import SqliteStore

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

SECRETS = [secret for _, _, secret in CASES]
POSIX = os.name == "posix"


def calls(run: int) -> Iterator[dict[str, Any]]:
    """Each format's command, called four times with the same result (a loop), and
    said by the model, to another agent and back (what spend_velocity's recent words
    and ping_pong's messages keep); then looked up four times by a tool that is no
    shell, whose result quotes it (what a call's short arguments give: what it asks
    about, what finds them in its result, held raw in memory only)."""
    for fmt, command, secret in CASES:
        for i in range(4):
            call_id = f"c{run}-{len(fmt)}-{secret[:4]}"
            sender, recipient = ("planner", "coder") if i % 2 else ("coder", "planner")
            said = f"Run this now: {command}"
            yield {"kind": "model", "text": said, "tokens": 10, "agent": sender, "to": recipient}
            yield {"kind": "tool_call", "name": "Bash", "args": {"command": command}, "id": call_id}
            yield {"kind": "tool_result", "name": "Bash", "id": call_id, "text": "denied"}
        for _ in range(4):
            yield {"kind": "tool_call", "name": "lookup", "args": {"q": command, "n": 3}}
            yield {"kind": "tool_result", "name": "lookup", "text": f"Nothing on {command}"}


def unpacked(blob: bytes) -> bytes:
    """A stored state's JSON, out of its zstd frame (and checked to be a state)."""
    RunState.from_bytes(blob)
    return zstandard.ZstdDecompressor().decompress(blob[4:])


def assert_no_secret(where: str, data: bytes) -> None:
    for secret in SECRETS:
        assert secret.encode() not in data, f"{where} holds a secret: {secret[:6]}..."


def feed(guard: Guard) -> list[str]:
    messages = []
    for run in range(2):
        for event in calls(run):
            verdict = guard.observe(f"run-{run}", event)
            if verdict.message:
                messages.append(verdict.message)
    assert any("[redacted]" in m for m in messages)  # the loop was caught and quoted
    return messages


def test_the_memory_store_holds_no_secret() -> None:
    guard = Guard(on_loop="warn", store=MemoryStore())
    messages = feed(guard)
    assert isinstance(guard.store, MemoryStore)
    held = [guard.store.get(f"run-{run}") for run in range(2)]
    assert held
    for state in held:
        assert state is not None
        assert_no_secret("the memory store", unpacked(state.to_bytes()))
    assert_no_secret("the messages", "\n".join(messages).encode())


def test_a_call_awaiting_its_result_is_written_without_its_arguments() -> None:
    """Between a call and its result the memory holds the call's argument values (to
    find them in the result); written to a store, or shown, the call holds only what
    finds them (digests) and a redacted preview. Read back from the store, the result
    quoting them is keyed as it is in memory."""
    for _, command, secret in CASES:
        call = {"kind": "tool_call", "name": "lookup", "args": {"q": command}, "id": "c1"}
        result = {"kind": "tool_result", "name": "lookup", "id": "c1", "text": f"No {command}"}
        kept, stored = MemoryStore(), MemoryStore()
        in_memory = Guard(on_loop="warn", store=kept)
        in_memory.observe("r", call)
        held = in_memory.state("r")
        assert held is not None
        assert_no_secret("a state awaiting a result", unpacked(held.to_bytes()))
        assert_no_secret("a call's repr", repr(held.calls).encode())
        # the same state, read back from its bytes (as a shared store hands it over)
        through = Guard(on_loop="warn", store=stored)
        stored.apply("r", lambda state: None, partial(RunState.from_bytes, held.to_bytes()))
        in_memory.observe("r", result)
        through.observe("r", result)
        after_memory, after_store = in_memory.state("r"), through.state("r")
        assert after_memory is not None and after_store is not None
        assert after_memory.calls[0].result == after_store.calls[0].result
        if len(command) <= 200:  # found and keyed without it, both ways
            bare = Event.from_dict({"kind": "tool_result", "text": "No \u2026"})
            assert after_store.calls[0].result == bare.result_key
        assert after_memory == after_store
        assert secret not in after_memory.calls[0].args


def test_a_sqlite_file_holds_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "state" / "state.db"
    guard = Guard(on_loop="warn", store=SqliteStore(path))
    feed(guard)
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT run_id, state FROM runs").fetchall()
    assert rows
    for run_id, blob in rows:
        assert_no_secret("a run id", run_id.encode())
        assert_no_secret("a SQLite row", unpacked(blob))
    guard.close()
    assert_files_hold_no_secret(tmp_path)


def test_redis_holds_no_secret(redis_server: Backend, prefix: str) -> None:
    store = RedisStore.from_url(redis_server.url, prefix=prefix, ttl_seconds=60)
    guard = Guard(on_loop="warn", store=store)
    feed(guard)
    guard.close()
    with redis_server.client() as raw:
        keys = list(raw.scan_iter(match=f"loopwatch:*{prefix}:*"))
        assert keys
        for key in keys:
            assert_no_secret("a Redis key", key)
            fields = raw.hgetall(key)
            assert fields
            for name, value in fields.items():
                assert_no_secret("a Redis hash", name + value)
                if value.startswith(b"LWS"):
                    assert_no_secret("a Redis state", unpacked(value))


def assert_files_hold_no_secret(folder: Path) -> None:
    files = [p for p in folder.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert_no_secret(str(path), path.read_bytes())


def hook_payloads() -> Iterator[dict[str, Any]]:
    for n, (_, command, _) in enumerate(CASES):
        for i in range(4):
            call = {
                "session_id": f"s{n}",
                "cwd": "/nonexistent",
                "tool_name": "Bash",
                "tool_input": {"command": command},
                "tool_use_id": f"u{n}-{i}",
            }
            yield {**call, "hook_event_name": "PreToolUse"}
            response = {"stdout": "denied", "stderr": ""}
            yield {**call, "hook_event_name": "PostToolUse", "tool_response": response}


@pytest.fixture(name="state_home")
def state_home_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fresh XDG state folder, the hook's default store in it, a tight umask's
    opposite (everything written would be world-readable but for loopwatch)."""
    home = tmp_path / "xdg"
    monkeypatch.setenv("XDG_STATE_HOME", str(home))
    monkeypatch.delenv("LOOPWATCH_STATE", raising=False)
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    old = os.umask(0o000)
    yield home
    os.umask(old)


def test_the_hooks_write_no_secret_and_private_files(state_home: Path) -> None:
    answers = [run_hook("claude-code", orjson.dumps(p)) for p in hook_payloads()]
    denied = [a for a in answers if '"deny"' in a.stdout or "Warning" in a.stdout]
    assert any("[redacted]" in a.stdout for a in denied)  # the calls were quoted
    for answer in answers:
        assert_no_secret("a hook's answer", (answer.stdout + answer.stderr).encode())
    # one failure logged with a secret in its text: the log line is redacted
    log_failure("claude-code", f"ValueError: bad input {CASES[0][1]}")
    folder = state_home / "loopwatch"
    log = folder / "hook.log"
    assert log.read_text().count("[redacted]") >= 1
    assert_files_hold_no_secret(state_home)
    if POSIX:
        assert_private(folder)


def assert_private(folder: Path) -> None:
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    names = sorted(p.name for p in folder.iterdir())
    for path in folder.iterdir():
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path.name, names)


@pytest.mark.skipif(not POSIX, reason="file modes are POSIX")
@pytest.mark.parametrize("umask", [0o000, 0o022, 0o277])
def test_the_state_folder_and_files_are_private_whatever_the_umask(
    tmp_path: Path, umask: int
) -> None:
    folder = tmp_path / "fresh" / "loopwatch"
    old = os.umask(umask)
    try:
        store = SqliteStore(folder / "state.db")
        guard = Guard(store=store)
        guard.observe("r", {"kind": "tool_call", "name": "t", "args": {}})
        # the WAL and shm files exist while the connection is open
        assert {"state.db", "state.db-wal", "state.db-shm"} <= {p.name for p in folder.iterdir()}
        assert_private(folder)
        guard.close()
    finally:
        os.umask(old)


@pytest.mark.skipif(not POSIX, reason="file modes are POSIX")
def test_loopwatchs_own_folder_and_files_are_tightened_and_it_is_logged(
    state_home: Path, caplog: pytest.LogCaptureFixture
) -> None:
    folder = state_home / "loopwatch"
    folder.mkdir(parents=True, mode=0o755)
    os.chmod(folder, 0o755)
    for name in ("state.db", "state.db-wal", "state.db-shm", "hook.log"):
        (folder / name).touch()
        os.chmod(folder / name, 0o644)
    (folder / "state.db-wal").unlink()  # an empty WAL is not a database's: start without
    (folder / "state.db-shm").unlink()
    store = SqliteStore()
    store.apply("r", lambda state: None, RunState)
    log_failure("claude-code", "something")
    assert_private(folder)
    assert "made it private" in caplog.text
    store.close()


@pytest.mark.skipif(not POSIX, reason="file modes are POSIX")
def test_a_folder_the_user_chose_is_left_as_it_is(tmp_path: Path) -> None:
    """LOOPWATCH_STATE=/shared/tmp/state.db: loopwatch does not change /shared/tmp,
    but its own files there are private."""
    os.chmod(tmp_path, 0o755)
    store = SqliteStore(tmp_path / "state.db")
    store.apply("r", lambda state: None, RunState)
    assert stat.S_IMODE(tmp_path.stat().st_mode) == 0o755
    assert stat.S_IMODE((tmp_path / "state.db").stat().st_mode) == 0o600
    store.close()


# What the docs' Security page gives a Redis user of loopwatch's own: its keys,
# and the commands the store sends (its script calls HGET, HSET and PEXPIRE).
ACL_RULES = (
    "resetkeys ~loopwatch:* resetchannels -@all +evalsha +eval +hget +hset +pexpire "
    "+hmget +del +scan +ping"
)


def test_a_redis_user_limited_by_acl_to_loopwatch_is_enough(
    single_redis: RedisServer, prefix: str
) -> None:
    import redis

    user, password = f"lw-{prefix}", "a-long-password-for-loopwatch-0123456789"
    with single_redis.client() as admin:
        admin.execute_command("ACL", "SETUSER", user, "on", f">{password}", *ACL_RULES.split())
        admin.set(f"other:{prefix}", "not loopwatch's")
    try:
        url = f"redis://{user}:{password}@127.0.0.1:{single_redis.port}/0?prefix={prefix}"
        guard = Guard(on_loop="warn", store=url, ttl_seconds=60)
        messages = feed(guard)
        assert all("unavailable" not in m and "internal error" not in m for m in messages)
        assert len(guard.store) == 2
        guard.reset("run-0")
        assert len(guard.store) == 1
        assert password not in repr(guard.store)
        guard.close()
        with redis.Redis(port=single_redis.port, username=user, password=password) as limited:
            with pytest.raises(redis.exceptions.NoPermissionError):
                limited.get(f"other:{prefix}")
            with pytest.raises(redis.exceptions.NoPermissionError):
                limited.keys("*")
    finally:
        with single_redis.client() as admin:
            admin.execute_command("ACL", "DELUSER", user)
            admin.delete(f"other:{prefix}")


def _security_section() -> str:
    text = (Path(__file__).resolve().parents[2] / "docs" / "security.md").read_text(
        encoding="utf-8"
    )
    return text[text.index("<!-- security:start -->") : text.index("<!-- security:end -->")]


def test_the_readme_security_section_says_what_the_code_does() -> None:
    from loopwatch import Config
    from loopwatch.redact import compile_patterns, redact_extra

    section = _security_section()
    (toml,) = re.findall(r"```toml\n(.*?)```", section, flags=re.DOTALL)
    config = Config.from_mapping(tomllib.loads(toml))
    patterns = compile_patterns(config.redact_patterns)
    assert redact_extra(f"see corp-{'ab12' * 8} and ticket=42", patterns) == (
        "see [redacted] and ticket=[redacted]"
    )
    (acl,) = re.findall(r"```text\n(.*?)\n```", section, flags=re.DOTALL)
    assert acl.endswith(ACL_RULES)
    for example in ("Authorization: Bearer [redacted]", "sk-proj-[redacted]", "admin:[redacted]@"):
        assert example in section
