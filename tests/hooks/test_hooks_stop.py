"""What a coding-agent user sees from the hooks, in each CLI's protocol: a stop that
stops (every later call denied until the user's next prompt, the turn ended where
the CLI can), a futile call denied before it runs, ``on_loop = "warn"`` advisory
only, results read the same live and from the session file, and a broken
configuration told to the user once per session.

Payload shapes are the ones the real CLIs sent (../shared/notes/coding-cli-hooks.md);
the CLIs themselves run in test_hooks_e2e.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwatch.hooks import gemini_cli, qwen_code
from loopwatch.hooks._dispatch import Answer, handle, run_hook
from loopwatch.hooks._events import copilot_result, gemini_result


@pytest.fixture(autouse=True)
def state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "state" / "state.db"
    monkeypatch.setenv("LOOPWATCH_STATE", str(path))
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    monkeypatch.delenv("COPILOT_CLI", raising=False)
    monkeypatch.chdir(tmp_path)
    return path


def out(answer: Answer) -> dict[str, Any]:
    assert answer.exit_code == 0, answer
    return json.loads(answer.stdout) if answer.stdout.strip() else {}


# -- one agent-neutral session driver --------------------------------------------------
Payload = Callable[..., dict[str, Any]]


def claude(event: str, session: str = "s", **kw: Any) -> dict[str, Any]:
    base = {"session_id": session, "cwd": "/tmp", "hook_event_name": event, "tool_name": "Bash"}
    if "command" in kw:
        base["tool_input"] = {"command": kw.pop("command")}
    if "n" in kw:
        base["tool_use_id"] = f"t{kw.pop('n')}"
    return {**base, **kw}


NOT_RUN = "[loopwatch] This call was not executed."
STOPPED = "[loopwatch] Run stopped"


def fail_loop(agent: str, pre: Payload, post: Payload, limit: int = 8) -> list[dict[str, Any]]:
    """The same failing command until a pre-tool answer stops the run; the pre-tool
    answers, in order. A stop is earned: the call the agent is told about is denied
    first (it does not run, so no post-tool event follows it), and the agent persisting
    is stopped."""
    answers = []
    for n in range(limit):
        answers.append(out(handle(agent, pre(n))))
        if _denied(answers[-1]):
            if _reason(answers[-1]).startswith(STOPPED):
                break
            continue
        handle(agent, post(n))
    return answers


def _denied(answer: dict[str, Any]) -> bool:
    spec = answer.get("hookSpecificOutput", {})
    return (
        spec.get("permissionDecision") == "deny"
        or answer.get("decision") == "deny"
        or answer.get("permissionDecision") == "deny"
        or "deny" in answer
    )


def _reason(answer: dict[str, Any]) -> str:
    """Why a call was denied, in the CLI's protocol."""
    spec = answer.get("hookSpecificOutput", {})
    found = (
        spec.get("permissionDecisionReason")
        or answer.get("permissionDecisionReason")
        or answer.get("reason")
        or answer.get("deny")
    )
    return found if isinstance(found, str) else ""


def assert_told_then_stopped(answers: list[dict[str, Any]]) -> None:
    """The same failure twice: the 3rd call denied to tell the agent, the 4th (it
    persisted) denied with the stop; the two before ran."""
    assert len(answers) == 4 and not any(_denied(a) for a in answers[:2])
    told, stopped = answers[2:]
    assert _denied(told) and _reason(told).startswith(NOT_RUN)
    assert _reason(told).endswith("If you do it again, the run will be stopped.")
    assert _denied(stopped) and _reason(stopped).startswith(STOPPED)
    assert "You were told at step" in _reason(stopped)


# -- after a stop, nothing runs until the user's next prompt ---------------------------
def test_after_a_stop_every_call_is_denied_until_the_next_prompt() -> None:
    def pre(n: int, command: str = "make test") -> dict[str, Any]:
        return claude("PreToolUse", command=command, n=n)

    def post(n: int) -> dict[str, Any]:
        return claude("PostToolUseFailure", command="make test", n=n, error="Exit code 2\nE1")

    answers = fail_loop("claude-code", pre, post)
    assert_told_then_stopped(answers)  # the 3rd told, the 4th stopped: failures wait a call
    stop = answers[-1]["hookSpecificOutput"]["permissionDecisionReason"]
    for n, command in enumerate(["git status", "ls", "cat README.md"], start=10):
        reason = out(handle("claude-code", pre(n, command)))["hookSpecificOutput"]
        assert reason["permissionDecision"] == "deny"
        assert reason["permissionDecisionReason"].startswith(stop)
        assert "until the user's next message" in reason["permissionDecisionReason"]
    assert out(handle("claude-code", claude("UserPromptSubmit", prompt="try another way"))) == {}
    assert out(handle("claude-code", pre(20, "git status"))) == {}  # the user lifted it


