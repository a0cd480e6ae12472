"""A scripted model API on 127.0.0.1, for the clients that call one: the coding CLIs
of tests/hooks/test_hooks_e2e.py and the Claude Agent SDK's bundled CLI
(claude_sdk_fake.py). The script decides each reply; these write it on the wire:
an event stream (``_sse``) and the Anthropic Messages stream of one reply (``_message``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["FakeServer", "_message", "_sse", "tool_results"]


class FakeServer:
    """A model API on 127.0.0.1 whose replies come from ``script(handler, body)``;
    ``GET`` answers a model list (OpenAI-compatible clients may ask for it)."""

    def __init__(self, handler: Callable[[BaseHTTPRequestHandler, bytes], None]) -> None:
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_HEAD(self) -> None:
                self.send_response(200)
                self.end_headers()

            def do_GET(self) -> None:
                model = {"id": "fake-model", "object": "model", "owned_by": "tests"}
                body = json.dumps({"object": "list", "data": [model]}).encode()
                self.send_response(200)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("content-length") or 0))
                handler(self, body)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> FakeServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


def _sse(handler: BaseHTTPRequestHandler, events: list[Any], named: bool = True) -> None:
    handler.send_response(200)
    handler.send_header("content-type", "text/event-stream")
    handler.send_header("cache-control", "no-cache")
    handler.end_headers()
    for ev in events:
        head = f"event: {ev['type']}\n" if named else ""
        handler.wfile.write(f"{head}data: {json.dumps(ev)}\n\n".encode())
    if not named:
        handler.wfile.write(b"data: [DONE]\n\n")
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


def tool_results(request: dict[str, Any]) -> list[str]:
    """The tool results a Messages API request carries back to the model, in order, as
    the text the model reads (a result's text blocks joined)."""
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
