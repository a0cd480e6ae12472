"""A small MCP server built with the SDK (``MCPServer``, what was FastMCP), for the
MCP proxy's tests: run as ``python mcp_server.py [stdio | http PORT]``.

Tools: ``lookup`` (the same answer for the same query: a loop when called again and
again), ``echo``, ``next_item`` (a new answer each call: progress), ``fail`` (an error
result), ``picture`` (an image only: no text), ``slow`` (reports progress, for
cancellation), ``crash`` (the process exits with status 3 mid-call), ``big`` (a
result of N characters). A resource, a resource template and a prompt, for the
pass-through tests. ``$MCP_TEST_CALLS`` names a file where each call of ``lookup``,
``echo`` and ``next_item`` appends the tool's name (and a cancelled ``slow``
``slow-cancelled``) (what reached the server), and
``$MCP_TEST_PID`` one where the server writes its process id.
"""

from __future__ import annotations

import base64
import os
import sys

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ImageContent

server = MCPServer(
    "loopwatch-test-server", instructions="A server for loopwatch's tests.", log_level="CRITICAL"
)
_count = {"n": 0}
# a 1x1 transparent PNG
PNG = base64.b64encode(
    bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
).decode()


def _record(name: str) -> None:
    path = os.environ.get("MCP_TEST_CALLS")
    if path:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(name + "\n")


@server.tool()
def lookup(query: str) -> str:
    """Look something up (the same answer every time for the same query)."""
    _record("lookup")
    return f"No results for {query!r}."


@server.tool()
def echo(text: str) -> str:
    """Say it back."""
    _record("echo")
    return text


ITEMS = (
    "Apples grow in orchards.",
    "A bridge spans the river.",
    "Clouds gather before rain.",
    "Deserts cool quickly at night.",
    "Engines burn fuel for power.",
    "Forests shelter many birds.",
    "Guitars have six strings.",
    "Harbors protect moored ships.",
)


@server.tool()
def next_item() -> str:
    """A new item each call: new information, not a loop."""
    _record("next_item")
    _count["n"] += 1
    return ITEMS[(_count["n"] - 1) % len(ITEMS)]


@server.tool()
def fail(reason: str) -> str:
    """Always fails."""
    raise ValueError(f"cannot do it: {reason}")


@server.tool()
def picture() -> ImageContent:
    """An image and nothing else."""
    return ImageContent(data=PNG, mime_type="image/png")


@server.tool()
async def slow(steps: int, ctx: Context) -> str:
    """Reports progress for a while; a cancellation is recorded (``slow-cancelled``)."""
    try:
        for i in range(steps):
            await ctx.report_progress(i, steps)
            await anyio.sleep(0.05)
    except anyio.get_cancelled_exc_class():
        _record("slow-cancelled")
        raise
    return "done"


@server.tool()
def crash() -> str:
    """The server dies in the middle of the call."""
    sys.stderr.write("test server: crashing on purpose\n")
    sys.stderr.flush()
    os._exit(3)


@server.tool()
def big(size: int) -> str:
    """A long result."""
    return "x" * size


@server.resource("memo://greeting")
def greeting() -> str:
    """A fixed text."""
    return "Hello from the test server."


@server.resource("memo://notes/{name}")
def note(name: str) -> str:
    """A note by name."""
    return f"Note {name}."


@server.prompt()
def review(code: str) -> str:
    """Ask for a review."""
    return f"Please review this code:\n\n{code}"


if __name__ == "__main__":
    if os.environ.get("MCP_TEST_PID"):
        with open(os.environ["MCP_TEST_PID"], "w", encoding="utf-8") as fh:
            fh.write(str(os.getpid()))
    mode = sys.argv[1] if len(sys.argv) > 1 else "stdio"
    if mode == "http":
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