def test_a_stop_on_a_result_ends_the_turn_where_the_cli_can() -> None:
    """The same outcome from commands that differ: the stop is found on a result."""
    text = "config.yaml is missing: the build cannot start without it"
    answers: dict[str, list[dict[str, Any]]] = {}
    shapes: dict[str, tuple[Payload, Payload]] = {
        "claude-code": (
            lambda n: claude("PreToolUse", command=f"echo x # {n}", n=n),
            lambda n: claude("PostToolUse", command=f"echo x # {n}", n=n,
                             tool_response={"stdout": text, "stderr": ""}),
        ),
        "codex": (
            lambda n: claude("PreToolUse", command=f"echo x # {n}", n=n),
            lambda n: claude("PostToolUse", command=f"echo x # {n}", n=n, tool_response=text),
        ),
        "gemini-cli": (
            lambda n: {**claude("BeforeTool", command=f"echo x # {n}"),
                       "tool_name": "run_shell_command"},
            lambda n: {**claude("AfterTool", command=f"echo x # {n}"),
                       "tool_name": "run_shell_command",
                       "tool_response": {"llmContent": f"Output: {text}\nProcess Group PGID: "
                                                        f"{4000 + n}", "returnDisplay": text}},
        ),
        "qwen-code": (
            lambda n: {**claude("PreToolUse", command=f"echo x # {n}", n=n),
                       "tool_name": "run_shell_command"},
            lambda n: {**claude("PostToolUse", command=f"echo x # {n}", n=n),
                       "tool_name": "run_shell_command",
                       "tool_response": {"llmContent": text, "returnDisplay": text}},
        ),
        "opencode": (
            lambda n: {**claude("PreToolUse", command=f"echo x # {n}", n=n), "tool_name": "bash"},
            lambda n: {**claude("PostToolUse", command=f"echo x # {n}", n=n),
                       "tool_name": "bash", "tool_response": text, "exit": 0},
        ),
        "copilot-cli": (
            lambda n: {"sessionId": "s", "cwd": "/tmp", "hook_event_name": "preToolUse",
                       "toolName": "bash", "toolArgs": {"command": f"echo x # {n}"}},
            lambda n: {"sessionId": "s", "cwd": "/tmp", "hook_event_name": "postToolUse",
                       "toolName": "bash", "toolArgs": {"command": f"echo x # {n}"},
                       "toolResult": {"resultType": "success", "textResultForLlm":
                                      f"{text}\n<shellId: {n} completed with exit code 0>"}},
        ),
    }  # fmt: skip

    def own(agent: str, payload: dict[str, Any]) -> dict[str, Any]:  # a session per agent
        return {**payload, ("sessionId" if "sessionId" in payload else "session_id"): agent}

    for agent, (pre, post) in shapes.items():
        answers[agent] = []
        for n in range(10):
            assert not _denied(out(handle(agent, own(agent, pre(n)))))
            answers[agent].append(out(handle(agent, own(agent, post(n)))))
            if "Run stopped" in json.dumps(answers[agent][-1]):
                break
    reason = answers["codex"][-1]["stopReason"]
    assert reason.startswith("[loopwatch] Run stopped: Your last 5 steps achieved nothing new")

    def ends(answer: dict[str, Any]) -> bool:
        return set(answer) == {"continue", "stopReason"} and answer["continue"] is False

    # Gemini CLI ends the turn; Codex and Qwen Code put the reason in place of the
    # output (the turn goes on, every later call is denied).
    assert ends(answers["codex"][-1]) and ends(answers["qwen-code"][-1])
    assert ends(answers["gemini-cli"][-1])
    claude_end = answers["claude-code"][-1]  # ends the turn, the reason kept for the model
    assert claude_end["continue"] is False and claude_end["stopReason"] == reason
    assert claude_end["hookSpecificOutput"]["additionalContext"] == reason
    assert set(answers["opencode"][-1]) == {"stop"}
    assert set(answers["copilot-cli"][-1]) == {"additionalContext"}
    for answer in answers.values():
        assert json.dumps(answer).count("[loopwatch] Run stopped: Your last 5 steps") >= 1
    # Found on the same result in every CLI.
    assert {len(a) for a in answers.values()} == {len(answers["codex"])}
    # Qwen Code: the continuation after the stop ends the turn.
    resume = {"session_id": "qwen-code", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit",
              "prompt": ""}  # fmt: skip
    assert ends(out(handle("qwen-code", resume)))
    # Gemini CLI: a call after the stop is denied and ends the turn too.
    after = out(handle("gemini-cli", own("gemini-cli", shapes["gemini-cli"][0](50))))
    assert after["decision"] == "deny" and after["continue"] is False
    # OpenCode: denied and the turn aborted; Copilot CLI: denied.
    assert out(handle("opencode", own("opencode", shapes["opencode"][0](50))))["end_turn"] is True
    copilot = out(handle("copilot-cli", own("copilot-cli", shapes["copilot-cli"][0](50))))
    assert copilot["permissionDecision"] == "deny"


