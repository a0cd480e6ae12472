"""Throughput and latency of Guard.observe through one local redis-server.

Clients are separate processes (each with its own Guard, RedisStore and connection),
as workers would be. Two workloads:

* sticky: each client serves its own runs, so it made each run's last update
  (the common case; expect 1 round trip per step);
* hopping: runs move to another client every step (runs are never updated by two
  clients at once; a barrier separates the rounds), so each step starts with a stale
  local copy (expect 2 round trips per step).

Round trips per step are measured on the server: the EVALSHA/EVAL calls counted by
INFO commandstats over the run, divided by the steps observed. A memory-store guard
in one process is printed first as the cost of the detectors alone.

Usage: python benchmarks/bench_redis.py [--steps 20000] [--url redis://host:port/0]
(without --url it starts a redis-server of its own on a free loopback port).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from typing import Any

from loopwatch import Config, Guard
from loopwatch.stores.redis import RedisStore

RUNS_PER_CLIENT = 25


def event(run: int, step: int) -> dict[str, Any]:
    """A plausible agent step: model turn, tool call, tool result."""
    kind = step % 3
    if kind == 0:
        return {"kind": "model", "text": f"run {run}: planning step {step}"}
    if kind == 1:
        return {
            "kind": "tool_call",
            "name": "search",
            "args": {"q": f"topic {run}-{step}"},
            "id": f"c{step}",
        }
    return {"kind": "tool_result", "name": "search", "id": f"c{step - 1}", "text": f"hit {step}"}


def start_server() -> tuple[subprocess.Popen[bytes], str, str]:
    binary = shutil.which("redis-server")
    if binary is None:
        raise SystemExit("redis-server is not on PATH: run `bash scripts/services.d/redis.sh`")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    directory = tempfile.mkdtemp(prefix="loopwatch-bench-")
    log = os.path.join(directory, "log")
    options = ["--port", str(port), "--bind", "127.0.0.1", "--dir", directory, "--save", ""]
    proc = subprocess.Popen(
        [binary, *options, "--appendonly", "no", "--logfile", log], stdin=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                if sock.recv(16).startswith(b"+PONG"):
                    return proc, f"redis://127.0.0.1:{port}/0", directory
        except OSError:
            time.sleep(0.05)
    proc.kill()
    raise SystemExit("redis-server did not start")


def script_calls(url: str) -> int:
    import redis

    with redis.Redis.from_url(url) as client:
        stats: dict[str, Any] = client.info("commandstats")
    return sum(stats.get(f"cmdstat_{c}", {}).get("calls", 0) for c in ("evalsha", "eval"))


def client(
    index: int, clients: int, url: str, prefix: str, steps: int, hopping: bool, sync: Any, out: Any
) -> None:
    store = RedisStore.from_url(url, prefix=prefix, timeout=5)
    guard = Guard(Config(), store=store, on_store_error="raise", max_iterations=10**9)
    runs = RUNS_PER_CLIENT * clients
    rounds = steps // RUNS_PER_CLIENT
    latencies: list[int] = []
    clock = time.perf_counter_ns
    sync.wait()
    for step in range(rounds):
        if hopping:
            mine = [r for r in range(runs) if (r + step) % clients == index]
        else:
            mine = [r for r in range(runs) if r % clients == index]
        for run in mine:
            ev = event(run, step)
            t0 = clock()
            guard.observe(f"run-{run}", ev)
            latencies.append(clock() - t0)
        if hopping:
            sync.wait()  # a run moves on only when every client is done with the round
    out.put((latencies, store.conflicts))


def measure(url: str, clients: int, steps_total: int, hopping: bool) -> dict[str, float]:
    ctx = mp.get_context("fork")
    prefix = f"bench-{uuid.uuid4().hex[:8]}"
    steps = steps_total // clients
    sync, out = ctx.Barrier(clients + 1), ctx.Queue()
    procs = [
        ctx.Process(target=client, args=(i, clients, url, prefix, steps, hopping, sync, out))
        for i in range(clients)
    ]
    for p in procs:
        p.start()
    before = script_calls(url)
    sync.wait()
    started = time.perf_counter()
    if hopping:
        for _ in range(steps // RUNS_PER_CLIENT):
            sync.wait()
    latencies: list[int] = []
    conflicts = 0
    for _ in procs:
        lat, clashes = out.get(timeout=600)
        latencies.extend(lat)
        conflicts += clashes
    elapsed = time.perf_counter() - started
    for p in procs:
        p.join()
    calls = script_calls(url) - before
    latencies.sort()
    n = len(latencies)
    return {
        "steps": n,
        "steps_per_s": n / elapsed,
        "p50_us": latencies[n // 2] / 1000,
        "p99_us": latencies[min(n - 1, int(n * 0.99))] / 1000,
        "round_trips_per_step": calls / n,
        "conflicts": conflicts,
    }


def memory_baseline(steps: int) -> dict[str, float]:
    guard = Guard(Config(), max_iterations=10**9)
    latencies = []
    started = time.perf_counter()
    for i in range(steps):
        run = i % RUNS_PER_CLIENT
        t0 = time.perf_counter_ns()
        guard.observe(f"run-{run}", event(run, i // RUNS_PER_CLIENT))
        latencies.append(time.perf_counter_ns() - t0)
    elapsed = time.perf_counter() - started
    latencies.sort()
    return {
        "steps": steps,
        "steps_per_s": steps / elapsed,
        "p50_us": latencies[steps // 2] / 1000,
        "p99_us": latencies[int(steps * 0.99)] / 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20_000, help="steps per configuration")
    parser.add_argument("--url", help="an existing Redis/Valkey (default: start one)")
    args = parser.parse_args()
    server = None
    url = args.url
    if url is None:
        server, url, directory = start_server()
    try:
        print(f"loopwatch Redis store benchmark: {os.cpu_count()} CPUs, {url}")
        print("clients are processes, each with its own Guard and connection\n")
        base = memory_baseline(args.steps)
        print(
            f"{'memory store, 1 process':<28} {base['steps_per_s']:>9,.0f} steps/s  "
            f"p50 {base['p50_us']:7.1f} us  p99 {base['p99_us']:7.1f} us"
        )
        for hopping in (False, True):
            for clients in (1, 4, 16):
                if hopping and clients == 1:
                    continue
                r = measure(url, clients, args.steps, hopping)
                label = f"{'hopping' if hopping else 'sticky'}, {clients} client(s)"
                print(
                    f"{label:<28} {r['steps_per_s']:>9,.0f} steps/s  p50 {r['p50_us']:7.1f} us"
                    f"  p99 {r['p99_us']:7.1f} us  {r['round_trips_per_step']:.2f} round trips"
                    f"/step  ({r['steps']} steps, {r['conflicts']} conflicts)"
                )
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
            shutil.rmtree(directory, ignore_errors=True)


if __name__ == "__main__":
    main()
