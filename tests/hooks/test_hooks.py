"""``loopwatch hook``: payload shapes observed from the real CLIs
(../shared/notes/coding-cli-hooks.md), answers in each agent's protocol, state
shared between hook processes, and never blocking the agent on its own failure."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from loopwatch.hooks._dispatch import Answer, handle, run_hook
from loopwatch.stores.sqlite import SqliteStore

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own state file, and no loopwatch.toml from the repo."""
    path = tmp_path / "state" / "state.db"
    monkeypatch.setenv("LOOPWATCH_STATE", str(path))
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def claude_pre(command: str, n: int, session: str = "s-1", cwd: str = "/tmp") -> dict[str, Any]:
    return {
        "session_id": session,
        "transcript_path": f"/root/.claude/projects/-app/{session}.jsonl",
        "cwd": cwd,
        "prompt_id": "p-1",
        "permission_mode": "bypassPermissions",
        "effort": "medium",
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run it"},
        "tool_use_id": f"toolu_{n:04d}",
    }


def claude_failure(
    command: str, n: int, error: str, session: str = "s-1", cwd: str = "/tmp"
) -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": cwd,
        "hook_event_name": "PostToolUseFailure",
        "tool_name": "Bash",
        "tool_input": {"command": command, "description": "Run it"},
        "tool_use_id": f"toolu_{n:04d}",
        "error": error,
        "is_interrupt": False,
    }


def claude_post(command: str, n: int, stdout: str, session: str = "s-1") -> dict[str, Any]:
    return {
        "session_id": session,
        "cwd": "/tmp",
        "hook_event_name": "PostToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": command},
        "tool_use_id": f"toolu_{n:04d}",
        "tool_response": {
            "stdout": stdout,
            "stderr": "",
            "interrupted": False,
            "isImage": False,
            "noOutputExpected": False,
        },
        "duration_ms": 12,
    }


def decision(answer: Answer) -> str:
    """allow / warn / deny / block / end (the turn), read back from a Claude Code or
    Codex answer."""
    assert answer.exit_code == 0 and answer.stderr == ""
    if not answer.stdout:
        return "allow"
    out = json.loads(answer.stdout)
    spec = out.get("hookSpecificOutput", {})
    if spec.get("permissionDecision") == "deny":
        assert spec["permissionDecisionReason"].startswith("[loopwatch]")
        return "deny"
    if out.get("continue") is False:
        assert out["stopReason"].startswith("[loopwatch] Run stopped")
        return "end"
    if out.get("decision") == "block":
        return "block"
    assert spec.get("additionalContext", "").startswith("[loopwatch] Warning")
    return "warn"


def warn_before_stop(project: Path) -> str:
    """``project`` (the payloads' ``cwd``) with RepeatedCall's former thresholds pinned
    in its loopwatch.toml, warn at the 3rd identical call and stop at the 5th: the
    defaults stop the 3rd after two same results with no warning first, and the tests
    that use it are about the warning's channel before a stop."""
    (project / "loopwatch.toml").write_text("[repeated_call]\nstop_at = 5\n")
    return str(project)


def test_claude_code_failing_command_is_warned_then_denied(tmp_path: Path) -> None:
    cwd = warn_before_stop(tmp_path)
    seen = []
    for n in range(8):
        pre = handle("claude-code", claude_pre("pytest tests/", n, cwd=cwd))
        seen.append(decision(pre))
        if seen[-1] == "deny":
            break
        failure = claude_failure("pytest tests/", n, "Exit code 1\nFAILED", cwd=cwd)
        assert decision(handle("claude-code", failure)) in ("allow", "warn", "block")
    assert "warn" in seen and seen[-1] == "deny"
    assert seen[0] == "allow"
    reason = json.loads(handle("claude-code", claude_pre("pytest tests/", 99, cwd=cwd)).stdout)[
        "hookSpecificOutput"
    ]["permissionDecisionReason"]
    assert "pytest tests/" in reason  # the finding's sentence names the call


def test_healthy_session_is_untouched() -> None:
    handle("claude-code", {"session_id": "h", "hook_event_name": "UserPromptSubmit",
                           "prompt": "list the files", "cwd": "/tmp"})  # fmt: skip
    for n, cmd in enumerate(["ls", "cat README.md", "pytest -x", "git diff", "git status"]):
        assert handle("claude-code", claude_pre(cmd, n, "h")) == Answer()
        assert handle("claude-code", claude_post(cmd, n, f"output of {cmd}", "h")) == Answer()


