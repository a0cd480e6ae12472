"""``loopwatch install | uninstall``: settings files written or merged at the git root,
idempotent, other hooks and settings kept, uninstall leaving what was there before;
a project command any teammate can run (and that is silent where loopwatch is not
installed), a user command pinned to this interpreter; and the fast entry the
commands run."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from loopwatch.cli import main
from loopwatch.hooks import AGENTS
from loopwatch.hooks.install import hook_command, install, project_root, settings_path, uninstall

SRC = Path(__file__).resolve().parents[2] / "src"
ENTRY = SRC / "loopwatch" / "hooks" / "_entry.py"
BIN = Path(sys.executable).parent


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository (its root holds .git), the working directory in a subfolder of
    it, and a home of its own."""
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    (root / "src" / "pkg").mkdir(parents=True)
    monkeypatch.chdir(root / "src" / "pkg")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    for name in ("CODEX_HOME", "COPILOT_HOME", "XDG_CONFIG_HOME"):
        monkeypatch.delenv(name, raising=False)
    return root


def files_under(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}


def test_install_claude_code_at_the_git_root_keeps_other_hooks(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    mine = {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}
    original = {"model": "opus", "hooks": {"PreToolUse": [mine]}}
    settings.write_text(json.dumps(original))
    assert project_root() == repo
    assert main(["install", "claude-code"]) == 0  # from a subfolder: at the root
    out = capsys.readouterr().out
    assert "added the PreToolUse hook" in out and "PostToolUseFailure" in out
    assert not (repo / "src" / "pkg" / ".claude").exists()
    data = json.loads(settings.read_text())
    assert data["model"] == "opus"
    pre = data["hooks"]["PreToolUse"]
    assert pre[0] == mine and len(pre) == 2
    command = "command -v loopwatch >/dev/null 2>&1 && exec loopwatch hook claude-code || true"
    assert command == hook_command("claude-code")
    assert pre[1] == {"matcher": "*", "hooks": [{"type": "command", "command": command,
                                                  "timeout": 30}]}  # fmt: skip
    assert sys.executable not in settings.read_text()  # nothing only this machine has
    assert set(data["hooks"]) == {"PreToolUse", "PostToolUse", "PostToolUseFailure",
                                  "UserPromptSubmit"}  # fmt: skip
    assert "matcher" not in data["hooks"]["UserPromptSubmit"][0]
    before = settings.read_text()
    assert main(["install", "claude-code", "--project"]) == 0
    assert "nothing to change" in capsys.readouterr().out
    assert settings.read_text() == before  # idempotent
    assert main(["uninstall", "claude-code"]) == 0
    assert json.loads(settings.read_text()) == original
    assert main(["uninstall", "claude-code"]) == 0
    assert "nothing to change" in capsys.readouterr().out


@pytest.mark.parametrize("agent", AGENTS)
@pytest.mark.parametrize("scope", ["project", "user"])
def test_uninstall_removes_exactly_what_install_added(repo: Path, agent: str, scope: str) -> None:
    home = Path(os.environ["HOME"])
    before = files_under(repo) | files_under(home) if home.exists() else files_under(repo)
    path = settings_path(agent, scope)
    assert install(agent, path, scope)
    assert install(agent, path, scope) == []  # idempotent
    text = path.read_text()
    assert f"hook {agent}" in text
    if scope == "user":
        assert sys.executable in text and "-m _loopwatch_entry hook" in text
    else:
        assert sys.executable not in text and "exec loopwatch hook" in text
        assert path.is_relative_to(repo) and not path.is_relative_to(repo / "src")
    assert uninstall(agent, path)
    after = files_under(repo) | (files_under(home) if home.exists() else set())
    assert after == before
    assert not path.parent.exists() or any(path.parent.iterdir())  # no empty folder left


def test_each_agent_gets_its_own_format(repo: Path) -> None:
    for agent in AGENTS:
        install(agent, settings_path(agent))
    gemini = json.loads((repo / ".gemini" / "settings.json").read_text())["hooks"]
    assert set(gemini) == {"BeforeTool", "AfterTool", "BeforeAgent"}
    assert gemini["BeforeTool"][0]["matcher"] == ".*"
    assert gemini["BeforeTool"][0]["hooks"][0]["timeout"] == 30_000
    assert set(json.loads((repo / ".codex" / "hooks.json").read_text())["hooks"]) == {
        "PreToolUse", "PostToolUse", "UserPromptSubmit"}  # fmt: skip
    qwen = json.loads((repo / ".qwen" / "settings.json").read_text())["hooks"]
    assert set(qwen) == {"PreToolUse", "PostToolUse", "PostToolUseFailure", "UserPromptSubmit",
                         "Stop"}  # fmt: skip
    copilot = json.loads((repo / ".github" / "hooks" / "loopwatch.json").read_text())
    assert copilot["version"] == 1
    assert {e: h[0]["bash"].split(" hook ")[1] for e, h in copilot["hooks"].items()} == {
        e: f"copilot-cli {e} || true"
        for e in ("preToolUse", "postToolUse", "postToolUseFailure", "userPromptSubmitted")
    }
    plugin = (repo / ".opencode" / "plugins" / "loopwatch.js").read_text()
    assert json.dumps(hook_command("opencode")) in plugin and "__COMMAND__" not in plugin


def test_user_install_goes_to_each_agents_home(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = Path(os.environ["HOME"])
    assert settings_path("claude-code", "user") == home / ".claude" / "settings.json"
    assert settings_path("copilot-cli", "user") == home / ".copilot" / "hooks" / "loopwatch.json"
    assert settings_path("opencode", "user") == home / ".config/opencode/plugins/loopwatch.js"
    monkeypatch.setenv("CODEX_HOME", str(repo / "ch"))
    assert settings_path("codex", "user") == repo / "ch" / "hooks.json"
    assert main(["install", "gemini-cli", "--user"]) == 0
    command = json.loads((home / ".gemini" / "settings.json").read_text())["hooks"][
        "BeforeTool"][0]["hooks"][0]["command"]  # fmt: skip
    assert command == hook_command("gemini-cli", "user")
    assert shlex.split(command)[:3] == ["test", "-x", sys.executable]


def test_an_older_command_is_updated_not_duplicated(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    old = {"type": "command", "command": f"{sys.executable} {ENTRY} claude-code"}
    path.write_text(json.dumps({"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [old]}]}}))
    changes = install("claude-code", path, "project")
    assert "updated the PreToolUse hook's command" in changes
    pre = json.loads(path.read_text())["hooks"]["PreToolUse"]
    assert len(pre) == 1 and pre[0]["hooks"][0]["command"] == hook_command("claude-code")
    assert install("claude-code", path, "project") == []
    # Another agent's loopwatch entry in the same file is not ours to touch.
    assert uninstall("codex", path) == []


def test_broken_settings_file_is_an_error_not_a_rewrite(
    repo: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = repo / ".claude" / "settings.json"
    settings.parent.mkdir()
    settings.write_text("{not json")
    assert main(["install", "claude-code"]) == 2
    assert settings.read_text() == "{not json"
    assert "settings.json" in capsys.readouterr().err


def test_unknown_agents_are_usage_errors_naming_the_supported_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for argv in (["install", "windsurf"], ["uninstall", "windsurf"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
        err = capsys.readouterr().err
        assert "windsurf" in err and all(agent in err for agent in AGENTS)
    proc = subprocess.run([str(BIN / "loopwatch"), "hook", "windsurf"], input=b"{}",
                          capture_output=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == b""
    assert b"windsurf" in proc.stderr and all(a.encode() in proc.stderr for a in AGENTS)


def _run_command(
    command: str, payload: dict[str, object], path: str, state: Path
) -> tuple[int, bytes]:
    env = {"PATH": path, "HOME": str(state.parent), "LOOPWATCH_STATE": str(state),
           "LOOPWATCH_HOOK_DAEMON_IDLE": "5"}  # fmt: skip
    proc = subprocess.run(["/bin/sh", "-c", command], input=json.dumps(payload).encode(),
                          capture_output=True, env=env, timeout=60)  # fmt: skip
    assert proc.stderr == b"", proc.stderr
    return proc.returncode, proc.stdout


def test_the_project_command_runs_for_anyone_with_loopwatch_and_is_silent_without(
    tmp_path: Path,
) -> None:
    payload = {"session_id": "p", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": ":"}, "tool_use_id": "t",
               "cwd": str(tmp_path)}  # fmt: skip
    state = tmp_path / "state.db"
    with_loopwatch = f"{BIN}:/usr/bin:/bin"
    command = hook_command("claude-code")
    answers = []
    for n in range(3):
        call = {**payload, "tool_use_id": f"t{n}"}
        code, out = _run_command(command, call, with_loopwatch, state)
        assert code == 0
        answers.append(out)
        result = {**call, "hook_event_name": "PostToolUse", "tool_response": {"stdout": ""}}
        _run_command(command, result, with_loopwatch, state)
    assert answers[:2] == [b"", b""] and b'"permissionDecision":"deny"' in answers[2]
    # A teammate without loopwatch: nothing at all, exit 0 (a failing pre-tool hook
    # would deny every call in Copilot CLI).
    for agent in AGENTS:
        assert _run_command(hook_command(agent), payload, "/usr/bin:/bin", state) == (0, b"")
    # The user command, pinned to this interpreter; silent too once it is gone.
    code, out = _run_command(hook_command("claude-code", "user"), payload, "/usr/bin:/bin", state)
    assert code == 0
    gone = hook_command("claude-code", "user").replace(sys.executable, "/no/such/python")
    assert _run_command(gone, payload, "/usr/bin:/bin", state) == (0, b"")


def test_hook_entries_skip_the_package_init(tmp_path: Path) -> None:
    """``loopwatch hook``, ``python -m _loopwatch_entry hook`` and the older
    ``.../hooks/_entry.py`` import only the guard's modules, and answer as
    ``python -m loopwatch.hooks`` does."""
    env = dict(os.environ)
    env["LOOPWATCH_STATE"] = str(tmp_path / "state.db")
    check = subprocess.run(
        [sys.executable, "-c",
         "import sys, _loopwatch_entry\n"
         "_loopwatch_entry.bare_package()\n"
         "from loopwatch.hooks._dispatch import make_guard\n"
         "g = make_guard({'cwd': '/'})\n"
         "print(g.observe('r', {'kind': 'tool_call', 'name': 'x'}).action)\n"
         "print(hasattr(sys.modules['loopwatch'], 'Guard'), 'loopwatch.traces' in sys.modules,"
         " 'loopwatch.scan' in sys.modules)\n"
         # imported only when needed: a log record, a configuration file to parse
         "print(*(m in sys.modules for m in ('logging', 'tomllib')))\n"],
        capture_output=True, env=env, timeout=60,
    )  # fmt: skip
    assert check.returncode == 0, check.stderr.decode()
    assert check.stdout.decode().split()[:4] == ["ok", "False", "False", "False"]
    assert check.stdout.decode().split()[4:] == ["False", "False"]
    payload = {"session_id": "e", "hook_event_name": "PreToolUse", "tool_name": "Bash",
               "tool_input": {"command": "ls"}, "tool_use_id": "t",
               "cwd": str(tmp_path)}  # fmt: skip
    commands = [
        [str(BIN / "loopwatch"), "hook", "claude-code"],
        [sys.executable, "-m", "_loopwatch_entry", "hook", "claude-code"],
        [sys.executable, str(ENTRY), "claude-code"],
        [sys.executable, "-m", "loopwatch.hooks", "claude-code"],
    ]
    for n, argv in enumerate(commands):
        data = json.dumps({**payload, "session_id": f"e{n}"}).encode()
        proc = subprocess.run(argv, input=data, capture_output=True, env=env, timeout=60)
        assert (proc.returncode, proc.stdout, proc.stderr) == (0, b"", b""), argv
    from loopwatch.stores.sqlite import SqliteStore

    for n in range(len(commands)):  # each: a (synthetic) model turn, then the call
        state = SqliteStore(tmp_path / "state.db").get(f"e{n}")
        assert state is not None and state.n == 2
