"""A real MCP client end to end: Claude Code (from npm, scripts/services.d/coding-clis.sh)
runs offline against the scripted fake model of the hook tests (tests/helpers/
model_server.py) with the project's MCP server, the SDK-built test server, put behind
loopwatch by ``loopwatch install mcp claude-code`` as a user would. A stubborn model
calls the same MCP tool again and again: the warning and then the stop reach the model
as tool results, nothing reaches the server after the stop, and a healthy session is
untouched. Skipped where ``claude`` is not on PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from model_server import FakeServer, _message, _sse, tool_results

from loopwatch.config import DETECTORS

HELPERS = Path(__file__).resolve().parents[1] / "helpers"
BIN = Path(sys.executable).parent
TOOL = "mcp__loopy__lookup"

needs_claude = pytest.mark.skipif(shutil.which("claude") is None, reason="claude not on PATH")


class McpScript:
    """A model that waits for the MCP server to connect, then calls ``tool`` with the
    same input up to ``times`` times, whatever it is told."""

    def __init__(self, tool: str, inputs: list[dict[str, Any]]) -> None:
        self.tool, self.inputs = tool, list(inputs)
        self.seen: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def results(self) -> list[str]:
        """The tool results Claude Code sent back in its last request, in order."""
        return tool_results(self.seen[-1]) if self.seen else []

    def __call__(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        with self.lock:
            n = len(self.seen) + 1000
            if not request.get("tools"):  # a side request (a title): a short answer
                _sse(handler, _message(n, [{"type": "text", "text": "ok"}], "end_turn"))
                return
            self.seen.append(request)
            names = {t["name"] for t in request["tools"]}
            if self.tool not in names:  # the server is still connecting: wait for it
                call = {"name": "WaitForMcpServers", "input": {}}
            elif self.inputs:
                call = {"name": self.tool, "input": self.inputs.pop(0)}
            else:
                _sse(handler, _message(n, [{"type": "text", "text": "Done."}], "end_turn"))
                return
        block = {"type": "tool_use", "id": f"toolu_{n:04d}", **call}
        _sse(handler, _message(n, [block], "tool_use"))


def project(tmp_path: Path, calls: Path, warn_at: int = 2, stop_at: int = 4) -> Path:
    """A project whose .mcp.json runs the test server, wrapped by `loopwatch install mcp`;
    RepeatedCall alone judges (by default a warning at the 2nd identical call with the
    same result, a stop at the 4th)."""
    root = tmp_path / "proj"
    (root / ".claude").mkdir(parents=True)
    server = {"command": sys.executable, "args": [str(HELPERS / "mcp_server.py")],
              "env": {"MCP_TEST_CALLS": str(calls)}}  # fmt: skip
    (root / ".mcp.json").write_text(json.dumps({"mcpServers": {"loopy": server}}, indent=2))
    # project servers start without asking only when the project allows them all
    (root / ".claude" / "settings.json").write_text(
        json.dumps({"enableAllProjectMcpServers": True})
    )
    toml = [f"[{name}]\nenabled = false\n" for name in DETECTORS if name != "repeated_call"]
    toml.append(
        f"[repeated_call]\nwarn_at = {warn_at}\nstop_at = {stop_at}\n"
        "window_warn_at = 0\nwindow_stop_at = 0\n"
    )
    (root / "loopwatch.toml").write_text("\n".join(toml))
    installed = subprocess.run([sys.executable, "-m", "_loopwatch_entry", "install", "mcp",
                                "claude-code"], cwd=root, capture_output=True, text=True,
                               timeout=60, check=True)  # fmt: skip
    assert "wrapped the stdio server 'loopy'" in installed.stdout
    return root


def run_claude(tmp_path: Path, script: McpScript, root: Path) -> list[Any]:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANTHROPIC", "CLAUDE")) and k != "PYTHONPATH"}  # fmt: skip
    env["PATH"] = f"{BIN}{os.pathsep}{env.get('PATH', '')}"  # loopwatch on PATH, as installed
    with FakeServer(script) as server:
        env.update(HOME=str(home), ANTHROPIC_BASE_URL=f"http://127.0.0.1:{server.port}",
                   ANTHROPIC_API_KEY="sk-fake", CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC="1",
                   DISABLE_AUTOUPDATER="1", IS_SANDBOX="1",
                   LOOPWATCH_STATE=str(tmp_path / "state.db"))  # fmt: skip
        proc = subprocess.run(
            ["claude", "-p", "What is the weather?", "--output-format", "stream-json",
             "--verbose", "--permission-mode", "bypassPermissions"],
            cwd=root, env=env, capture_output=True, timeout=240, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    return [json.loads(x) for x in proc.stdout.decode().splitlines() if x.startswith("{")]


def forwarded(calls: Path) -> list[str]:
    return calls.read_text().split() if calls.exists() else []


@needs_claude
def test_claude_code_mcp_tool_loop_is_warned_then_stopped(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    root = project(tmp_path, calls)
    script = McpScript(TOOL, [{"query": "weather in Paris"}] * 10)
    run_claude(tmp_path, script, root)
    results = [r for r in script.results() if not r.startswith("ready:")]  # WaitForMcpServers
    assert len(results) == 10, results  # the stubborn model made every call
    stopped = [i for i, r in enumerate(results) if "[loopwatch] Run stopped:" in r]
    assert stopped and stopped[0] <= 3, results  # by the 4th identical call at the latest
    # the model read a warning with a real result before the stop (Claude Code shows the
    # model a result's structured content, where the proxy adds it too)
    assert any("[loopwatch] Warning:" in r and "No results" in r for r in results[: stopped[0]]), (
        results
    )
    assert "lookup" in results[stopped[0]]
    # after the stop nothing reached the server: every later call was refused
    assert all("[loopwatch] Run stopped:" in r for r in results[stopped[0] :])
    assert forwarded(calls) == ["lookup"] * len(forwarded(calls))
    assert len(forwarded(calls)) <= stopped[0] + 1


@needs_claude
def test_claude_code_healthy_mcp_session_is_untouched(tmp_path: Path) -> None:
    calls = tmp_path / "calls.txt"
    root = project(tmp_path, calls, warn_at=3)  # the 2nd call cannot know what comes
    script = McpScript("mcp__loopy__next_item", [{}] * 4)
    run_claude(tmp_path, script, root)
    results = [r for r in script.results() if not r.startswith("ready:")]
    assert len(results) == 4 and not any("[loopwatch]" in r for r in results), results
    assert forwarded(calls) == ["next_item"] * 4
