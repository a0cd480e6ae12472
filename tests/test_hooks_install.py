"""``loopwatch install | uninstall``: settings files written or merged, idempotent, other
hooks and settings kept; and the hook entry script the installed command runs."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loopwatch.cli import main
from loopwatch.hooks.install import hook_command, install, settings_path, uninstall

SRC = Path(__file__).resolve().parents[1] / "src"
ENTRY = SRC / "loopwatch" / "hooks" / "_entry.py"


def test_install_claude_code_project_keeps_other_hooks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}
    settings.write_text(json.dumps({"model": "opus", "hooks": {"PreToolUse": [mine]}}))
    assert main(["install", "claude-code"]) == 0
    out = capsys.readouterr().out
    assert "added the PreToolUse hook" in out and "PostToolUseFailure" in out
    data = json.loads(settings.read_text())
    assert data["model"] == "opus"
    pre = data["hooks"]["PreToolUse"]
    assert pre[0] == mine and len(pre) == 2
    assert pre[1] == {
        "matcher": "*",
        "hooks": [{"type": "command", "command": hook_command("claude-code"), "timeout": 30}],
    }
    assert set(data["hooks"]) == {"PreToolUse", "PostToolUse", "PostToolUseFailure",
                                  "UserPromptSubmit"}  # fmt: skip
    assert "matcher" not in data["hooks"]["UserPromptSubmit"][0]
    before = settings.read_text()
    assert main(["install", "claude-code", "--project"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert settings.read_text() == before  # idempotent
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(settings.read_text()) == {"model": "opus", "hooks": {"PreToolUse": [mine]}}
    assert main(["uninstall", "claude-code"]) == 0
    assert "nothing to change" in capsys.readouterr().out


def test_install_user_scope_and_other_agents(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("CODEX_HOME", raising=False)
    monkeypatch.chdir(tmp_path)
    assert main(["install", "gemini-cli", "--user"]) == 0
    gemini = json.loads((tmp_path / "home" / ".gemini" / "settings.json").read_text())
    before = gemini["hooks"]["BeforeTool"][0]
    assert before["matcher"] == ".*" and before["hooks"][0]["timeout"] == 30_000
    assert set(gemini["hooks"]) == {"BeforeTool", "AfterTool", "BeforeAgent"}
    assert main(["install", "codex"]) == 0
    codex = json.loads((tmp_path / ".codex" / "hooks.json").read_text())
    assert set(codex["hooks"]) == {"PreToolUse", "PostToolUse", "UserPromptSubmit"}
    monkeypatch.setenv("CODEX_HOME", str(tmp_path / "ch"))
    assert settings_path("codex", "user") == tmp_path / "ch" / "hooks.json"
    assert main(["uninstall", "gemini-cli", "--user"]) == 0
    assert json.loads((tmp_path / "home" / ".gemini" / "settings.json").read_text()) == {}


def test_an_older_command_is_updated_not_duplicated(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    old = {"type": "command", "command": "loopwatch hook claude-code"}
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [old]}]}}))
    changes = install("claude-code", path)
    assert "updated the PreToolUse hook's command" in changes
    pre = json.loads(path.read_text())["hooks"]["PreToolUse"]
    assert len(pre) == 1 and pre[0]["hooks"][0]["command"] == hook_command("claude-code")
    assert install("claude-code", path) == []
    # Another agent's loopwatch entry in the same file is not ours to touch.
    assert uninstall("codex", path) == []


def test_broken_settings_file_is_an_error_not_a_rewrite(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    settings = tmp_path / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{not json")
    assert main(["install", "claude-code"]) == 2
    assert settings.read_text() == "{not json"
    assert "settings.json" in capsys.readouterr().err


def test_hook_entry_script_skips_the_package_init(tmp_path: Path) -> None:
    """The installed command runs _entry.py: only the guard's modules are imported,
    and the answer is the same as through ``-m loopwatch.hooks``."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(SRC)
    env["LOOPWATCH_STATE"] = str(tmp_path / "state.db")
    check = subprocess.run(
        [sys.executable, "-c",
         "import sys, runpy\n"
         f"sys.path.insert(0, {str(ENTRY.parent)!r})\n"
         f"import importlib.util as u\n"
         f"spec = u.spec_from_file_location('entry', {str(ENTRY)!r})\n"
         "m = u.module_from_spec(spec); spec.loader.exec_module(m)\n"
         "m._bare_package()\n"
         "from loopwatch.hooks._dispatch import make_guard\n"
         "g = make_guard({'cwd': '/'})\n"
         "print(g.observe('r', {'kind': 'tool_call', 'name': 'x'}).action)\n"
         "print(hasattr(sys.modules['loopwatch'], 'Guard'), 'loopwatch.traces' in sys.modules,"
         " 'loopwatch.scan' in sys.modules)\n"],
        capture_output=True, env=env, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr.decode()
    assert check.stdout.decode().split() == ["ok", "False", "False", "False"]
    payload = {"session_id": "e", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": "ls"}, "tool_use_id": "t",
               "cwd": str(tmp_path)}  # fmt: skip
    outputs = []
    commands = [
        [sys.executable, str(ENTRY), "claude-code"],
        [sys.executable, "-m", "loopwatch.hooks", "claude-code"],
        shlex.split(hook_command("claude-code")),
    ]
    for n, argv in enumerate(commands):
        data = json.dumps({**payload, "session_id": f"e{n}"}).encode()
        proc = subprocess.run(argv, input=data, capture_output=True, env=env, timeout=60)
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        outputs.append(proc.stdout)
    assert outputs == [b"", b"", b""]
    from loopwatch.stores.sqlite import SqliteStore

    for n in range(3):  # each: a (synthetic) model turn, then the call
        state = SqliteStore(tmp_path / "state.db").get(f"e{n}")
        assert state is not None and state.n == 2
