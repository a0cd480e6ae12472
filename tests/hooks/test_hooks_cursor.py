"""Cursor's hooks, with the payloads its documentation describes
(https://cursor.com/docs/agent/hooks; Cursor is not on npm, so no real Cursor runs
here): ``loopwatch install cursor`` writes ``.cursor/hooks.json`` in Cursor's format,
keeping the user's own hooks, and the command it installs, fed those payloads on
stdin, denies a looping shell command or MCP tool with the reason for the model and
the user, keeps denying until the user's next prompt, stays advisory under
``on_loop = "warn"``, and lets everything through (saying so, once) when the
configuration is broken."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwatch.hooks.install import hook_command, install, settings_path, uninstall

BIN = Path(sys.executable).parent
FAILING = "ls /no/such/dir"
FAILED = "ls: cannot access '/no/such/dir': No such file or directory\n"


class Cursor:
    """One Cursor conversation, each payload piped into the installed project command
    (``loopwatch`` found on PATH), as Cursor runs a hook."""

    def __init__(self, project: Path, conversation: str = "conv-1") -> None:
        self.project = project
        self.conversation = conversation
        self.command = hook_command("cursor")
        self.env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(project.parent / "home"),
                    "LOOPWATCH_STATE": str(project.parent / "state" / "state.db"),
                    "LOOPWATCH_HOOK_DAEMON_IDLE": "5"}  # fmt: skip

    def send(self, event: str, **fields: Any) -> dict[str, Any]:
        payload = {"hook_event_name": event, "conversation_id": self.conversation,
                   "generation_id": "gen-1", "workspace_roots": [str(self.project)],
                   "cursor_version": "1.7.0", **fields}  # fmt: skip
        proc = subprocess.run(["/bin/sh", "-c", self.command], input=json.dumps(payload).encode(),
                              capture_output=True, env=self.env, cwd=self.project,
                              timeout=60)  # fmt: skip
        assert (proc.returncode, proc.stderr) == (0, b""), proc.stderr
        answer: dict[str, Any] = json.loads(proc.stdout)
        return answer

    def shell(self, command: str, output: str) -> dict[str, Any]:
        """A shell command: its beforeShellExecution answer; it runs (afterShellExecution)
        only if allowed."""
        before = self.send("beforeShellExecution", command=command, cwd=str(self.project))
        if before["permission"] == "allow":
            assert self.send("afterShellExecution", command=command, output=output,
                             duration=12) == {}  # fmt: skip
        return before

    def log(self) -> str:
        calls = Path(self.env["LOOPWATCH_STATE"]).parent / "calls.log"
        return calls.read_text() if calls.exists() else ""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    folder = tmp_path / "proj"
    folder.mkdir()
    return folder


def test_install_writes_cursors_format_and_keeps_the_users_hooks(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(project)
    path = settings_path("cursor")
    assert path == project / ".cursor" / "hooks.json"
    mine = {"version": 1, "hooks": {"afterFileEdit": [{"command": "npx prettier --write"}]}}
    path.parent.mkdir()
    path.write_text(json.dumps(mine))
    assert install("cursor", path) != []
    written = json.loads(path.read_text())
    assert written["version"] == 1
    assert set(written["hooks"]) == {"beforeShellExecution", "afterShellExecution",
                                     "beforeMCPExecution", "afterMCPExecution",
                                     "afterFileEdit", "beforeSubmitPrompt"}  # fmt: skip
    for handlers in written["hooks"].values():  # no matcher groups: a list of commands
        assert [h["command"] for h in handlers if "loopwatch" in h["command"]] == [
            hook_command("cursor")
        ]
    assert written["hooks"]["afterFileEdit"][0] == {"command": "npx prettier --write"}
    assert install("cursor", path) == []  # idempotent
    assert uninstall("cursor", path) != []
    assert json.loads(path.read_text()) == mine
    monkeypatch.setenv("HOME", str(project.parent / "home"))
    assert settings_path("cursor", "user") == project.parent / "home" / ".cursor" / "hooks.json"


def test_a_looping_shell_command_is_denied_and_stays_denied_until_the_next_prompt(
    project: Path,
) -> None:
    cursor = Cursor(project)
    answers = [cursor.shell(FAILING, FAILED) for _ in range(4)]
    assert [a["permission"] for a in answers] == ["allow", "allow", "deny", "deny"]
    # Run again at once, the command is told at its third run (denied with the
    # reason) and stopped at its fourth: the stop is earned.
    told = answers[2]["agent_message"]
    assert "same arguments 3 times" in told and "the run will be stopped" in told
    stop = answers[3]["agent_message"]
    assert stop.startswith("[loopwatch] Run stopped") and "same arguments" in stop
    assert answers[3]["user_message"] == stop  # the user sees why, too
    assert answers[3]["agentMessage"] == stop  # and under the first release's names
    # Any later call is denied before it runs, until the user's next prompt.
    later = cursor.shell("git status", "clean\n")
    assert later["permission"] == "deny"
    assert later["agent_message"].startswith(stop) and "next message" in later["agent_message"]
    assert cursor.send("beforeSubmitPrompt", prompt="try another way", attachments=[]) == {
        "continue": True
    }
    assert cursor.shell("git status", "clean\n") == {"permission": "allow"}
    assert '"answer": "stop"' in cursor.log()


def test_a_looping_mcp_tool_is_denied(project: Path) -> None:
    """MCP tool input comes as the JSON text of an object (or an object)."""
    cursor = Cursor(project, "conv-mcp")
    answers = []
    for n in range(4):
        query = '{"query": "SELECT * FROM users"}' if n % 2 else {"query": "SELECT * FROM users"}
        before = cursor.send("beforeMCPExecution", tool_name="database_query", tool_input=query,
                             url="http://localhost:3000")  # fmt: skip
        answers.append(before["permission"])
        if before["permission"] == "deny":
            assert "database_query" in before["agent_message"]
            break
        cursor.send("afterMCPExecution", tool_name="database_query", tool_input=query,
                    result_json='{"error": "no relation users"}', duration=3)  # fmt: skip
    assert answers == ["allow", "allow", "deny"]


def test_file_edits_are_counted_and_answered_with_nothing(project: Path) -> None:
    cursor = Cursor(project, "conv-edit")
    edit = {"file_path": str(project / "main.ts"),
            "edits": [{"old_string": "const foo = 1", "new_string": "const foo = 2"}]}  # fmt: skip
    assert cursor.send("afterFileEdit", **edit) == {}
    assert cursor.send("stop", status="completed", loop_count=0) == {}
    from loopwatch.stores.sqlite import SqliteStore

    stored = SqliteStore(Path(cursor.env["LOOPWATCH_STATE"])).get("conv-edit")
    assert stored is not None and stored.ncalls == 1


def test_on_loop_warn_allows_and_tells_the_agent(project: Path) -> None:
    (project / "loopwatch.toml").write_text('on_loop = "warn"\n')
    cursor = Cursor(project, "conv-warn")
    answers = [cursor.shell(FAILING, FAILED) for _ in range(4)]
    assert all(a["permission"] == "allow" for a in answers)
    assert any(a.get("agent_message", "").startswith("[loopwatch]") for a in answers)


def test_a_broken_configuration_lets_calls_through_and_says_so_once(project: Path) -> None:
    (project / "loopwatch.toml").write_text("on_lop = 'stop'\n")
    cursor = Cursor(project, "conv-broken")
    answers = [cursor.shell(FAILING, FAILED) for _ in range(5)]
    assert [a["permission"] for a in answers] == ["allow"] * 5
    told = [a["user_message"] for a in answers if "user_message" in a]
    assert len(told) == 1 and told[0].startswith("[loopwatch] Not watching this session")
    assert "on_lop" in told[0]
    failures = Path(cursor.env["LOOPWATCH_STATE"]).parent / "hook.log"
    assert "on_lop" in failures.read_text()


def test_a_result_cursor_gives_no_exit_code_for_has_no_known_outcome() -> None:
    from loopwatch.events import Event
    from loopwatch.hooks import cursor

    def result(output: str) -> Event:
        (event,) = cursor.events({"hook_event_name": "afterShellExecution", "output": output})
        assert "error" not in event  # not recorded: unknown, not "succeeded"
        return Event.from_dict(event)

    # so FORMAT.md's convention decides: a text that says it failed is an error
    assert result('Traceback (most recent call last):\n  File "x.py"').error is True
    assert result("3 files changed").error is False
