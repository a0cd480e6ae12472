"""The hook daemon (``loopwatch.hooks.daemon``) and its client (``_loopwatch_hook``).

A real daemon process on a real unix socket; the client is the real ``loopwatch``
command or ``ask_daemon`` called here. What is checked: the daemon's answers are the
in-process answers (over the 48 replayed Claude Code sessions, and generated ones),
every call is counted once (several clients at once on one run, a stale, garbage,
silent or foreign socket, a daemon killed, a daemon dying after it took a request),
the configuration is read again when it changes, the daemon exits when idle, the
files are private, ``loopwatch doctor`` shows it and ``LOOPWATCH_HOOK_DAEMON=0`` turns
it off. Waits are bounded (a hung daemon fails the test), never timed assertions.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import test_hooks_replay as replay
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import _loopwatch_hook as entry
from loopwatch.hooks import daemon as hookd
from loopwatch.hooks._dispatch import _PROTOCOLS, Answer, respond
from loopwatch.hooks._log import state_dir
from loopwatch.stores.sqlite import SqliteStore

pytestmark = pytest.mark.skipif(os.name != "posix", reason="unix sockets")

BIN = Path(sys.executable).parent
SERVE = "import _loopwatch_hook as e; e.bare_package(); from loopwatch.hooks.daemon import serve; serve()"  # noqa: E501
ARGS = ["hook", "claude-code"]


def pre(session: str, n: int, command: str = "", cwd: str = "/") -> dict[str, Any]:
    return {"session_id": session, "hook_event_name": "PreToolUse", "tool_name": "Bash",
            "tool_input": {"command": command or f"echo {n}"}, "tool_use_id": f"t{n}",
            "cwd": cwd}  # fmt: skip


def post(session: str, n: int, output: str, cwd: str = "/") -> dict[str, Any]:
    return {"session_id": session, "hook_event_name": "PostToolUse", "tool_name": "Bash",
            "tool_response": {"stdout": output, "stderr": "", "interrupted": False},
            "tool_use_id": f"t{n}", "cwd": cwd}  # fmt: skip


class Daemon:
    """A daemon process for this test's environment (a short state folder in /tmp:
    unix socket paths are limited), and the client's view of it."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def key(self) -> bytes:
        return entry.daemon_key()

    @property
    def path(self) -> str:
        return entry.daemon_socket()

    def start(self) -> Daemon:
        self.proc = subprocess.Popen([sys.executable, "-c", SERVE], env=dict(os.environ))
        self.wait_running()
        return self

    def wait_running(self) -> dict[str, Any]:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            found = hookd.status()
            if found["running"]:
                return found
            time.sleep(0.02)
        raise AssertionError("the daemon did not start")

    def ask(self, payload: dict[str, Any], args: list[str] = ARGS) -> Answer:
        answer = entry.ask_daemon(args, json.dumps(payload).encode(), self.key, self.path)
        assert answer is not None, "the daemon did not take the call"
        code, out, err = answer
        return Answer(code, out.decode(), err.decode())

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=60)


