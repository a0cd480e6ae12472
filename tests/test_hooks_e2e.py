"""End to end with the real coding CLIs from npm, offline: each runs non-interactively
against a scripted fake model server on 127.0.0.1, with loopwatch installed as its hook
by ``loopwatch install``. A session that keeps running the same failing command is
denied and then ends; a healthy session is untouched.

The CLIs come from scripts/services.d/coding-clis.sh (``make test`` runs it); a test
is skipped when its CLI is not on PATH. How to run each one offline (endpoints, flags,
the settings that silently skip hooks) is in ../shared/notes/coding-cli-hooks.md.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from loopwatch.hooks.install import install, settings_path

FAILING = "ls /no/such/dir/loopwatch-e2e"
HEALTHY = ["echo one", "echo two", "echo three"]


def was_blocked(text: str) -> bool:
    """A tool result that says loopwatch blocked the call (not only warned)."""
    return "[loopwatch] Run stopped" in text or "[loopwatch] This call was not executed" in text


class FakeServer:
    """A model API on 127.0.0.1 whose replies come from ``script(request) -> reply``."""

    def __init__(self, handler: Callable[[BaseHTTPRequestHandler, bytes], None]) -> None:
        self.requests: list[dict[str, Any]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                handler(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.owner = owner
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


# -- Claude Code: the Messages API, streamed -------------------------------------------
def _sse(handler: BaseHTTPRequestHandler, events: list[dict[str, Any]]) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.end_headers()
    for ev in events:
        handler.wfile.write(f"event: {ev['type']}\ndata: {json.dumps(ev)}\n\n".encode())
    handler.wfile.flush()


def _message(n: int, blocks: list[dict[str, Any]], stop: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = [
        {"type": "message_start", "message": {
            "id": f"msg_{n:04d}", "type": "message", "role": "assistant",
            "model": "claude-sonnet-4-5", "content": [], "stop_reason": None,
            "stop_sequence": None, "usage": {"input_tokens": 10, "output_tokens": 1}}},
    ]  # fmt: skip
    for i, block in enumerate(blocks):
        if block["type"] == "text":
            out.append({"type": "content_block_start", "index": i,
                        "content_block": {"type": "text", "text": ""}})  # fmt: skip
            out.append({"type": "content_block_delta", "index": i,
                        "delta": {"type": "text_delta", "text": block["text"]}})  # fmt: skip
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            out.append({"type": "content_block_start", "index": i, "content_block": start})
            out.append({"type": "content_block_delta", "index": i, "delta": delta})
        out.append({"type": "content_block_stop", "index": i})
    out.append({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": 5}})  # fmt: skip
    out.append({"type": "message_stop"})
    return out


def _tool_results(request: dict[str, Any]) -> list[str]:
    """The text of every tool result in the conversation so far."""
    texts = []
    for message in request.get("messages", []):
        content = message.get("content")
        for block in content if isinstance(content, list) else []:
            if isinstance(block, dict) and block.get("type") == "tool_result":
                inner = block.get("content")
                if isinstance(inner, list):
                    inner = " ".join(str(p.get("text", "")) for p in inner if isinstance(p, dict))
                texts.append(str(inner))
    return texts


def claude_script(commands: Iterator[str] | None) -> Callable[..., None]:
    """Reply with a Bash call per request (the failing one forever, or the given ones),
    and end the turn once a result says loopwatch blocked the call, or commands run out."""
    counter = iter(range(10_000))
    seen: list[dict[str, Any]] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        seen.append(request)
        n = next(counter)
        if not request.get("tools"):  # a side request (title, topic): a short answer
            _sse(handler, _message(n, [{"type": "text", "text": "ok"}], "end_turn"))
            return
        results = _tool_results(request)
        blocked = any(was_blocked(r) for r in results)
        command = FAILING if commands is None else next(commands, None)
        if blocked or command is None or len(results) > 20:
            _sse(handler, _message(n, [{"type": "text", "text": "Stopping here."}], "end_turn"))
            return
        call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": "Bash",
                "input": {"command": command, "description": "run it"}}  # fmt: skip
        _sse(handler, _message(n, [call], "tool_use"))

    handle.seen = seen  # type: ignore[attr-defined]
    return handle


def _claude_env(home: Path, port: int, state: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC", "CLAUDE"))}
    env.update(
        HOME=str(home),
        ANTHROPIC_BASE_URL=f"http://127.0.0.1:{port}",
        ANTHROPIC_API_KEY="sk-fake",
        CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
        DISABLE_AUTOUPDATER="1",
        IS_SANDBOX="1",
        LOOPWATCH_STATE=str(state),
    )
    env.pop("PYTHONPATH", None)  # the installed command finds loopwatch by itself
    return env


def run_claude(project: Path, home: Path, script: Callable[..., None], state: Path) -> Any:
    install("claude-code", settings_path("claude-code", "project", project))
    with FakeServer(script) as server:
        proc = subprocess.run(
            ["claude", "-p", "Run the tests and fix what fails.", "--output-format",
             "stream-json", "--verbose", "--permission-mode", "bypassPermissions"],
            cwd=project, env=_claude_env(home, server.port, state), capture_output=True,
            timeout=180,
        )  # fmt: skip
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return proc, lines


def scan_transcripts(folder: Path, fmt: str = "claude_code") -> list[str]:
    """Verdicts of ``loopwatch scan FOLDER`` over the sessions a CLI wrote there."""
    from loopwatch import Config, Scanner, TraceRun, read_runs

    runs = [r for r in read_runs(str(folder)) if isinstance(r, TraceRun)]
    assert all(r.meta.get("format") == fmt for r in runs)
    return [Scanner(Config()).scan(r.to_dict()).verdict for r in runs]


needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="claude not on PATH")


@needs_claude
def test_claude_code_looping_session_is_denied_then_ends(tmp_path: Path) -> None:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    project.mkdir()
    home.mkdir()
    script = claude_script(None)
    proc, lines = run_claude(project, home, script, state)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    result = [x for x in lines if x.get("type") == "result"]
    assert result, proc.stdout.decode()[-2000:]
    seen: list[dict[str, Any]] = script.seen  # type: ignore[attr-defined]
    blocked = [r for req in seen for r in _tool_results(req) if was_blocked(r)]
    assert blocked, "no tool result carried loopwatch's reason"
    assert "same arguments" in blocked[0] or "same error" in blocked[0] or "nothing" in blocked[0]
    # Before the block, the warning reached the model as the hook's additional context.
    assert any("additional context: [loopwatch] Warning" in json.dumps(r) for r in seen)
    runs = [x for x in lines if x.get("type") == "user"]
    assert len(runs) <= 10  # stopped within a few repeats, not at the script's cap of 20
    assert result[-1].get("permission_denials"), result[-1]
    assert not (state.parent / "hook.log").exists()
    # The session's own transcript, scanned offline, says stop too.
    assert scan_transcripts(home / ".claude" / "projects") == ["stop"]


@needs_claude
def test_claude_code_healthy_session_is_untouched(tmp_path: Path) -> None:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    project.mkdir()
    home.mkdir()
    script = claude_script(iter(HEALTHY))
    proc, lines = run_claude(project, home, script, state)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    seen: list[dict[str, Any]] = script.seen  # type: ignore[attr-defined]
    results = _tool_results(seen[-1])
    assert [r.strip() for r in results] == ["one", "two", "three"]
    assert not any("[loopwatch]" in r for req in seen for r in _tool_results(req))
    from loopwatch.stores.sqlite import SqliteStore

    session = next(x["session_id"] for x in lines if x.get("type") == "system")
    stored = SqliteStore(state).get(session)
    assert stored is not None and stored.ncalls == 3  # the hooks saw every call
    assert scan_transcripts(home / ".claude" / "projects") == ["ok"]


# -- Gemini CLI: generateContent (routing) and streamGenerateContent ------------------
def gemini_script(commands: Iterator[str] | None) -> Callable[..., None]:
    seen: list[dict[str, Any]] = []

    def reply(handler: BaseHTTPRequestHandler, payload: dict[str, Any], stream: bool) -> None:
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

    def candidate(part: dict[str, Any]) -> dict[str, Any]:
        return {
            "candidates": [{"content": {"role": "model", "parts": [part]},
                            "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 5,
                              "totalTokenCount": 10},
        }  # fmt: skip

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        if ":generateContent" in handler.path:  # the model router's JSON-schema call
            text = json.dumps({"complexity_reasoning": "simple", "complexity_score": 1})
            reply(handler, candidate({"text": text}), stream=False)
            return
        seen.append(request)
        results = gemini_results(request)
        command = FAILING if commands is None else next(commands, None)
        if any(was_blocked(r) for r in results) or command is None or len(results) > 20:
            part: dict[str, Any] = {"text": "Stopping here."}
        else:
            part = {"functionCall": {"name": "run_shell_command", "args": {"command": command}}}
        reply(handler, candidate(part), stream=True)

    handle.seen = seen  # type: ignore[attr-defined]
    return handle


def gemini_results(request: dict[str, Any]) -> list[str]:
    return [
        json.dumps(part["functionResponse"])
        for content in request.get("contents", [])
        for part in content.get("parts", [])
        if "functionResponse" in part
    ]


def run_gemini(tmp_path: Path, script: Callable[..., None]) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "home", tmp_path / "state.db"
    (home / ".gemini").mkdir(parents=True)
    project.mkdir()
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
    env.pop("PYTHONPATH", None)
    with FakeServer(script) as server:
        env.update(
            HOME=str(home),
            GOOGLE_GEMINI_BASE_URL=f"http://127.0.0.1:{server.port}",
            GEMINI_API_KEY="fake",
            GEMINI_CLI_TRUST_WORKSPACE="true",
            LOOPWATCH_STATE=str(state),
        )
        proc = subprocess.run(
            ["gemini", "-p", "Run the tests and fix what fails.", "--output-format",
             "stream-json", "--yolo"],
            cwd=project, env=env, capture_output=True, timeout=180,
        )  # fmt: skip
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return proc, lines, state


needs_gemini = pytest.mark.skipif(shutil.which("gemini") is None, reason="gemini not on PATH")


@needs_gemini
def test_gemini_cli_looping_session_is_denied_then_ends(tmp_path: Path) -> None:
    script = gemini_script(None)
    proc, lines, state = run_gemini(tmp_path, script)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    results = [x for x in lines if x.get("type") == "tool_result"]
    blocked = [r for r in results if was_blocked(str(r.get("output")))]
    assert blocked and blocked[0]["status"] == "error", results[-1:]
    assert len(results) <= 10
    assert lines[-1]["type"] == "result" and lines[-1]["status"] == "success"
    assert not (state.parent / "hook.log").exists()
    # Before the block, the warning reached the model with a result (AfterTool context).
    seen: list[dict[str, Any]] = script.seen  # type: ignore[attr-defined]
    assert any("<hook_context>[loopwatch] Warning" in r for q in seen for r in gemini_results(q))
    # The session file Gemini CLI wrote, scanned offline, says stop too.
    assert scan_transcripts(tmp_path / "home" / ".gemini" / "tmp", "gemini_cli") == ["stop"]


@needs_gemini
def test_gemini_cli_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = gemini_script(iter(HEALTHY))
    proc, lines, state = run_gemini(tmp_path, script)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    results = [x for x in lines if x.get("type") == "tool_result"]
    assert [r["status"] for r in results] == ["success"] * 3
    assert [str(r["output"]).strip() for r in results] == ["one", "two", "three"]
    from loopwatch.stores.sqlite import SqliteStore

    session = next(x["session_id"] for x in lines if x.get("type") == "init")
    stored = SqliteStore(state).get(session)
    assert stored is not None and stored.ncalls == 3
    assert scan_transcripts(tmp_path / "home" / ".gemini" / "tmp", "gemini_cli") == ["ok"]


# -- Codex: the Responses API, streamed ------------------------------------------------
def codex_script(commands: Iterator[str] | None) -> Callable[..., None]:
    counter = iter(range(10_000))
    seen: list[dict[str, Any]] = []

    def handle(handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        seen.append(request)
        n = next(counter)
        outputs = codex_outputs(request)
        command = FAILING if commands is None else next(commands, None)
        item: dict[str, Any]
        if any(was_blocked(o) for o in outputs) or command is None or len(outputs) > 20:
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
        events = [
            {"type": "response.created",
             "response": {**response, "status": "in_progress", "output": []}},
            {"type": "response.output_item.added", "output_index": 0, "item": item},
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": response},
        ]  # fmt: skip
        _sse(handler, events)

    handle.seen = seen  # type: ignore[attr-defined]
    return handle


def codex_outputs(request: dict[str, Any]) -> list[str]:
    return [
        json.dumps(item.get("output"))
        for item in request.get("input", [])
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]


def run_codex(tmp_path: Path, script: Callable[..., None]) -> tuple[Any, list[Any], Path]:
    project, home, state = tmp_path / "proj", tmp_path / "codex-home", tmp_path / "state.db"
    project.mkdir()
    home.mkdir()
    install("codex", settings_path("codex", "project", project))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CODEX", "OPENAI"))}
    env.pop("PYTHONPATH", None)
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
        proc = subprocess.run(
            ["codex", "exec", "--json", "--skip-git-repo-check", "--trust",
             "--dangerously-bypass-hook-trust", "--disable", "plugins", "--disable",
             "remote_plugin", "--dangerously-bypass-approvals-and-sandbox",
             "Run the tests and fix what fails."],
            cwd=project, env=env, capture_output=True, timeout=180, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    lines = [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]
    return proc, lines, state


needs_codex = pytest.mark.skipif(shutil.which("codex") is None, reason="codex not on PATH")


@needs_codex
def test_codex_looping_session_is_denied_then_ends(tmp_path: Path) -> None:
    script = codex_script(None)
    proc, lines, state = run_codex(tmp_path, script)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    seen: list[dict[str, Any]] = script.seen  # type: ignore[attr-defined]
    blocked = [o for req in seen for o in codex_outputs(req) if was_blocked(o)]
    assert blocked and "blocked by PreToolUse hook" in blocked[0]
    ran = [x for x in lines if x.get("type") == "item.completed"
           and x["item"].get("type") == "command_execution"]  # fmt: skip
    assert 3 <= len(ran) <= 10
    assert lines[-1]["type"] == "turn.completed"
    assert not (state.parent / "hook.log").exists()
    # Before the block, the warning reached the model (additional context).
    assert any("[loopwatch] Warning" in json.dumps(req) for req in seen)
    # The rollout Codex wrote, scanned offline, says stop too.
    assert scan_transcripts(tmp_path / "codex-home" / "sessions", "codex") == ["stop"]


@needs_codex
def test_codex_healthy_session_is_untouched(tmp_path: Path) -> None:
    script = codex_script(iter(HEALTHY))
    proc, lines, state = run_codex(tmp_path, script)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    ran = [x["item"] for x in lines if x.get("type") == "item.completed"
           and x["item"].get("type") == "command_execution"]  # fmt: skip
    assert [r["aggregated_output"].strip() for r in ran] == ["one", "two", "three"]
    seen: list[dict[str, Any]] = script.seen  # type: ignore[attr-defined]
    assert not any("[loopwatch]" in o for req in seen for o in codex_outputs(req))
    from loopwatch.stores.sqlite import SqliteStore

    session = next(x["thread_id"] for x in lines if x.get("type") == "thread.started")
    stored = SqliteStore(state).get(session)
    assert stored is not None and stored.ncalls == 3  # the hooks saw every call
    assert scan_transcripts(tmp_path / "codex-home" / "sessions", "codex") == ["ok"]
