"""The Claude Agent SDK offline: the real SDK drives its real bundled ``claude`` CLI
against a scripted fake Anthropic Messages endpoint on 127.0.0.1 (model_server.py,
the fake server of tests/hooks/test_hooks_e2e.py; how the CLI runs offline is in
../shared/notes/coding-cli-hooks.md). Tools are the SDK's own in-process MCP tools."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, tool
from model_server import FakeServer, _message, _sse

SEARCH = "mcp__web__web_search"

# script(n, request) -> reply: n is how many tool results the request carries; a reply is
# {"text": ...} (end of turn) or {"tool": name, "input": {...}}
Script = Callable[[int, dict[str, Any]], dict[str, Any]]


def tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """Every tool_result block of a request's conversation, in order."""
    return [
        block
        for message in request.get("messages", [])
        if isinstance(message.get("content"), list)
        for block in message["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def result_text(block: dict[str, Any]) -> str:
    inner = block.get("content")
    if isinstance(inner, list):
        return " ".join(str(p.get("text", "")) for p in inner if isinstance(p, dict))
    return str(inner)


def stuck(tool_name: str = SEARCH) -> Script:
    return lambda n, request: {"tool": tool_name, "input": {"q": "paris weather"}}


def calls_then_answer(
    turns: int,
    args: Callable[[int], dict[str, Any]] = lambda n: {"q": "paris weather"},
    answer: str = "It is 18C and cloudy.",
) -> Script:
    def script(n: int, request: dict[str, Any]) -> dict[str, Any]:
        return {"tool": SEARCH, "input": args(n)} if n < turns else {"text": answer}

    return script


class FakeAnthropic:
    """The scripted model endpoint; keeps every main request (those offering tools)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.count = 0

    def handle(self, handler: BaseHTTPRequestHandler, body: bytes) -> None:
        request = json.loads(body or b"{}")
        self.count += 1
        n = self.count
        if not request.get("tools"):  # a side request (title, topic): a short answer
            _sse(handler, _message(n, [{"type": "text", "text": "ok"}], "end_turn"))
            return
        self.requests.append(request)
        reply = self.script(len(tool_results(request)), request)
        if "tool" in reply:
            call = {"type": "tool_use", "id": f"toolu_{n:04d}", "name": reply["tool"],
                    "input": reply["input"]}  # fmt: skip
            _sse(handler, _message(n, [call], "tool_use"))
        else:
            _sse(handler, _message(n, [{"type": "text", "text": reply["text"]}], "end_turn"))


def search_server(
    ran: list[dict[str, Any]], result: str = "18C, cloudy", fails: bool = False
) -> Any:
    """An in-process MCP server with one tool, ``web_search``, that records its calls
    (and raises when it ``fails``)."""

    @tool("web_search", "Search the web.", {"q": str})
    async def web_search(args: dict[str, Any]) -> dict[str, Any]:
        ran.append(dict(args))
        if fails:
            raise RuntimeError("backend down")
        return {"content": [{"type": "text", "text": result}]}

    return create_sdk_mcp_server("web", tools=[web_search])


def offline_options(server: FakeServer, home: str, **options: Any) -> ClaudeAgentOptions:
    """Options for a session against the fake endpoint, in a fresh home, with no
    traffic beyond loopback."""
    env = {
        "HOME": home,
        "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{server.port}",
        "ANTHROPIC_API_KEY": "sk-fake",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",
    }
    options.setdefault("tools", [])
    options.setdefault("permission_mode", "bypassPermissions")
    return ClaudeAgentOptions(env=env, cwd=home, **options)


def fresh_home() -> tempfile.TemporaryDirectory[str]:
    return tempfile.TemporaryDirectory(prefix="loopwatch-claude-")


__all__ = [
    "SEARCH",
    "FakeAnthropic",
    "FakeServer",
    "calls_then_answer",
    "fresh_home",
    "offline_options",
    "result_text",
    "search_server",
    "stuck",
    "tool_results",
]
