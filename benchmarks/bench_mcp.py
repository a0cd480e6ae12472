"""Overhead of ``loopwatch mcp`` per tool call, on localhost.

One SDK client session (``stdio_client`` + ``ClientSession``) to the SDK-built test
server (tests/helpers/mcp_server.py) directly, and one to the same server through
``loopwatch mcp -- <server>``; each makes the same ``tools/call`` sequence, timed call
by call from the client (request written to response parsed). The calls alternate
between a handful of different queries so that the guard sees a healthy run (nothing
is blocked: every call reaches the server) and judges every call and result. The two
sessions run in turns, in rounds, so that a change in the machine's load falls on
both. A memory store (the proxy's default); ``--store`` names another.

Target (issue 34): median overhead <= 2 ms per call.

Usage: python benchmarks/bench_mcp.py [--calls 500] [--rounds 4] [--store URL]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SERVER = [sys.executable, str(ROOT / "tests" / "helpers" / "mcp_server.py")]
PROXY = [sys.executable, "-m", "_loopwatch_entry", "mcp", "--"]
QUERIES = [f"topic {word}" for word in ("alpha", "bravo", "charlie", "delta", "echo", "fox")]


async def timed_calls(command: list[str], calls: int, cwd: str, env: dict[str, str]) -> list[float]:
    """Milliseconds per call of one session (after a warm-up of 20 calls)."""
    from mcp.client.session import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(command=command[0], args=command[1:], cwd=cwd, env=env)
    out: list[float] = []
    async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for i in range(calls + 20):
            # new words each time: a healthy run, where nothing repeats
            query = f"{QUERIES[i % len(QUERIES)]} {i}"
            start = time.perf_counter()
            result = await session.call_tool("echo", {"text": query})
            elapsed = (time.perf_counter() - start) * 1000
            assert not result.is_error, result
            if i >= 20:
                out.append(elapsed)
    return out


def p95(values: list[float]) -> float:
    return sorted(values)[int(0.95 * (len(values) - 1))]


def main() -> None:
    import anyio

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=500, help="calls per session")
    parser.add_argument("--rounds", type=int, default=4, help="sessions of each kind")
    parser.add_argument("--store", help="the guard's store (default: memory)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as cwd:
        if args.store:
            (Path(cwd) / "loopwatch.toml").write_text(f'store = "{args.store}"\n')
        env = {**os.environ}
        direct: list[float] = []
        proxied: list[float] = []
        for _ in range(args.rounds):
            direct += anyio.run(timed_calls, SERVER, args.calls, cwd, env)
            proxied += anyio.run(timed_calls, [*PROXY, *SERVER], args.calls, cwd, env)
    print(f"loopwatch mcp: tools/call round trip on localhost, {len(direct)} calls each "
          f"({args.rounds} sessions), store {args.store or 'memory://'}")  # fmt: skip
    print(f"{'':28}{'median ms':>10}{'p95 ms':>10}")
    rows: list[tuple[str, Any, Any]] = [
        ("direct to the server", statistics.median(direct), p95(direct)),
        ("through loopwatch mcp", statistics.median(proxied), p95(proxied)),
    ]
    rows.append(("overhead", rows[1][1] - rows[0][1], rows[1][2] - rows[0][2]))
    for name, median, high in rows:
        print(f"{name:<28}{median:>10.3f}{high:>10.3f}")
    verdict = "met" if rows[2][1] <= 2.0 else "NOT met"
    print(f"target: median overhead <= 2 ms: {verdict}")


if __name__ == "__main__":
    main()