def test_sessions_are_separate_runs() -> None:
    for n in range(3):
        handle("claude-code", claude_pre("make", n, "a"))
        handle("claude-code", claude_failure("make", n, "Exit code 2", "a"))
    assert decision(handle("claude-code", claude_pre("make", 0, "b"))) == "allow"


def test_events_from_payloads() -> None:
    from loopwatch.hooks import claude_code, codex, gemini_cli

    assert claude_code.events(claude_pre("ls", 1)) == [
        {"kind": "tool_call", "name": "Bash", "args": {"command": "ls", "description": "Run it"},
         "id": "toolu_0001"}
    ]  # fmt: skip
    [failed] = claude_code.events(claude_failure("ls", 1, "Exit code 2\nno such file"))
    assert failed["error"] is True and failed["text"] == "Exit code 2\nno such file"
    [ok] = claude_code.events(claude_post("ls", 1, "a\nb"))
    assert ok["error"] is False and ok["text"] == "a\nb"
    assert claude_code.events({"hook_event_name": "UserPromptSubmit", "prompt": "hi"}) == [
        {"kind": "user", "text": "hi"}
    ]
    assert claude_code.events({"hook_event_name": "Stop", "session_id": "x"}) == []
    codex_post = {"session_id": "c", "turn_id": "t", "hook_event_name": "PostToolUse",
                  "tool_name": "Bash", "tool_input": {"command": "ls"}, "tool_use_id": "call_1",
                  "tool_response": "a\nb\n", "model": "gpt-5"}  # fmt: skip
    assert codex.events(codex_post)[0]["text"] == "a\nb\n"
    gem_after = {"session_id": "g", "hook_event_name": "AfterTool",
                 "tool_name": "run_shell_command", "tool_input": {"command": "ls"},
                 "tool_response": {"llmContent": "a\nb", "returnDisplay": "a\nb"}}  # fmt: skip
    [gem] = gemini_cli.events(gem_after)
    assert gem["text"] == "a\nb" and gem["error"] is False and "id" not in gem


def test_codex_denies_in_its_protocol() -> None:
    answers = []
    for n in range(8):
        pre = {"session_id": "cx", "turn_id": "t1", "transcript_path": None, "cwd": "/tmp",
               "hook_event_name": "PreToolUse", "model": "gpt-5", "permission_mode": "default",
               "tool_name": "Bash", "tool_input": {"command": "cargo test"},
               "tool_use_id": f"call_{n}"}  # fmt: skip
        answers.append(decision(handle("codex", pre)))
        post = {**pre, "hook_event_name": "PostToolUse", "tool_response": "error[E0425]: x"}
        handle("codex", post)
    assert answers[0] == "allow" and "deny" in answers


def test_gemini_cli_answers_json_always(tmp_path: Path) -> None:
    """Deny before the tool; a warning about a call comes with its result (BeforeTool
    has no context channel in Gemini CLI)."""
    cwd = warn_before_stop(tmp_path)
    befores, afters = [], []
    for n in range(8):
        before = {"session_id": "gm", "transcript_path": "/t.json", "cwd": cwd,
                  "hook_event_name": "BeforeTool", "timestamp": f"2026-01-01T00:00:0{n}Z",
                  "tool_name": "run_shell_command",
                  "tool_input": {"command": "npm test", "description": "test"}}  # fmt: skip
        answer = handle("gemini-cli", before)
        assert answer.exit_code == 0
        befores.append(json.loads(answer.stdout))
        if befores[-1].get("decision") == "deny":
            break
        response = {"llmContent": "1 failing", "returnDisplay": "1 failing"}
        after = {**before, "hook_event_name": "AfterTool", "tool_response": response}
        afters.append(json.loads(handle("gemini-cli", after).stdout))
    assert befores[0] == {} and afters[0] == {}
    assert befores[-1]["reason"].startswith("[loopwatch] Run stopped")
    assert all("hookSpecificOutput" not in b for b in befores)
    warned = [a for a in afters if a]
    assert warned, afters
    spec = warned[0]["hookSpecificOutput"]
    assert spec["hookEventName"] == "AfterTool"
    assert spec["additionalContext"].startswith("[loopwatch] Warning")


def test_bad_payload_is_let_through_and_logged(state: Path) -> None:
    assert run_hook("claude-code", b"not json {") == Answer()
    assert run_hook("claude-code", b"[1, 2]") == Answer()
    assert run_hook("gemini-cli", b"").stdout.strip() == "{}"
    log = (state.parent / "hook.log").read_text()
    assert "unreadable payload" in log and "let through" in log


def test_corrupt_state_file_never_blocks(state: Path) -> None:
    state.parent.mkdir(parents=True)
    state.write_bytes(b"\x00garbage" * 500)
    assert handle("claude-code", claude_pre("ls", 1)) == Answer()
    assert list(state.parent.glob("state.db.corrupt-*"))  # moved aside, a fresh file in use


