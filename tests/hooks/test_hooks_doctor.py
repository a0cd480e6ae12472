"""``loopwatch doctor``: per agent, whether the hooks are installed (project and user),
their command and whether it runs loopwatch; the configuration they load (refused
keys named, exit 2 when broken); the store; the last hook calls and errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from loopwatch.hooks import AGENTS

BIN = Path(sys.executable).parent


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (tmp_path / "home").mkdir()
    return root


def loopwatch(project: Path, *args: str, path: str | None = None) -> tuple[int, str]:
    """``loopwatch ARGS`` in the project, as a user runs it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWATCH", "XDG"))}
    env.update(HOME=str(project.parent / "home"),
               LOOPWATCH_STATE=str(project.parent / "state" / "state.db"),
               LOOPWATCH_HOOK_DAEMON_IDLE="5",  # the hook daemons it starts go soon
               PATH=path or f"{BIN}{os.pathsep}/usr/bin:/bin")  # fmt: skip
    env.pop("PYTHONPATH", None)
    proc = subprocess.run([str(BIN / "loopwatch"), *args], cwd=project, env=env,
                          capture_output=True, timeout=120)  # fmt: skip
    assert proc.stderr == b"" or args[0] == "hook", proc.stderr
    return proc.returncode, proc.stdout.decode()


def doctor(project: Path, path: str | None = None) -> tuple[int, dict[str, Any]]:
    code, out = loopwatch(project, "doctor", "--json", path=path)
    return code, json.loads(out)


def agent(report: dict[str, Any], name: str, scope: str = "project") -> dict[str, Any]:
    found: dict[str, Any] = next(
        a for a in report["agents"] if a["agent"] == name and a["scope"] == scope
    )
    return found


def test_nothing_installed_is_not_broken(project: Path) -> None:
    code, report = doctor(project)
    assert code == 0 and report["ok"]
    assert {(a["agent"], a["scope"]) for a in report["agents"]} == {
        (name, scope) for name in AGENTS for scope in ("project", "user")
    }
    assert not any(a["installed"] for a in report["agents"])
    assert report["config"] == {"file": None, "ok": True, "on_loop": "stop", "store": "memory://"}
    assert report["store"]["ok"] and report["store"]["url"].startswith("sqlite://")
    code, text = loopwatch(project, "doctor")
    assert code == 0 and "claude-code  project  not installed" in text


def test_installed_hooks_run_and_their_calls_are_listed(project: Path) -> None:
    assert loopwatch(project, "install", "claude-code")[0] == 0
    assert loopwatch(project, "install", "copilot-cli")[0] == 0
    assert loopwatch(project, "install", "opencode", "--user")[0] == 0
    code, report = doctor(project)
    assert code == 0, report
    claude = agent(report, "claude-code")
    assert claude["installed"] and claude["ok"] and claude["missing_events"] == []
    assert claude["commands"] == ["command -v loopwatch >/dev/null 2>&1 && exec loopwatch hook "
                                  "claude-code || true"]  # fmt: skip
    assert claude["runs"].startswith("loopwatch ") and sys.executable in claude["runs"]
    assert agent(report, "copilot-cli")["ok"] and agent(report, "opencode", "user")["ok"]
    assert sys.executable in agent(report, "opencode", "user")["commands"][0]
    assert not agent(report, "claude-code", "user")["installed"]
    # A hook call, then the doctor lists it.
    payload = {"session_id": "d1", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": "ls"}, "tool_use_id": "t",
               "cwd": str(project)}  # fmt: skip
    env = {**os.environ, "LOOPWATCH_STATE": str(project.parent / "state" / "state.db")}
    subprocess.run([str(BIN / "loopwatch"), "hook", "claude-code"],
                   input=json.dumps(payload).encode(), env=env, timeout=60,
                   check=True)  # fmt: skip
    _, report = doctor(project)
    [call] = report["calls"]
    assert (call["agent"], call["event"], call["session"], call["answer"]) == (
        "claude-code", "PreToolUse", "d1", "ok")  # fmt: skip
    code, text = loopwatch(project, "doctor")
    assert "claude-code PreToolUse d1: ok" in text and "runs: loopwatch" in text


def test_a_broken_configuration_names_the_key_and_fails(project: Path) -> None:
    (project / "loopwatch.toml").write_text("on_loop = 'stop'\n[repeated_call]\nstop_after = 4\n")
    code, report = doctor(project)
    assert code == 2 and not report["ok"]
    assert not report["config"]["ok"] and "stop_after" in report["config"]["error"]
    assert report["config"]["file"] == str(project / "loopwatch.toml")
    code, text = loopwatch(project, "doctor")
    assert code == 2 and "configuration: BROKEN" in text and "stop_after" in text
    # The hook itself lets calls through, logs why, and the doctor shows that too.
    payload = {"session_id": "d2", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": "ls"}, "cwd": str(project)}  # fmt: skip
    env = {**os.environ, "LOOPWATCH_STATE": str(project.parent / "state" / "state.db")}
    proc = subprocess.run([str(BIN / "loopwatch"), "hook", "claude-code"],
                          input=json.dumps(payload).encode(), env=env, capture_output=True,
                          timeout=60)  # fmt: skip
    assert proc.returncode == 0 and "stop_after" in json.loads(proc.stdout)["systemMessage"]
    _, report = doctor(project)
    assert report["calls"][-1]["answer"] == "notice"
    assert "stop_after" in report["errors"][-1] and "let through" in report["errors"][-1]


def test_a_command_that_finds_no_loopwatch_is_broken(project: Path) -> None:
    assert loopwatch(project, "install", "gemini-cli")[0] == 0
    code, report = doctor(project, path="/usr/bin:/bin")  # a teammate without loopwatch
    gemini = agent(report, "gemini-cli")
    assert code == 2 and gemini["installed"] and not gemini["ok"]
    assert gemini["runs"].startswith("no loopwatch answers this command")


def test_an_install_missing_events_is_broken(project: Path) -> None:
    settings = project / ".claude" / "settings.json"
    settings.parent.mkdir()
    command = "loopwatch hook claude-code"  # written by hand, PreToolUse only
    settings.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": command}]}]}}))  # fmt: skip
    code, report = doctor(project)
    claude = agent(report, "claude-code")
    assert code == 2 and claude["runs"].startswith("loopwatch ")
    assert claude["missing_events"] == ["PostToolUse", "PostToolUseFailure", "UserPromptSubmit"]
