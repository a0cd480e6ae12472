"""Fleet scale: scan throughput locally and on a distributed engine, the engine's
fixed costs, and what 1B events a day would take.

Measures, on the dev corpus repeated ``--repeat`` times (new run ids each time):
- the local scan (``scan --jobs 1`` and ``--jobs 2``), events/s;
- the engine (Dask, local cluster) with 1 and 2 workers, events/s, cluster start-up
  excluded, and the speed-up of 2 workers over 1;
- the engine's start-up time and its cost per task (a no-op task, round trip);
- a projection: workers for 1B events/day at the measured per-worker rate.

    python benchmarks/bench_fleet.py [--repeat 3] [--engine dask]
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import orjson

from loopwatch import Config
from loopwatch.fleet import open_engine
from loopwatch.scan import Report, scan_paths
from loopwatch.traces import TraceRun, read_runs

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DAY = 86_400


def _input(repeat: int, folder: str) -> tuple[str, int, int]:
    """The dev corpus repeated (new run ids each time) as one native JSON Lines file."""
    runs = [r for r in read_runs(sorted(str(p) for p in CORPUS.glob("*.jsonl")))]
    base = [r for r in runs if isinstance(r, TraceRun)]
    path = os.path.join(folder, "fleet.jsonl")
    n_runs = n_events = 0
    with open(path, "wb") as fh:
        for i in range(repeat):
            for r in base:
                fh.write(orjson.dumps({**r.to_dict(), "run_id": f"{r.run_id}#{i}"}) + b"\n")
                n_runs += 1
                n_events += len(r.events)
    return path, n_runs, n_events


def _scan(path: str, jobs: int, executor: object = None) -> tuple[float, int]:
    """Seconds to scan the file as ``loopwatch scan`` does, and the events scanned."""
    start = time.perf_counter()
    events = 0
    for item in scan_paths([path], Config(), jobs, executor):
        if isinstance(item, Report):
            events += item.events
    return time.perf_counter() - start, events


def _noop() -> int:
    return 0


def _rate(path: str, jobs: int, executor: object, tries: int) -> list[float]:
    rates = []
    for _ in range(tries):
        seconds, events = _scan(path, jobs, executor)
        rates.append(events / seconds)
    return rates


def _fmt(rates: list[float]) -> str:
    return f"{statistics.median(rates):>9,.0f} events/s (range {min(rates):,.0f}-{max(rates):,.0f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeat", type=int, default=3, help="copies of the corpus to scan")
    ap.add_argument("--tries", type=int, default=5)
    ap.add_argument("--engine", default="dask")
    args = ap.parse_args()
    folder = tempfile.mkdtemp(prefix="loopwatch-fleet-")
    path, n_runs, n_events = _input(args.repeat, folder)
    print(f"input: {n_runs:,} runs, {n_events:,} events (dev corpus x{args.repeat}), one file")

    _scan(path, 1)  # warm this process's caches (forked workers inherit them)
    local1 = _rate(path, 1, None, args.tries)
    local2 = _rate(path, 2, None, args.tries)
    print(f"local scan, 1 process          {_fmt(local1)}")
    print(f"local scan, 2 processes        {_fmt(local2)}")

    engine: dict[int, list[float]] = {}
    startup: list[float] = []
    task_ms: list[float] = []
    for workers in (1, 2):
        t0 = time.perf_counter()
        with open_engine(args.engine, workers=workers) as client:
            client.submit(_noop).result()  # the cluster is up once a task came back
            # Each new worker process imports loopwatch and warms its caches on its
            # first ranges: a fixed cost of the cluster, counted here, not as throughput.
            _scan(path, workers, client)
            startup.append(time.perf_counter() - t0)
            t1 = time.perf_counter()
            for _ in range(50):
                client.submit(_noop).result()
            task_ms.append((time.perf_counter() - t1) / 50 * 1000)
            engine[workers] = _rate(path, workers, client, args.tries)
        print(f"{args.engine}, {workers} worker(s)            {_fmt(engine[workers])}")
    one, two = statistics.median(engine[1]), statistics.median(engine[2])
    print(f"{args.engine} speed-up, 2 workers / 1     {two / one:.2f}x")
    print(
        f"{args.engine} start-up (local cluster, workers warm) {statistics.median(startup):.2f} s; "
        f"per task (no-op round trip) {statistics.median(task_ms):.1f} ms"
    )
    per_day = 1_000_000_000
    need = per_day / DAY
    per_worker = one
    workers_needed = math.ceil(need / per_worker)
    print(
        f"projection: 1B events/day = {need:,.0f} events/s sustained; at {per_worker:,.0f} "
        f"events/s per worker (1-worker rate here) that is {workers_needed} worker(s) "
        f"busy all day, or {per_day / per_worker / 3600:,.1f} worker-hours per day"
    )
    # A batch job that must finish within an hour:
    hourly = math.ceil(per_day / 3600 / per_worker)
    print(f"projection: the whole day's events within one hour: {hourly} workers")
    shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
