"""End to end with the real coding CLIs from npm, offline: each runs non-interactively
against a scripted fake model server on 127.0.0.1, with loopwatch installed as its hook
by ``loopwatch install`` (the project command: ``loopwatch`` from PATH).

The looping sessions use a stubborn model: it keeps making the same failing call
whatever it is told, so what the test sees is what the hooks do, not what a polite
model does. Each one checks that the call is denied by the 5th time, that the model
read loopwatch's reason, that nothing ran after the stop (every later call denied,
or the turn ended where the CLI can end it), and that the CLI's own record of the
session, scanned offline, says stop too where loopwatch reads it. A healthy session
is untouched.

The CLIs come from scripts/services.d/coding-clis.sh (``make test`` runs it); a test
is skipped when its CLI is not on PATH. How to run each one offline (endpoints, flags,
the settings that silently skip hooks) is in ../shared/notes/coding-cli-hooks.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from model_server import FakeServer, _message, _sse, tool_results

from loopwatch.hooks.install import install, settings_path

FAILING = "ls /no/such/dir/loopwatch-e2e"
HEALTHY = ["echo one", "echo two", "echo three"]
STUBBORN = 12  # calls a stubborn model makes, whatever it is told


TOLD = "[loopwatch] This call was not executed"


def was_blocked(text: str) -> bool:
    """A tool result that says loopwatch blocked the call (not only warned)."""
    return "[loopwatch] Run stopped" in text or "[loopwatch] This call was not executed" in text


def repeating(command: str, times: int = STUBBORN) -> Iterator[str]:
    return iter([command] * times)


# RepeatedCall's former thresholds, warn at the 3rd identical call and stop at the 5th:
# the tests that check a warning reached the model with a result before the 5th call was
# denied (the defaults tell the 3rd failing call by denying it, no result warned) pin
# them in the project, with ErrorLoop's stops that would come first on a result off or
# back at the 5th: its stop of a re-sent failing call (the 3rd same error) and its stop
# of the same error (the 4th now: on the 4th result, before the 5th call is denied).
WARN_THEN_STOP = "[repeated_call]\nstop_at = 5\n[error_loop]\nstop_at = 5\nresent_stop_at = 0\n"


def project_config(tmp_path: Path, toml: str) -> None:
    """The project's loopwatch.toml (``tmp_path / "proj"``, where the CLI runs)."""
    (tmp_path / "proj").mkdir()
    (tmp_path / "proj" / "loopwatch.toml").write_text(toml)


def with_loopwatch(env: dict[str, str]) -> dict[str, str]:
    """The CLI's environment: loopwatch on PATH (as for any user who installed it, and
    what the project command looks for), no PYTHONPATH, no user config of the tests."""
    env = {k: v for k, v in env.items() if k != "PYTHONPATH"}
    env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
    return env


def run_cli(
    argv: list[str], project: Path, env: dict[str, str], check: bool = True
) -> tuple[Any, list[Any]]:
    """Run a CLI in ``project`` with loopwatch on PATH; its JSON output lines."""
    proc = subprocess.run(argv, cwd=project, env=with_loopwatch(env), capture_output=True,
                          timeout=180, stdin=subprocess.DEVNULL)  # fmt: skip
    if check:
        assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return proc, lines


class Script:
    """A scripted model: the next command of ``commands`` per request that offers tools,
    then a closing text. A polite model (``stubborn=False``) also closes once a result
    says loopwatch blocked a call. ``results(request)`` reads the tool results the CLI
    sent back, in the CLI's wire format."""

    def __init__(self, commands: Iterator[str], stubborn: bool = False) -> None:
        self.commands = commands
        self.stubborn = stubborn
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def next_command(self, results: list[str]) -> str | None:
        if not self.stubborn and any(was_blocked(r) for r in results):
            return None
        return next(self.commands, None)

    def all_results(self) -> list[str]:
        return self.results(self.seen[-1]) if self.seen else []

    def results(self, request: dict[str, Any]) -> list[str]:
        raise NotImplementedError


def blocked_then_ran(results: list[str]) -> tuple[int, int]:
    """How many calls ran before the first blocked one, and how many ran after it."""
    first = next((i for i, r in enumerate(results) if was_blocked(r)), None)
    assert first is not None, f"no call was blocked: {results[-3:]}"
    after = [r for r in results[first:] if "[loopwatch]" not in r and "blocked" not in r.lower()]
    return first, len(after)


