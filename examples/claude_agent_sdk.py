"""A Claude Agent SDK session stuck in a loop, stopped by loopwatch.

Offline: the SDK runs its bundled ``claude`` CLI against a scripted model server on
127.0.0.1 that answers every request with the same tool call. Run:
``python examples/claude_agent_sdk.py``.
"""

from __future__ import annotations

import os
import sys

# This file is named like the package it shows: keep its folder off the import path.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import asyncio
import json
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from claude_agent_sdk import ClaudeAgentOptions, create_sdk_mcp_server, query, tool

from loopwatch import LoopDetected
from loopwatch.integrations.claude_agent_sdk import LoopwatchHooks

calls = 0  # the searches that ran
asked = 0  # the searches the model asked for: a call loopwatch answered did not run


@tool("web_search", "Search the web.", {"q": str})
async def web_search(args: dict[str, Any]) -> dict[str, Any]:
    global calls
    calls += 1
    print(f"call {calls}: web_search({args['q']!r})")
    return {"content": [{"type": "text", "text": "18C, cloudy"}]}


class StuckModel(BaseHTTPRequestHandler):
    """A Messages API endpoint whose model keeps asking for the same search (streamed)."""

    def log_message(self, *args: Any) -> None:
        pass

    def do_HEAD(self) -> None:
        self.send_response(200)
        self.end_headers()

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        if request.get("tools"):
            global asked
            asked += 1
            block = {"type": "tool_use", "id": f"toolu_{len(request['messages'])}",
                     "name": "mcp__web__web_search", "input": {}}  # fmt: skip
            delta = {"type": "input_json_delta", "partial_json": '{"q": "paris"}'}
            stop = "tool_use"
        else:  # a side request (a title...)
            block, delta, stop = (
                {"type": "text", "text": ""},
                {"type": "text_delta", "text": "ok"},
                "end_turn",
            )
        message = {"id": "msg", "type": "message", "role": "assistant", "model": "claude",
                   "content": [], "usage": {"input_tokens": 10, "output_tokens": 1}}  # fmt: skip
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.end_headers()
        for event in [
            {"type": "message_start", "message": message},
            {"type": "content_block_start", "index": 0, "content_block": block},
            {"type": "content_block_delta", "index": 0, "delta": delta},
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop},
                "usage": {"output_tokens": 5},
            },
            {"type": "message_stop"},
        ]:
            self.wfile.write(f"event: {event['type']}\ndata: {json.dumps(event)}\n\n".encode())


async def main(port: int, home: str) -> None:
    watch = LoopwatchHooks()
    options = ClaudeAgentOptions(
        hooks=watch.hooks,
        mcp_servers={"web": create_sdk_mcp_server("web", tools=[web_search])},
        tools=[],
        allowed_tools=["mcp__web__web_search"],
        cwd=home,
        env={  # the scripted model, and no traffic beyond it
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{port}",
            "ANTHROPIC_API_KEY": "sk-offline",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "HOME": home,
        },
    )
    async for message in query(prompt="What is the weather in Paris?", options=options):
        result = message  # the session's last message: its ResultMessage
    try:
        watch.check(result)  # raises LoopDetected when loopwatch stopped the session
    except LoopDetected as stop:
        print(stop.verdict.message)
        print(f"loopwatch: stopped at call {asked}")


server = ThreadingHTTPServer(("127.0.0.1", 0), StuckModel)
threading.Thread(target=server.serve_forever, daemon=True).start()
with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as home:
    asyncio.run(main(server.server_address[1], home))
server.shutdown()