@pytest.fixture
def folder(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    where = Path(tempfile.mkdtemp(prefix="lwd", dir="/tmp"))
    monkeypatch.setenv("LOOPWATCH_STATE", str(where / "state" / "state.db"))
    monkeypatch.setenv("LOOPWATCH_HOOK_DAEMON_IDLE", "60")
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    monkeypatch.delenv("LOOPWATCH_HOOK_DAEMON", raising=False)
    yield where
    shutil.rmtree(where, ignore_errors=True)


@pytest.fixture
def daemon(folder: Path) -> Iterator[Daemon]:
    running = Daemon(folder).start()
    yield running
    running.stop()


def in_process(payload: dict[str, Any], state: Path, monkeypatch: pytest.MonkeyPatch) -> Answer:
    """The answer a hook process gives with the daemon off, on its own state file."""
    with monkeypatch.context() as m:
        m.setenv("LOOPWATCH_STATE", str(state))
        return respond(ARGS[1:], json.dumps(payload).encode())


def run_command(payload: dict[str, Any], **env: str) -> tuple[int, bytes, bytes]:
    """The installed command, as an agent runs it."""
    proc = subprocess.run([str(BIN / "loopwatch"), *ARGS], input=json.dumps(payload).encode(),
                          capture_output=True, env={**os.environ, **env}, timeout=120)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


def stored(session: str) -> int:
    """Hook events the store counted for a session (0: none)."""
    store = SqliteStore(Path(os.environ["LOOPWATCH_STATE"]))
    try:
        state = store.get(session)
        return 0 if state is None else int(state.n)
    finally:
        store.close()


# -- same answers ------------------------------------------------------------------------


@pytest.mark.skipif(not replay.FILES, reason="the Claude Code corpus is not here")
def test_replayed_sessions_through_the_daemon_agree_with_in_process_and_scan(
    daemon: Daemon, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agree = 0
    for path in replay.FILES:
        through, here = [], []
        for payload in replay.payloads(path):
            through.append((payload, replay.answer_action(daemon.ask(payload))))
            answer = in_process(payload, folder / "in-process.db", monkeypatch)
            here.append((payload, replay.answer_action(answer)))
        assert through == here, path.name
        agree += replay.agrees(replay.hook_verdict(through), replay.scan_verdict(path), path)
    assert agree == len(replay.FILES) == 48


calls = st.lists(
    st.tuples(st.sampled_from(["ls", "make test", "cat a.txt", "git status"]),
              st.sampled_from(["", "ok", "error: no such file", "1 failed"])),
    min_size=1, max_size=14,
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(steps=calls, session=st.uuids())
def test_generated_sessions_get_the_same_answers_and_state(
    daemon: Daemon, folder: Path, monkeypatch: pytest.MonkeyPatch, steps: list[tuple[str, str]],
    session: Any,
) -> None:  # fmt: skip
    run = str(session)
    for n, (command, output) in enumerate(steps):
        for payload in (pre(run, n, command), post(run, n, output)):
            assert daemon.ask(payload) == in_process(payload, folder / "b.db", monkeypatch)
    mine = SqliteStore(folder / "b.db")
    try:
        assert stored(run) == mine.get(run).n  # type: ignore[union-attr]
    finally:
        mine.close()


def calls_log() -> list[dict[str, Any]]:
    return [json.loads(line) for line in (state_dir() / "calls.log").read_text().splitlines()]


def test_the_installed_command_goes_through_the_daemon(daemon: Daemon) -> None:
    for n in range(3):
        assert run_command(pre("cmd", n)) == (0, b"", b"")
    assert stored("cmd") == 4  # a model turn, then the three calls
    assert [c.get("via") for c in calls_log() if c["session"] == "cmd"] == ["daemon"] * 3


def test_usage_errors_and_help_are_answered_as_in_process(daemon: Daemon) -> None:
    unknown = daemon.ask({}, ["hook", "nosuch"])
    assert unknown.exit_code == 2 and "unknown agent 'nosuch'" in unknown.stderr
    assert unknown == respond(["nosuch"], b"")
    assert run_command({}, LOOPWATCH_HOOK_DAEMON="0")[0] == 0


def test_the_client_knows_the_same_agents_and_folder_as_the_package() -> None:
    assert set(_PROTOCOLS) == entry.AGENTS
    assert Path(entry.state_folder()) == state_dir()


def test_a_changed_configuration_applies_to_the_next_call(
    daemon: Daemon, folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = folder / "proj"
    project.mkdir()
    first = pre("c1", 1, cwd=str(project))
    assert daemon.ask(first).stdout == ""
    (project / "loopwatch.toml").write_text("on_loop = [")  # broken: the user is told
    second = {**pre("c2", 1, cwd=str(project)), "hook_event_name": "UserPromptSubmit",
              "prompt": "go"}  # fmt: skip
    told = daemon.ask(second)
    assert "Not watching this session" in json.loads(told.stdout)["systemMessage"]
    assert told == in_process({**second, "session_id": "c3"}, folder / "b.db", monkeypatch)
    (project / "loopwatch.toml").write_text('on_loop = "warn"\n')
    assert daemon.ask({**second, "session_id": "c4"}).stdout == ""


# -- never counted twice -----------------------------------------------------------------


def test_several_clients_at_once_on_one_run_count_every_call_once(daemon: Daemon) -> None:
    clients, each = 8, 12

    def client(k: int) -> None:
        for n in range(each):
            assert daemon.ask(pre("busy", k * 100 + n)) == Answer(0, "", "")

    threads = [threading.Thread(target=client, args=(k,)) for k in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    # processes too: a daemon call and an in-process one at the same time
    procs = [subprocess.Popen([str(BIN / "loopwatch"), *ARGS], stdin=subprocess.PIPE,
                              env={**os.environ, "LOOPWATCH_HOOK_DAEMON": off})
             for off in ("1", "0", "1", "0")]  # fmt: skip
    for n, proc in enumerate(procs):
        proc.communicate(json.dumps(pre("busy", 9000 + n)).encode(), timeout=120)
    assert stored("busy") == 1 + clients * each + len(procs)


class FakeDaemon:
    """A listener at the daemon's socket that misbehaves in a chosen way; it records
    what clients sent it."""

    def __init__(self, path: str, behaviour: str, key: bytes = b"") -> None:
        self.path, self.behaviour, self.key = path, behaviour, key
        self.received = b""
        os.makedirs(os.path.dirname(path), mode=0o700, exist_ok=True)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.sock.listen(8)
        self.thread = threading.Thread(target=self.serve, daemon=True)
        self.thread.start()

    def serve(self) -> None:
        if self.behaviour == "silent":
            return  # listens, never accepts: the connection waits in the backlog
        conn, _ = self.sock.accept()
        with conn:
            if self.behaviour == "garbage":
                conn.sendall(b"\x00\xffnot a greeting at all\n")
            elif self.behaviour in ("other key", "dies"):
                conn.sendall(b"LWHD1 1 9.9.9 %d\n" % len(self.key) + self.key)
            conn.settimeout(5)
            try:
                while chunk := conn.recv(65536):
                    self.received += chunk
                    if self.behaviour == "dies" and b"\n" in self.received:
                        break  # took the request, then died before answering
            except OSError:
                pass

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=30)
        os.unlink(self.path)


@pytest.mark.parametrize("behaviour", ["silent", "garbage", "other key"])
def test_a_daemon_that_does_not_greet_as_ours_is_bypassed_once_and_for_all(
    folder: Path, behaviour: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Not taken: the call is answered in-process (counted once), and the fake daemon
    never received the request."""
    other = entry.daemon_key().replace(b"LWHD1", b"LWHD0")  # another version's key
    fake = FakeDaemon(entry.daemon_socket(), behaviour, other)
    payload = pre("fb", 1, "ls")
    try:
        assert run_command(payload) == (0, b"", b"")
    finally:
        fake.close()
    assert fake.received == b""
    assert stored("fb") == 2  # the model turn and the call, once
    assert in_process(payload, folder / "b.db", monkeypatch) == Answer()


@pytest.mark.parametrize("leftover", ["dead socket", "regular file"])
def test_a_stale_socket_file_is_answered_in_process_and_replaced(
    folder: Path, leftover: str
) -> None:
    path = Path(entry.daemon_socket())
    path.parent.mkdir(parents=True, mode=0o700)
    if leftover == "dead socket":
        dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        dead.bind(str(path))
        dead.close()
    else:
        path.write_bytes(b"garbage")
    assert run_command(pre("st", 1)) == (0, b"", b"")
    assert stored("st") == 2
    started = Daemon(folder).wait_running()  # the call started a daemon, which took the path
    try:
        assert run_command(pre("st", 2)) == (0, b"", b"")
        assert stored("st") == 3
    finally:
        os.kill(started["pid"], signal.SIGTERM)


def test_a_daemon_killed_is_replaced_and_nothing_is_lost(daemon: Daemon) -> None:
    for n in range(3):
        daemon.ask(pre("k", n))
    assert daemon.proc is not None
    daemon.proc.kill()
    daemon.proc.wait(timeout=60)
    assert run_command(pre("k", 3)) == (0, b"", b"")  # in-process, starts a new one
    replacement = daemon.wait_running()
    try:
        assert replacement["pid"] != daemon.proc.pid
        daemon.ask(pre("k", 4))
        assert stored("k") == 6  # state kept in the store across the restart
    finally:
        os.kill(replacement["pid"], signal.SIGTERM)


def test_a_daemon_that_dies_after_taking_the_call_lets_it_through_once(folder: Path) -> None:
    """The request was sent: the client does not judge it again (that could count it
    twice); the call is let through and the loss logged."""
    fake = FakeDaemon(entry.daemon_socket(), "dies", entry.daemon_key())
    try:
        assert run_command(pre("d", 1)) == (0, b"", b"")
    finally:
        fake.close()
    assert b"PreToolUse" in fake.received
    assert stored("d") == 0
    assert "gave no answer" in (state_dir() / "hook.log").read_text()
    # let through in the agent's own words: Cursor's shell hook wants a permission
    fake = FakeDaemon(entry.daemon_socket(), "dies", entry.daemon_key())
    shell = {"conversation_id": "d2", "hook_event_name": "beforeShellExecution",
             "command": "ls", "cwd": "/"}  # fmt: skip
    try:
        proc = subprocess.run([str(BIN / "loopwatch"), "hook", "cursor"], capture_output=True,
                              input=json.dumps(shell).encode(), timeout=120)  # fmt: skip
    finally:
        fake.close()
    assert b"beforeShellExecution" in fake.received
    assert json.loads(proc.stdout) == {"permission": "allow"} and stored("d2") == 0


def test_another_key_is_refused_by_the_real_daemon_before_anything_is_judged(
    daemon: Daemon,
) -> None:
    other = daemon.key + b"\x00LOOPWATCH_STORE=memory://"
    raw = json.dumps(pre("ok", 1)).encode()
    assert entry.ask_daemon(ARGS, raw, other, daemon.path) is None
    assert stored("ok") == 0


def test_a_daemon_whose_loopwatch_files_change_is_stale(tmp_path: Path) -> None:
    module = tmp_path / "probe.py"
    module.write_text("x = 1\n")
    fake = type(sys)("loopwatch._daemon_probe")
    fake.__file__ = str(module)
    sys.modules[fake.__name__] = fake
    try:
        sources = hookd._Sources()
        assert not sources.changed()
        module.write_text("x = 22\n")
        assert sources.changed()
    finally:
        del sys.modules[fake.__name__]


# -- lifetime, files, switches -----------------------------------------------------------


def test_the_daemon_exits_when_idle_and_removes_its_socket(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LOOPWATCH_HOOK_DAEMON_IDLE", "0.5")
    running = Daemon(folder).start()
    assert running.proc is not None
    assert running.proc.wait(timeout=60) == 0
    assert not Path(running.path).exists()


def test_the_folder_and_socket_are_private(daemon: Daemon) -> None:
    path = Path(daemon.path)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert path.stat().st_mode & 0o777 == 0o600
    assert Path(daemon.path + ".lock").stat().st_mode & 0o777 == 0o600


def test_a_peer_is_known_by_its_user_id() -> None:
    a, b = socket.socketpair(socket.AF_UNIX)
    with a, b:
        assert hookd._peer_uid(a) in (os.getuid(), None)


def test_a_folder_others_can_write_to_gets_no_daemon(folder: Path) -> None:
    shared = folder / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    os.environ["LOOPWATCH_STATE"] = str(shared / "state.db")  # restored by monkeypatch
    assert run_command(pre("w", 1)) == (0, b"", b"")
    hookd.serve()  # returns at once: it will not listen there
    assert stored("w") == 2 and not any(shared.glob("*.sock"))


def test_turned_off_no_daemon_is_started(folder: Path) -> None:
    assert run_command(pre("off", 1), LOOPWATCH_HOOK_DAEMON="0") == (0, b"", b"")
    assert stored("off") == 2
    assert not list((folder / "state").glob("hookd-*"))


def test_doctor_shows_the_daemon(daemon: Daemon) -> None:
    proc = subprocess.run([str(BIN / "loopwatch"), "doctor", "--json"], capture_output=True,
                          env=dict(os.environ), timeout=120, cwd=daemon.folder)  # fmt: skip
    shown = json.loads(proc.stdout)["daemon"]
    assert shown["running"] and shown["pid"] == daemon.wait_running()["pid"]
    assert shown["socket"] == daemon.path and shown["version"]
    off = {**os.environ, "LOOPWATCH_HOOK_DAEMON": "0"}
    text = subprocess.run([str(BIN / "loopwatch"), "doctor"], capture_output=True, text=True,
                          env=off, timeout=120)  # fmt: skip
    assert "hook daemon: off" in text.stdout


def test_two_daemons_started_at_once_leave_one_serving(folder: Path) -> None:
    """Two hook calls that both found no daemon start one each: one takes the lock,
    the other exits; calls go to the one that serves."""
    procs = [subprocess.Popen([sys.executable, "-c", SERVE]) for _ in range(2)]
    try:
        serving = Daemon(folder).wait_running()["pid"]
        loser = next(p for p in procs if p.pid != serving)
        assert loser.wait(timeout=60) == 0
        assert run_command(pre("two", 1)) == (0, b"", b"")
        assert calls_log()[-1].get("via") == "daemon" and hookd.status()["pid"] == serving
    finally:
        for proc in procs:
            proc.terminate()
            proc.wait(timeout=60)


def test_a_state_file_relative_to_the_working_folder_keys_the_daemon_by_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = {}
    for state in ("state.db", "/abs/state.db"):
        monkeypatch.setenv("LOOPWATCH_STATE", state)
        for where in ("a", "b"):
            (tmp_path / where).mkdir(exist_ok=True)
            monkeypatch.chdir(tmp_path / where)
            keys[state, where] = entry.daemon_key()
    assert keys["state.db", "a"] != keys["state.db", "b"]
    assert keys["/abs/state.db", "a"] == keys["/abs/state.db", "b"]


def test_a_daemon_whose_code_changed_refuses_the_call_and_exits(folder: Path) -> None:
    """An upgrade or an edit of an editable install under a running daemon: the call
    is answered in-process (once), the daemon exits, the next call starts a current one."""
    probe = folder / "probe.py"
    probe.write_text("VERSION = 1\n")
    code = (
        "import importlib.util, sys\n"
        "import _loopwatch_hook as h\n"
        "h.bare_package()\n"
        f"spec = importlib.util.spec_from_file_location('loopwatch._probe', {str(probe)!r})\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "sys.modules['loopwatch._probe'] = module\n"
        "spec.loader.exec_module(module)\n"
        "from loopwatch.hooks.daemon import serve\n"
        "serve()\n"
    )
    old = subprocess.Popen([sys.executable, "-c", code])
    running = Daemon(folder)
    running.wait_running()
    running.ask(pre("up", 1))
    probe.write_text("VERSION = 22\n")
    raw = json.dumps(pre("up", 2)).encode()
    assert entry.ask_daemon(ARGS, raw, running.key, running.path) is None
    assert old.wait(timeout=60) == 0 and stored("up") == 2  # the second call not judged
    assert run_command(pre("up", 3)) == (0, b"", b"")  # in-process: no daemon listens
    replacement = running.wait_running()
    try:
        assert replacement["pid"] != old.pid and stored("up") == 3
    finally:
        os.kill(replacement["pid"], signal.SIGTERM)