def assert_stopped(script: Script, turn_ends: bool, results: list[str] | None = None) -> list[str]:
    """The stubborn loop was denied by the 5th call, the model (or, where the turn
    ended first, the CLI's record: ``results``) has loopwatch's reason, and nothing ran
    after the first denial. A stop is earned: the first denial may be the call the agent
    is told about (not run, "If you do it again..."), then the next one stops the run:
    every later call was denied, or the turn ended at the stop."""
    results = script.all_results() if results is None else results
    ran_before, ran_after = blocked_then_ran(results)
    assert ran_before <= 4, results  # denied by the 5th identical call
    assert ran_after == 0, results
    blocked = [r for r in results if was_blocked(r)]
    assert any(s in blocked[0] for s in ("same arguments", "same error", "nothing new")), blocked[0]
    stop = next((i for i, r in enumerate(results) if "[loopwatch] Run stopped" in r), None)
    assert stop is not None, results
    told = results[ran_before:stop]  # at most one told denial before the stop
    assert len(told) <= 1 and all(was_blocked(r) and "Run stopped" not in r for r in told)
    if turn_ends:  # the CLI ended the turn: at most one more request, to read the deny
        assert len(script.seen) <= stop + 2, results
    else:  # the model went on calling, and every call was denied
        assert len(results) == STUBBORN, results
    return results