def test_a_stop_after_a_failed_call_in_claude_code_blocks_with_the_reason() -> None:
    """Claude Code ignores ``continue: false`` after a failed call: the model reads the
    reason (``decision: block``), and its next call is denied. A new target each time,
    failing the same way: no call repeats, so the stop is found on a result."""
    for n in range(12):
        answer = out(handle("claude-code", claude("PreToolUse", command=f"make t{n}", n=n)))
        assert not _denied(answer)
        after = out(handle("claude-code", claude(
            "PostToolUseFailure", command=f"make t{n}", n=n,
            error="Exit code 2\nmake: *** No rule to make target")))  # fmt: skip
        if after.get("decision") == "block":
            assert after["reason"].startswith("[loopwatch] Run stopped")
            assert "continue" not in after
            break
    else:
        pytest.fail("no stop on the failures")
    assert _denied(out(handle("claude-code", claude("PreToolUse", command="ls", n=99))))


def test_a_call_known_futile_before_it_runs_is_denied_before_it_runs() -> None:
    """The third no-op in a row: its stop does not depend on its result."""
    answers = []
    for n, command in enumerate([":", ": 'checking'", "true"]):
        answers.append(out(handle("claude-code", claude("PreToolUse", command=command, n=n))))
        if not _denied(answers[-1]):
            handle("claude-code", claude("PostToolUse", command=command, n=n,
                                         tool_response={"stdout": "", "stderr": ""}))  # fmt: skip
    assert [_denied(a) for a in answers] == [False, False, True]
    reason = answers[-1]["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("[loopwatch] Run stopped") and "do nothing" in reason
    # A stop like any other: the next call (a real one) waits for the user.
    assert _denied(out(handle("claude-code", claude("PreToolUse", command="make", n=9))))


def test_on_loop_skip_denies_the_futile_call_only(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_text('on_loop = "skip"\n')
    cwd = {"cwd": str(tmp_path)}
    for n, command in enumerate([":", "true", ":"]):
        answer = out(handle("claude-code", {**claude("PreToolUse", command=command, n=n), **cwd}))
        if n < 2:
            handle("claude-code", {**claude("PostToolUse", command=command, n=n), **cwd,
                                   "tool_response": {"stdout": "", "stderr": ""}})  # fmt: skip
    reason = answer["hookSpecificOutput"]["permissionDecisionReason"]
    assert reason.startswith("[loopwatch] This call was not executed")
    follow = {**claude("PreToolUse", command="make", n=9), **cwd}
    assert out(handle("claude-code", follow)) == {}  # a skip is not a stop


def test_on_loop_warn_keeps_the_hooks_advisory(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_text('on_loop = "warn"\n')
    cwd = {"cwd": str(tmp_path)}
    seen = []
    for n in range(10):
        for payload in (
            claude("PreToolUse", command="make", n=n),
            claude("PostToolUseFailure", command="make", n=n, error="Exit code 2"),
        ):
            answer = out(handle("claude-code", {**payload, **cwd}))
            assert not _denied(answer) and "continue" not in answer and "decision" not in answer
            seen.append(json.dumps(answer))
    for n, command in enumerate([":", ":", ":", ":"], start=20):
        answer = out(handle("claude-code", {**claude("PreToolUse", command=command, n=n), **cwd}))
        assert not _denied(answer)
    assert any("[loopwatch] Warning" in s for s in seen)


# -- Gemini CLI: one reading of a result, live and recorded ----------------------------
def _shell_output(text: str, pgid: int) -> str:
    body = f"Output: {text}\nExit Code: 1\nProcess Group PGID: {pgid}"
    return f"<untrusted_context>\n{body}\n</untrusted_context>"


def test_gemini_hook_reads_a_result_as_the_session_reader_does(tmp_path: Path) -> None:
    from loopwatch import TraceRun, read_runs

    text = "cat: /no/such/file.txt: No such file or directory"
    llm = _shell_output(text, 6486)
    payload = {"session_id": "g", "hook_event_name": "AfterTool",
               "tool_name": "run_shell_command", "tool_input": {"command": "cat x"},
               "tool_response": {"llmContent": llm, "returnDisplay": text}}  # fmt: skip
    [live] = gemini_cli.events(payload)
    session = tmp_path / "session-1.jsonl"
    records = [
        {"sessionId": "g", "projectHash": "h", "startTime": "t", "lastUpdated": "t"},
        {"id": "m1", "type": "gemini", "content": "", "toolCalls": [{
            "id": "c1", "name": "run_shell_command", "args": {"command": "cat x"},
            "status": "success",
            "result": [{"functionResponse": {"id": "c1", "name": "run_shell_command",
                                             "response": {"output": llm + "<hook_context>"
                                                          "[loopwatch] Warning</hook_context>"}}}],
        }]},
    ]  # fmt: skip
    session.write_text("".join(json.dumps(r) + "\n" for r in records))
    [run] = [r for r in read_runs(str(session)) if isinstance(r, TraceRun)]
    recorded = next(e for e in run.events if e["kind"] == "tool_result")
    assert recorded["text"] == live["text"] == f"Output: {text}\nExit Code: 1"


@given(st.text(max_size=200), st.integers(1, 10**7), st.integers(1, 10**7))
def test_a_new_process_group_id_is_not_a_new_result(text: str, a: int, b: int) -> None:
    assert gemini_result({"llmContent": _shell_output(text, a)}) == gemini_result(
        [{"functionResponse": {"response": {"output": _shell_output(text, b)}}}]
    )


def test_gemini_loop_with_a_new_pid_each_time_is_denied_at_the_3rd_call() -> None:
    """The two results before it differ only in their process group id: the same
    result, so the 3rd identical call is denied before it runs (to tell the agent),
    and the 4th stops the run."""

    def before(n: int) -> dict[str, Any]:
        return {"session_id": "gp", "cwd": "/tmp", "hook_event_name": "BeforeTool",
                "tool_name": "run_shell_command",
                "tool_input": {"command": "cat f.txt"}}  # fmt: skip

    def after(n: int) -> dict[str, Any]:
        llm = _shell_output("cat: f.txt: No such file or directory", 4100 + 97 * n)
        return {**before(n), "hook_event_name": "AfterTool",
                "tool_response": {"llmContent": llm, "returnDisplay": "cat: f.txt"}}  # fmt: skip

    answers = fail_loop("gemini-cli", before, after)
    assert_told_then_stopped(answers)


# -- Qwen Code, Copilot CLI -------------------------------------------------------------
def test_qwen_continuations_are_not_user_prompts() -> None:
    resume = {"session_id": "q", "cwd": "/tmp", "hook_event_name": "UserPromptSubmit",
              "prompt": ""}  # fmt: skip
    assert qwen_code.events(resume) == [] and qwen_code.resumes(resume)
    assert out(handle("qwen-code", resume)) == {}  # nothing stopped: nothing to end

    def call(n: int) -> dict[str, Any]:
        return {**claude("PreToolUse", "q", command="ls /x", n=n), "tool_name": "run_shell_command"}

    def pre(n: int) -> dict[str, Any]:
        if n:  # Qwen Code sends one before each request: a denied call to tell ends nothing
            assert out(handle("qwen-code", resume)) == {}
        return call(n)

    def post(n: int) -> dict[str, Any]:
        return {**call(n), "hook_event_name": "PostToolUse",
                "tool_response": {"llmContent": f"Output: ls: cannot access '/x'\nExit Code: 2"
                                                f"\nProcess Group PGID: {n + 900}"}}  # fmt: skip

    answers = fail_loop("qwen-code", pre, post)
    assert_told_then_stopped(answers)  # the 3rd call told, the 4th stopped
    ended = out(handle("qwen-code", resume))
    assert ended["continue"] is False and ended["stopReason"].startswith("[loopwatch] Run stopped")
    prompt = {**resume, "prompt": "ok, try something else"}
    assert out(handle("qwen-code", prompt)) == {} and out(handle("qwen-code", resume)) == {}


def test_copilot_event_from_the_command_line_and_shell_ids() -> None:
    assert copilot_result("x\n<shellId: 7 completed with exit code 2>") == ("x", True)
    assert copilot_result("x\n<shellId: 8 completed with exit code 0>") == ("x", False)
    assert copilot_result("plain") == ("plain", False)

    def pre(n: int) -> bytes:
        return json.dumps({"sessionId": "cp", "timestamp": 1, "cwd": "/tmp", "toolName": "bash",
                           "toolArgs": {"command": "npm test"}}).encode()  # fmt: skip

    def post(n: int) -> bytes:
        result = {
            "resultType": "success",
            "textResultForLlm": f"1 failing\n<shellId: {n} completed with exit code 1>",
        }
        return json.dumps(
            {
                "sessionId": "cp",
                "timestamp": 2,
                "cwd": "/tmp",
                "toolName": "bash",
                "toolArgs": {"command": "npm test"},
                "toolResult": result,
            }
        ).encode()

    answers = []
    for n in range(8):
        answer = run_hook("copilot-cli", pre(n), event="preToolUse")
        assert answer.exit_code == 0
        answers.append(json.loads(answer.stdout) if answer.stdout.strip() else {})
        if _denied(answers[-1]):
            if _reason(answers[-1]).startswith(STOPPED):
                break
            continue  # a denied call does not run: no postToolUse
        run_hook("copilot-cli", post(n), event="postToolUse")
    assert_told_then_stopped(answers)  # the 3rd call told, the 4th stopped


def test_claude_code_hooks_step_aside_under_copilot(monkeypatch: pytest.MonkeyPatch) -> None:
    """Copilot CLI also runs a repository's .claude/settings.json hooks: loopwatch's
    answers there only through its own copilot-cli hook, never counting twice."""
    monkeypatch.setenv("COPILOT_CLI", "1")
    for n in range(8):
        assert handle("claude-code", claude("PreToolUse", "cc", command="make", n=n)) == Answer()
        handle("claude-code", claude("PostToolUseFailure", "cc", command="make", n=n, error="E"))
    from loopwatch.stores.sqlite import SqliteStore, default_state_path

    assert not default_state_path().exists() or SqliteStore(default_state_path()).get("cc") is None


# -- a broken configuration, told once per session in each CLI's channel ---------------
@pytest.mark.parametrize(
    ("agent", "payload", "told"),
    [
        ("claude-code", claude("PreToolUse", command="ls", n=1), lambda a: a["systemMessage"]),
        ("codex", claude("PreToolUse", command="ls", n=1), lambda a: a["systemMessage"]),
        ("gemini-cli", {**claude("BeforeTool", command="ls"), "tool_name": "run_shell_command"},
         lambda a: a["systemMessage"]),
        ("qwen-code", {"session_id": "s", "hook_event_name": "Stop"},
         lambda a: a["systemMessage"]),
        ("opencode", claude("PreToolUse", command="ls", n=1), lambda a: a["notice"]),
    ],
)  # fmt: skip
def test_broken_config_is_told_once_per_session(
    agent: str, payload: dict[str, Any], told: Callable[[dict[str, Any]], str], tmp_path: Path
) -> None:
    (tmp_path / "loopwatch.toml").write_text("[repeated_call]\nstop_after = 3\n")
    payload = {**payload, "cwd": str(tmp_path)}
    message = told(out(handle(agent, payload)))
    assert message.startswith("[loopwatch] Not watching this session")
    assert "stop_after" in message and "repeated_call" in message
    assert out(handle(agent, payload)) in ({}, {"notice": ""})  # once


def test_broken_config_in_copilot_cli_is_a_timeline_line(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_text("on_lop = 'stop'\n")
    payload = {"sessionId": "c", "cwd": str(tmp_path), "toolName": "bash", "toolArgs": {}}
    answer = run_hook("copilot-cli", json.dumps(payload).encode(), event="preToolUse")
    [line, final] = answer.stdout.splitlines()
    progress = json.loads(line)
    assert progress["type"] == "progress" and "on_lop" in progress["message"]
    assert json.loads(final) == {}  # allowed
    # Qwen Code waits for its Stop hook: nothing on the events before it.
    qwen = {"session_id": "q", "cwd": str(tmp_path), "hook_event_name": "PreToolUse",
            "tool_name": "run_shell_command", "tool_input": {"command": "ls"}}  # fmt: skip
    assert out(handle("qwen-code", qwen)) == {}
    told = out(handle("qwen-code", {**qwen, "hook_event_name": "Stop"}))
    assert "on_lop" in told["systemMessage"]
