"""Soak: long runs, many runs, hostile input and store faults; prints what was tried and
what survived. Nothing is asserted: the tests do that on smaller sizes.

    python benchmarks/bench_soak.py [--events 1000000] [--runs 200000]

Store faults need redis-server on PATH (``bash scripts/services.d/redis.sh``); without
it that part is reported as not tried.
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))
sys.path.insert(0, str(HERE.parent / "tests"))

from loopwatch import Config, Guard  # noqa: E402


def rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def line(what: str, result: str) -> None:
    print(f"  {what:58s} {result}")


def long_run(events: int) -> None:
    guard = Guard(Config(), max_iterations=10**9)
    mix = [
        {"kind": "model", "text": "Let me look at the next file."},
        {"kind": "tool_call", "name": "read", "args": {"path": "a.py"}},
        {"kind": "tool_result", "name": "read", "text": "print('a')"},
    ]
    t0 = time.perf_counter()
    stops = 0
    for i in range(events):
        stops += guard.observe("long", mix[i % 3]).action == "stop"
    state = guard.state("long")
    size = len(state.to_bytes()) if state is not None else 0
    line(
        f"one looping run, {events:,} events",
        f"{time.perf_counter() - t0:.1f} s, {stops:,} stops, state {size:,} bytes",
    )


def many_runs(runs: int) -> None:
    guard = Guard(Config(), max_runs=runs)
    before = rss_mb()
    t0 = time.perf_counter()
    for r in range(runs):
        guard.observe(f"run-{r}", {"kind": "tool_call", "name": "t", "args": {"r": r}})
    line(
        f"{runs:,} live runs, one call each",
        f"{time.perf_counter() - t0:.1f} s, +{rss_mb() - before:,.0f} MB peak RSS, "
        f"{len(guard.store):,} held",
    )


def hostile_input() -> None:
    guard = Guard(Config())
    nested: Any = "x"
    for _ in range(2000):
        nested = [nested]
    cyclic: list[Any] = []
    cyclic.append(cyclic)
    tried = {
        "None event": None,
        "unknown kind": {"kind": "tool-call", "name": "t"},
        "2,000-deep arguments": {"kind": "tool_call", "name": "t", "args": nested},
        "cyclic arguments": {"kind": "tool_call", "name": "t", "args": cyclic},
        "lone surrogates": {"kind": "tool_call", "name": "se\ud800arch", "args": {"q": "\udcff"}},
        "10 MB output": {"kind": "model", "text": "word " * 2_000_000},
    }
    for what, event in tried.items():
        t0 = time.perf_counter()
        try:
            verdict = guard.observe("hostile", event)  # type: ignore[arg-type]
            result = verdict.action.value
            if verdict.extra.get("caller_error"):
                result += " (caller error reported)"
        except Exception as exc:
            result = f"RAISED {type(exc).__name__}"
        line(what, f"{result} in {(time.perf_counter() - t0) * 1e3:.1f} ms")


def store_faults() -> None:
    if shutil.which("redis-server") is None:
        line("Redis killed mid-run", "not tried: redis-server is not installed")
        return
    from redis_server import RedisServer

    from loopwatch.stores.redis import RedisStore

    with tempfile.TemporaryDirectory() as tmp:
        server = RedisServer(Path(tmp))
        server.start()
        store = RedisStore.from_url(server.url, timeout=0.2, retry_interval=0.2)
        guard = Guard(Config(), store=store)
        call = {"kind": "tool_call", "name": "t", "args": {"q": 1}}
        before = [guard.observe("r", call).action.value for _ in range(3)]
        server.kill()
        during = [guard.observe("r", call) for _ in range(20)]
        server.start()
        time.sleep(0.3)
        after = [guard.observe("r", call).action.value for _ in range(6)]
        line(
            "Redis killed mid-run (allow mode), then restarted",
            f"before {before}; down: {sum(not v.state_available for v in during)}/20 let "
            f"through; after restart: {after}",
        )
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=200_000)
    args = parser.parse_args()
    print("soak: what was tried, and what survived")
    long_run(args.events)
    many_runs(args.runs)
    hostile_input()
    store_faults()


if __name__ == "__main__":
    main()