def test_locked_state_file_never_blocks(state: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_STORE", f"sqlite://{state}?timeout=0.2")
    handle("claude-code", claude_pre("ls", 1))
    holder = sqlite3.connect(state, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        assert handle("claude-code", claude_pre("ls", 2)) == Answer()
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert "locked" in (state.parent / "hook.log").read_text()


def test_unknown_agent_and_bad_config_never_block(tmp_path: Path) -> None:
    """A broken loopwatch.toml lets every call through, and the user is told once per
    session, in Claude Code's message to the user (systemMessage), naming the key."""
    assert handle("windsurf", claude_pre("ls", 1)) == Answer()
    (tmp_path / "loopwatch.toml").write_text("on_loop = 'explode'\n")
    first = json.loads(handle("claude-code", claude_pre("ls", 1, cwd=str(tmp_path))).stdout)
    assert set(first) == {"systemMessage"}
    assert first["systemMessage"].startswith("[loopwatch] Not watching this session")
    assert "on_loop" in first["systemMessage"] and "explode" in first["systemMessage"]
    for n in range(2, 8):  # let through, silently: the same failing call never denied
        assert handle("claude-code", claude_pre("ls", n, cwd=str(tmp_path))) == Answer()
        handle("claude-code", claude_failure("ls", n, "Exit code 2"))
    other = handle("claude-code", claude_pre("ls", 1, session="s-2", cwd=str(tmp_path)))
    assert "systemMessage" in json.loads(other.stdout)  # another session is told too
    assert "on_loop" in (tmp_path / "state" / "hook.log").read_text()


def test_project_config_is_used(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_text("[repeated_call]\nwarn_at = 2\nstop_at = 3\n")
    results = []
    for n in range(3):
        results.append(decision(handle("claude-code", claude_pre("ls", n, "cfg", str(tmp_path)))))
        handle("claude-code", claude_post("ls", n, "same", "cfg"))
    assert results == ["allow", "warn", "deny"]


def run_process(agent: str, payload: dict[str, Any], env: dict[str, str]) -> tuple[int, str, str]:
    proc = subprocess.run(
        [sys.executable, "-m", "loopwatch.hooks", agent],
        input=json.dumps(payload).encode(),
        capture_output=True,
        env=env,
        timeout=60,
    )
    return proc.returncode, proc.stdout.decode(), proc.stderr.decode()


def hook_env(state: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["LOOPWATCH_STATE"] = str(state)
    return env


def test_real_processes_share_state_and_deny(state: Path) -> None:
    env = hook_env(state)
    outcomes = []
    for n in range(7):
        code, out, err = run_process("claude-code", claude_pre("npm run build", n), env)
        assert code == 0, err
        outcomes.append(decision(Answer(code, out, err)))
        if outcomes[-1] == "deny":
            break
        code, _, err = run_process(
            "claude-code", claude_failure("npm run build", n, "Exit code 1\nERR! missing"), env
        )
        assert code == 0, err
    assert outcomes[0] == "allow" and outcomes[-1] == "deny"


def test_loopwatch_hook_subcommand(state: Path) -> None:
    env = hook_env(state)
    proc = subprocess.run(
        [sys.executable, "-c", "import sys; from loopwatch.cli import main; sys.exit(main())",
         "hook", "claude-code"],
        input=json.dumps(claude_pre("ls", 1)).encode(), capture_output=True, env=env, timeout=60,
    )  # fmt: skip
    assert proc.returncode == 0 and proc.stdout == b"" and proc.stderr == b""
    assert SqliteStore(state).get("s-1") is not None


def test_concurrent_hook_processes_lose_no_step(state: Path) -> None:
    """Codex runs matching hooks concurrently: 16 result hooks at once on one session."""
    env = hook_env(state)
    run_process("codex", {"session_id": "cc", "hook_event_name": "UserPromptSubmit",
                          "prompt": "go"}, env)  # fmt: skip

    def one(n: int) -> int:
        payload = {"session_id": "cc", "hook_event_name": "PostToolUse", "tool_name": "Bash",
                   "tool_input": {"command": f"echo {n}"}, "tool_use_id": f"call_{n}",
                   "tool_response": f"{n}\n"}  # fmt: skip
        return run_process("codex", payload, env)[0]

    with ThreadPoolExecutor(16) as pool:
        assert list(pool.map(one, range(16))) == [0] * 16
    stored = SqliteStore(state).get("cc")
    assert stored is not None and stored.n == 17  # the prompt and every result