def stream_results(lines: list[Any]) -> list[str]:
    """The tool results in a Claude-style stream-json log (Claude Code, Qwen Code)."""
    return [
        json.dumps(block.get("content"))
        for line in lines
        if line.get("type") == "user"
        for block in line["message"]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def scan_transcripts(folder: Path, fmt: str) -> list[str]:
    """Verdicts of ``loopwatch scan FOLDER`` over the sessions a CLI wrote there."""
    from loopwatch import Config, Scanner, TraceRun, read_runs

    runs = [r for r in read_runs(str(folder)) if isinstance(r, TraceRun)]
    assert all(r.meta.get("format") == fmt for r in runs)
    return [Scanner(Config()).scan(r.to_dict()).verdict for r in runs]


# The hook events that come before a tool runs, in each CLI's protocol.
PRE_TOOL = frozenset({"PreToolUse", "preToolUse", "BeforeTool"})


def hook_stop_call(state: Path, session: str) -> int | None:
    """The tool call (1-based) at which the live hook stopped the session, from its
    ``calls.log``: counted over the pre-tool events, a stop on a result counting as its
    call's; None when it was not stopped. A call denied to tell the agent first (a
    ``skip`` under the default ``on_loop = "stop"``) is the scan's warning, not its
    stop (these tests never configure ``on_loop = "skip"``)."""
    calls = 0
    for line in (state.parent / "calls.log").read_text().splitlines():
        record = json.loads(line)
        if record["session"] != session:
            continue
        calls += record["event"] in PRE_TOOL
        if record["answer"] == "stop":
            return calls
    return None


def assert_scan_agrees(folder: Path, fmt: str, state: Path, project: Path) -> str:
    """``loopwatch scan`` of the session log the CLI wrote under ``folder``, with the
    project's configuration, says what the live hook said: the same verdict, at the
    same tool call, and the stop's sentence is the one the model was given (the CLI
    recorded it as the blocked call's result). Returns the verdict."""
    from loopwatch import Config, Scanner, TraceRun, read_runs

    found = list(read_runs(str(folder)))
    runs = [r for r in found if isinstance(r, TraceRun) and r.meta.get("format") == fmt]
    assert len(runs) == 1, found
    [run] = runs
    report = Scanner(Config.load(start=project)).scan(run.to_dict())
    hook_at = hook_stop_call(state, run.run_id)
    if report.first_stop is None:
        scan_at = None
    else:
        scan_at = sum(e["kind"] == "tool_call" for e in run.events[: report.first_stop + 1])
    assert scan_at == hook_at, (report.to_dict(), hook_at)
    assert report.verdict == ("ok" if hook_at is None else "stop"), report.to_dict()
    if hook_at is not None:
        stop = next(f for f in report.findings if str(f.severity) == "stop")
        said = [e.get("text", "") for e in run.events if e["kind"] == "tool_result"]
        assert any(f"[loopwatch] Run stopped: {stop.message}" in t for t in said), said
    return str(report.verdict)


def hook_log(state: Path) -> str:
    path = state.parent / "hook.log"
    return path.read_text() if path.exists() else ""


def stored_calls(state: Path, session: str) -> int:
    from loopwatch.stores.sqlite import SqliteStore

    stored = SqliteStore(state).get(session)
    assert stored is not None
    return int(stored.ncalls)


# -- Claude Code: the Messages API, streamed -------------------------------------------
class ClaudeScript(Script):
    def results(self, request: dict[str, Any]) -> list[str]:
        return tool_results(request)

    def __call__(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        with self.lock:
            n = len(self.seen) + 1000
            if not request.get("tools"):  # a side request (title, topic): a short answer
                _sse(handler, _message(n, [{"type": "text", "text": "ok"}], "end_turn"))
                return
            self.seen.append(request)
            command = self.next_command(self.results(request))
        if command is None:
            _sse(handler, _message(n, [{"type": "text", "text": "Stopping here."}], "end_turn"))
            return
        call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                "input": {"command": command, "description": "run it"}}  # fmt: skip
        _sse(handler, _message(n, [call], "tool_use"))


def run_claude(tmp_path: Path, script: ClaudeScript) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    project.mkdir(exist_ok=True)
    home.mkdir()
    install("claude-code", settings_path("claude-code", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    with FakeServer(script) as server:
        env.update(HOME=str(home), ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.port}",
                   ANTHROPIC_API_KEY="sk-fake", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1", IS_SANDBOX="1", LOOPWATCH_STATE=str(state))  # fmt: skip
        proc, lines = run_cli(
            ["claude", "-p", "Run the tests and fix what fails.", "--output-format",
             "stream-json", "--verbose", "--permission-mode", "bypassPermissions"],
            project, env,
        )  # fmt: skip
    return proc, lines, state


needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="claude not on PATH")


@needs_claude
def test_claude_code_stubborn_loop_is_denied_and_stays_denied(tmp_path: Path) -> None:
    """Claude Code runs no hook after a failed call that could end the turn
    (``continue: false`` is ignored on PostToolUseFailure and PreToolUse): the model
    is told, and every call it makes after the stop is denied."""
    project_config(tmp_path, WARN_THEN_STOP)
    script = ClaudeScript(repeating(FAILING), stubborn=True)
    _, lines, state = run_claude(tmp_path, script)
    assert_stopped(script, turn_ends=False)
    # Before the block, the warning reached the model as the hook's additional context.
    assert any("[loopwatch] Warning" in json.dumps(r) for r in script.seen)
    result = [x for x in lines if x.get("type") == "result"][-1]
    assert len(result["permission_denials"]) >= STUBBORN - 4
    assert hook_log(state) == ""
    # The session's own transcript, scanned offline, says stop too.
    assert scan_transcripts(tmp_path / "home" / ".claude" / "projects", "claude_code") == ["stop"]


@needs_claude
def test_claude_code_stop_after_a_result_ends_the_turn(tmp_path: Path) -> None:
    """Commands that differ but keep printing the same thing: the stop is found on a
    (successful) result, and ``continue: false`` ends the turn there."""
    said = "config.yaml is missing: the build cannot start without it"
    commands = iter([f"echo '{said}' # try {i}" for i in range(STUBBORN)])
    script = ClaudeScript(commands, stubborn=True)
    _, lines, _ = run_claude(tmp_path, script)
    result = [x for x in lines if x.get("type") == "result"][-1]
    assert result.get("terminal_reason") == "hook_stopped", result
    ran = script.all_results()
    assert len(ran) < STUBBORN and not any("[loopwatch] Run stopped" in r for r in ran)
    transcript = "".join(p.read_text() for p in (tmp_path / "home").rglob("*.jsonl"))
    assert "hook_stopped_continuation" in transcript and "[loopwatch] Run stopped" in transcript


@needs_claude
def test_claude_code_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = ClaudeScript(iter(HEALTHY))
    _, lines, state = run_claude(tmp_path, script)
    assert [r.strip() for r in script.all_results()] == ["one", "two", "three"]
    assert not any("[loopwatch]" in json.dumps(r) for r in script.seen)
    session = next(x["session_id"] for x in lines if x.get("type") == "system")
    assert stored_calls(state, session) == 3  # the hooks saw every call
    assert scan_transcripts(tmp_path / "home" / ".claude" / "projects", "claude_code") == ["ok"]


# -- Gemini CLI: generateContent (routing) and streamGenerateContent ------------------
class GeminiScript(Script):
    def results(self, request: dict[str, Any]) -> list[str]:
        return [
            json.dumps(part["functionResponse"])
            for content in request.get("contents", [])
            for part in content.get("parts", [])
            if "functionResponse" in part
        ]

    @staticmethod
    def reply(handler: BaseHTTPRequestHandler, part: dict[str, Any], stream: bool) -> None:
        payload = {
            "candidates": [{"content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5,
                              "totalTokenCount": 10},
        }  # fmt: skip
        data = json.dumps(payload).encode()
        handler.send_response(200)
        if stream:
            handler.send_header("content-type", "text/event-stream")
            handler.end_headers()
            handler.wfile.write(b"data: " + data + b"\r\n\r\n")
        else:
            handler.send_header("content-type", "application/json")
            handler.send_header("content-length", str(len(data)))
            handler.end_headers()
            handler.wfile.write(data)
        handler.wfile.flush()

    def __call__(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        if ":generateContent" in handler.path:  # the model router's JSON-schema call
            text = json.dumps({"complexity_reasoning": "simple", "complexity_score": 1})
            self.reply(handler, {"text": text}, stream=False)
            return
        with self.lock:
            self.seen.append(request)
            command = self.next_command(self.results(request))
        if command is None:
            part: dict[str, Any] = {"text": "Stopping here."}
        else:
            part = {"functionCall": {"name": "run_shell_command", "args": {"command": command}}}
        self.reply(handler, part, stream=True)


def run_gemini(tmp_path: Path, script: GeminiScript) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    (home / ".gemini").mkdir(parents=True)
    project.mkdir(exist_ok=True)
    user_settings = {
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "model": {"disableLoopDetection": True, "skipNextSpeakerCheck": True},
    }
    (home / ".gemini" / "settings.json").write_text(json.dumps(user_settings))
    install("gemini-cli", settings_path("gemini-cli", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GEMINI", "GOOGLE"))}
    with FakeServer(script) as server:
        env.update(HOME=str(home), GOOGLE_GEMINI_BASE_URL=f"http://127.0.0.1:{server.port}",
                   GEMINI_API_KEY="fake", GEMINI_CLI_TRUST_WORKSPACE="true",
                   LOOPWATCH_STATE=str(state))  # fmt: skip
        proc, lines = run_cli(
            ["gemini", "-p", "Run the tests and fix what fails.", "--output-format",
             "stream-json", "--yolo"],
            project, env,
        )  # fmt: skip
    return proc, lines, state


needs_gemini = pytest.mark.skipif(shutil.which("gemini") is None, reason="gemini not on PATH")


@needs_gemini
def test_gemini_cli_loop_with_a_new_pid_each_run_is_denied_and_ends(tmp_path: Path) -> None:
    """Every result of the failing ``cat`` ends with a new ``Process Group PGID``: the
    hook reads results as the session reader does, without it, so the repeats are
    repeats. The 5th call is denied (the thresholds pinned for the warning before it);
    the model's next call ends the turn."""
    project_config(tmp_path, WARN_THEN_STOP)
    script = GeminiScript(repeating("cat /no/such/file.txt"), stubborn=True)
    _, lines, state = run_gemini(tmp_path, script)
    results = [x for x in lines if x.get("type") == "tool_result"]
    pids = {r.split("PGID: ")[1][:8] for r in script.all_results() if "PGID: " in r}
    assert len(pids) >= 4  # the output carried a different pid every time
    denied = [i for i, r in enumerate(results) if was_blocked(str(r.get("output")))]
    assert denied and denied[0] <= 4 and results[denied[0]]["status"] == "error", results
    assert_stopped(script, turn_ends=True)
    assert "Agent execution stopped by hook: [loopwatch] Run stopped" in json.dumps(results[-1])
    assert hook_log(state) == ""
    # Before the block, the warning reached the model with a result (AfterTool context).
    assert any("<hook_context>[loopwatch] Warning" in r for r in script.all_results())
    # The session file Gemini CLI wrote, scanned offline, says stop too.
    assert scan_transcripts(tmp_path / "home" / ".gemini" / "tmp", "gemini_cli") == ["stop"]


def broken_config(tmp_path: Path) -> None:
    project_config(tmp_path, "on_lop = 'stop'\n")


NOT_WATCHING = "[loopwatch] Not watching this session for loops: unknown configuration key 'on_lop'"


@needs_gemini
def test_gemini_cli_broken_config_lets_calls_through_and_says_so_once(tmp_path: Path) -> None:
    broken_config(tmp_path)
    script = GeminiScript(repeating(FAILING, 6), stubborn=True)
    proc, lines, state = run_gemini(tmp_path, script)
    assert [x["status"] for x in lines if x.get("type") == "tool_result"] == ["success"] * 6
    assert proc.stderr.decode().count(f"Hook system message: {NOT_WATCHING}") == 1
    assert "on_lop" in hook_log(state)


@needs_gemini
def test_gemini_cli_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = GeminiScript(iter(HEALTHY))
    _, lines, state = run_gemini(tmp_path, script)
    results = [x for x in lines if x.get("type") == "tool_result"]
    assert [r["status"] for r in results] == ["success"] * 3
    assert [str(r["output"]).strip() for r in results] == ["one", "two", "three"]
    session = next(x["session_id"] for x in lines if x.get("type") == "init")
    assert stored_calls(state, session) == 3
    assert scan_transcripts(tmp_path / "home" / ".gemini" / "tmp", "gemini_cli") == ["ok"]


# -- Codex: the Responses API, streamed ------------------------------------------------
class CodexScript(Script):
    def results(self, request: dict[str, Any]) -> list[str]:
        return [
            json.dumps(item.get("output"))
            for item in request.get("input", [])
            if isinstance(item, dict) and item.get("type") == "function_call_output"
        ]

    def __call__(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        with self.lock:
            self.seen.append(request)
            n = len(self.seen)
            command = self.next_command(self.results(request))
        item: dict[str, Any]
        if command is None:
            item = {"type": "message", "id": f"msg_{n}", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "Stopping here.",
                                 "annotations": []}]}  # fmt: skip
        else:
            item = {"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}",
                    "name": "exec_command", "arguments": json.dumps({"cmd": command}),
                    "status": "completed"}  # fmt: skip
        usage = {"input_tokens": 10, "input_tokens_details": {"cached_tokens": 0},
                 "output_tokens": 5, "output_tokens_details": {"reasoning_tokens": 0},
                 "total_tokens": 15}  # fmt: skip
        response = {"id": f"resp_{n}", "object": "response", "status": "completed",
                    "output": [item], "usage": usage}  # fmt: skip
        _sse(handler, [
            {"type": "response.created",
             "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ])  # fmt: skip


def run_codex(tmp_path: Path, script: CodexScript) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "codex-home", tmp_path / "state.db"
    project.mkdir(exist_ok=True)
    home.mkdir()
    install("codex", settings_path("codex", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX", "OPENAI"))}
    with FakeServer(script) as server:
        (home / "config.toml").write_text(
            'model = "gpt-5"\nmodel_provider = "fake"\n'
            "[model_providers.fake]\n"
            f'name = "fake"\nbase_url = "http://127.0.0.1:{server.port}/v1"\n'
            'wire_api = "responses"\nenv_key = "FAKE_MODEL_KEY"\n'
            "[features]\nhooks = true\n"
        )
        env.update(CODEX_HOME=str(home), HOME=str(home), FAKE_MODEL_KEY="fake",
                   LOOPWATCH_STATE=str(state))  # fmt: skip
        # Without --trust and --dangerously-bypass-hook-trust, project hooks are skipped
        # with no error; without --disable plugins it looks up code-hosting hosts.
        proc, lines = run_cli(
            ["codex", "exec", "--json", "--skip-git-repo-check", "--trust",
             "--dangerously-bypass-hook-trust", "--disable", "plugins", "--disable",
             "remote_plugin", "--dangerously-bypass-approvals-and-sandbox",
             "Run the tests and fix what fails."],
            project, env,
        )  # fmt: skip
    return proc, lines, state


needs_codex = pytest.mark.skipif(shutil.which("codex") is None, reason="codex not on PATH")


@needs_codex
def test_codex_stubborn_loop_is_denied_and_stays_denied(tmp_path: Path) -> None:
    project_config(tmp_path, WARN_THEN_STOP)
    script = CodexScript(repeating(FAILING), stubborn=True)
    _, lines, state = run_codex(tmp_path, script)
    results = assert_stopped(script, turn_ends=False)
    assert "blocked by PreToolUse hook" in next(r for r in results if was_blocked(r))
    ran = [x for x in lines if x.get("type") == "item.completed"
           and x["item"].get("type") == "command_execution"]  # fmt: skip
    assert 3 <= len(ran) <= 4
    # Before the block, the warning reached the model (additional context).
    assert any("[loopwatch] Warning" in json.dumps(req) for req in script.seen)
    assert hook_log(state) == ""
    # The rollout Codex wrote, scanned offline, says stop too.
    assert scan_transcripts(tmp_path / "codex-home" / "sessions", "codex") == ["stop"]


@needs_codex
def test_codex_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = CodexScript(iter(HEALTHY))
    _, lines, state = run_codex(tmp_path, script)
    ran = [x["item"] for x in lines if x.get("type") == "item.completed"
           and x["item"].get("type") == "command_execution"]  # fmt: skip
    assert [r["aggregated_output"].strip() for r in ran] == ["one", "two", "three"]
    assert not any("[loopwatch]" in json.dumps(req) for req in script.seen)
    session = next(x["thread_id"] for x in lines if x.get("type") == "thread.started")
    assert stored_calls(state, session) == 3  # the hooks saw every call
    assert scan_transcripts(tmp_path / "codex-home" / "sessions", "codex") == ["ok"]


# -- Qwen Code, OpenCode, Copilot CLI: OpenAI chat completions, streamed ----------------
class ChatScript(Script):
    """OpenAI-compatible ``/v1/chat/completions``; ``tool`` and ``arg`` name the CLI's
    shell tool and its command argument."""

    def __init__(self, commands: Iterator[str], stubborn: bool = False, tool: str = "bash",
                 arg: str = "command") -> None:  # fmt: skip
        super().__init__(commands, stubborn)
        self.tool, self.arg = tool, arg
        self.last: str | None = None  # the command of the last request answered
        self.retries = 0  # requests the CLI sent again unchanged

    def results(self, request: dict[str, Any]) -> list[str]:
        texts = []
        for message in request.get("messages", []):
            if message.get("role") != "tool":
                continue
            content = message.get("content")
            if isinstance(content, list):
                content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
            texts.append(str(content))
        return texts

    def __call__(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        with self.lock:
            n = len(self.seen)
            command = None
            if request.get("tools"):  # not a side request (a title)
                if self.seen and request.get("messages") == self.seen[-1].get("messages"):
                    # the CLI's HTTP client sent the same request again (a retry on a
                    # slow answer, under load): the same answer, and not another turn
                    self.retries += 1
                    n, command = n - 1, self.last
                else:
                    self.seen.append(request)
                    command = self.last = self.next_command(self.results(request))
        delta: dict[str, Any]
        if command is None:
            delta, finish = {"role": "assistant", "content": "Stopping here."}, "stop"
        else:
            call = {
                "index": 0,
                "id": f"call_{n}",
                "type": "function",
                "function": {"name": self.tool, "arguments": json.dumps({self.arg: command})},
            }
            delta, finish = (
                {"role": "assistant", "content": None, "tool_calls": [call]},
                "tool_calls",
            )
        base = {"id": f"chatcmpl-{n}", "object": "chat.completion.chunk", "created": 1700000000,
                "model": request.get("model", "fake-model")}  # fmt: skip
        usage = {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
        _sse(handler, [
            {**base, "type": "chunk",
             "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
            {**base, "type": "chunk", "usage": usage,
             "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
        ], named=False)  # fmt: skip


def run_qwen(tmp_path: Path, script: ChatScript) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    (home / ".qwen").mkdir(parents=True)
    project.mkdir(exist_ok=True)
    install("qwen-code", settings_path("qwen-code", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("QWEN", "OPENAI", "GEMINI"))}
    with FakeServer(script) as server:
        user = {
            "modelProviders": {"openai": [{"id": "fake-model", "envKey": "FAKE_MODEL_KEY",
                "baseUrl": f"http://127.0.0.1:{server.port}/v1", "generationConfig": {}}]},
            "security": {"auth": {"selectedType": "openai"}},
            "model": {"name": "fake-model", "skipLoopDetection": True,
                      "skipNextSpeakerCheck": True},
            "privacy": {"usageStatisticsEnabled": False}, "telemetry": {"enabled": False},
            "general": {"enableAutoUpdate": False}, "ide": {"enabled": False},
            "ui": {"enableFollowupSuggestions": False},
        }  # fmt: skip
        (home / ".qwen" / "settings.json").write_text(json.dumps(user))
        env.update(HOME=str(home), FAKE_MODEL_KEY="fake", LOOPWATCH_STATE=str(state))
        proc, lines = run_cli(
            ["qwen", "Run the tests and fix what fails.", "--output-format", "stream-json",
             "--yolo"],
            project, env,
        )  # fmt: skip
    return proc, lines, state


def qwen_logs(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".qwen" / "projects"


def opencode_data(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".local" / "share" / "opencode"


def copilot_logs(tmp_path: Path) -> Path:
    return tmp_path / "home" / ".copilot" / "session-state"


needs_qwen = pytest.mark.skipif(shutil.which("qwen") is None, reason="qwen not on PATH")


@needs_qwen
def test_qwen_code_loop_is_denied_and_the_turn_ends(tmp_path: Path) -> None:
    script = ChatScript(repeating(FAILING), stubborn=True, tool="run_shell_command")
    _, lines, state = run_qwen(tmp_path, script)
    # The turn ended before the model was asked again: the deny is in Qwen's record.
    results = assert_stopped(script, turn_ends=True, results=stream_results(lines))
    assert sum(TOLD in r for r in results) == 1  # denied to tell the model, then stopped
    # the two first failed alike: the 3rd call denied to tell the model, the 4th stopped
    assert len(script.seen) == 4
    assert hook_log(state) == ""
    # The session log Qwen Code wrote, scanned offline, stops at the same call.
    assert assert_scan_agrees(qwen_logs(tmp_path), "qwen_code", state, tmp_path / "proj") == "stop"


@needs_qwen
def test_qwen_code_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = ChatScript(iter(HEALTHY), tool="run_shell_command")
    _, lines, state = run_qwen(tmp_path, script)
    assert [json.loads(r).strip() for r in stream_results(lines)] == ["one", "two", "three"]
    assert not any("[loopwatch]" in json.dumps(r) for r in script.seen)
    session = next(x["session_id"] for x in lines if x.get("session_id"))
    assert stored_calls(state, session) == 3  # continuation prompts are not user turns
    assert assert_scan_agrees(qwen_logs(tmp_path), "qwen_code", state, tmp_path / "proj") == "ok"


def run_opencode(tmp_path: Path, script: ChatScript) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    config_dir = home / ".config" / "opencode"
    for folder in (project / ".opencode", config_dir):
        # OpenCode installs its plugin SDK into each config folder at start-up (from
        # registry.npmjs.org) unless this lock names it; loopwatch's plugin needs none.
        (folder / "node_modules").mkdir(parents=True)
        lock = {"lockfileVersion": 3, "packages": {"": {"dependencies": {
            "@opencode-ai/plugin": "*"}}}}  # fmt: skip
        (folder / "package-lock.json").write_text(json.dumps(lock))
    install("opencode", settings_path("opencode", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENCODE", "OPENAI"))}
    with FakeServer(script) as server:
        config = {"model": "fake/fake-model", "small_model": "fake/fake-model",
                  "permission": "allow", "autoupdate": False, "share": "disabled",
                  "provider": {"fake": {"npm": "@ai-sdk/openai-compatible", "name": "Fake",
                      "options": {"baseURL": f"http://127.0.0.1:{server.port}/v1",
                                  "apiKey": "{env:FAKE_MODEL_KEY}"},
                      "models": {"fake-model": {"name": "fake", "tool_call": True}}}}}  # fmt: skip
        (project / "opencode.json").write_text(json.dumps(config))
        # OpenCode takes the project folder from PWD, not from its working directory.
        env.update(HOME=str(home), PWD=str(project), FAKE_MODEL_KEY="fake",
                   OPENCODE_DISABLE_MODELS_FETCH="1", LOOPWATCH_STATE=str(state))  # fmt: skip
        env.pop("XDG_CONFIG_HOME", None)
        proc, lines = run_cli(
            ["opencode", "run", "--format", "json", "--auto", "Run the tests and fix what fails."],
            project, env, check=False,
        )  # fmt: skip
    return proc, lines, state


needs_opencode = pytest.mark.skipif(shutil.which("opencode") is None, reason="no opencode")


@needs_opencode
def test_opencode_loop_is_denied_and_the_turn_ends(tmp_path: Path) -> None:
    script = ChatScript(repeating(FAILING), stubborn=True)
    proc, lines, state = run_opencode(tmp_path, script)
    results = assert_stopped(script, turn_ends=True)
    assert sum(TOLD in r for r in results) == 1  # denied to tell the model, then stopped
    # The plugin aborted the turn after the stop, and told the user why.
    assert proc.returncode == 1 and lines[-1]["error"]["name"] == "MessageAbortedError"
    assert "[loopwatch] Run stopped" in proc.stderr.decode()
    denied = [x["part"] for x in lines if x.get("type") == "tool_use"
              and x["part"]["state"]["status"] == "error"]  # fmt: skip
    assert denied and was_blocked(denied[0]["state"]["error"])
    assert hook_log(state) == ""
    # Its database, scanned offline, stops at the same call.
    data = opencode_data(tmp_path)
    assert assert_scan_agrees(data, "opencode", state, tmp_path / "proj") == "stop"


@needs_opencode
def test_opencode_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = ChatScript(iter(HEALTHY))
    proc, lines, state = run_opencode(tmp_path, script)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    assert [r.strip() for r in script.all_results()] == ["one", "two", "three"]
    assert not any("[loopwatch]" in json.dumps(r) for r in script.seen)
    session = next(x["sessionID"] for x in lines if x.get("sessionID"))
    assert stored_calls(state, session) == 3
    assert assert_scan_agrees(opencode_data(tmp_path), "opencode", state, tmp_path / "proj") == "ok"


def run_copilot(
    tmp_path: Path, script: ChatScript, fmt: str = "json"
) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    project.mkdir(exist_ok=True)
    home.mkdir()
    install("copilot-cli", settings_path("copilot-cli", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("COPILOT", "GH_", "GITHUB"))}
    # The npm package unpacks its binary (235 MB) into the cache on first start: the
    # user's cache, where scripts/services.d/coding-clis.sh already had it unpacked.
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    with FakeServer(script) as server:
        env.update(HOME=str(home), XDG_CACHE_HOME=cache, COPILOT_MODEL="fake-model",
                   COPILOT_PROVIDER_BASE_URL=f"http://127.0.0.1:{server.port}/v1",
                   COPILOT_PROVIDER_API_KEY="fake", COPILOT_OFFLINE="true",
                   COPILOT_AUTO_UPDATE="false", LOOPWATCH_STATE=str(state))  # fmt: skip
        # Without --trust-folder, a repository's hooks are skipped with no warning.
        proc, lines = run_cli(
            ["copilot", "-p", "Run the tests and fix what fails.", "--output-format", fmt,
             "--allow-all", "--trust-folder", "--no-ask-user", "--no-auto-update",
             "--disable-client-telemetry"],
            project, env,
        )  # fmt: skip
    return proc, lines, state


needs_copilot = pytest.mark.skipif(shutil.which("copilot") is None, reason="no copilot")


@needs_copilot
def test_copilot_cli_stubborn_loop_is_denied_and_stays_denied(tmp_path: Path) -> None:
    project_config(tmp_path, WARN_THEN_STOP)
    script = ChatScript(repeating(FAILING), stubborn=True)
    _, _, state = run_copilot(tmp_path, script)
    results = assert_stopped(script, turn_ends=False)
    assert "Denied by preToolUse hook: [loopwatch] Run stopped" in next(
        r for r in results if was_blocked(r)
    )
    assert any("[loopwatch] Warning" in r for r in results)  # with a result, before
    assert hook_log(state) == ""
    # Its events.jsonl, scanned offline, stops at the same call.
    logs = copilot_logs(tmp_path)
    assert assert_scan_agrees(logs, "copilot_cli", state, tmp_path / "proj") == "stop"


@needs_copilot
def test_copilot_cli_broken_config_lets_calls_through_and_says_so_once(tmp_path: Path) -> None:
    broken_config(tmp_path)
    script = ChatScript(repeating(FAILING, 6), stubborn=True)
    proc, _, _ = run_copilot(tmp_path, script, fmt="text")
    assert len(script.all_results()) == 6 and not any("Denied" in r for r in script.all_results())
    assert proc.stdout.decode().count(f"● {NOT_WATCHING}") == 1  # its timeline


@needs_copilot
def test_copilot_cli_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = ChatScript(iter(HEALTHY))
    _, _, state = run_copilot(tmp_path, script)
    assert [r.splitlines()[0] for r in script.all_results()] == ["one", "two", "three"]
    assert not any("[loopwatch]" in json.dumps(r) for r in script.seen)
    folder = copilot_logs(tmp_path)
    [session] = [p.name for p in folder.iterdir() if p.is_dir() and p.name[0] != "."]
    assert stored_calls(state, session) == 3
    assert assert_scan_agrees(folder, "copilot_cli", state, tmp_path / "proj") == "ok"
