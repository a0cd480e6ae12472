"""Offline scan speed: events per second over the corpus and a generated 1M-event file.

Uses the CLI's streaming, ordered, multi-process scan (all cores by default).

    python benchmarks/bench_scan.py [--jobs N] [--events 1000000]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

from _workload import runs_file_lines  # noqa: E402

from loopwatch import Config  # noqa: E402
from loopwatch.scan import Report, scan_stream  # noqa: E402
from loopwatch.traces import read_runs  # noqa: E402


def timed_scan(paths: list[str], jobs: int) -> tuple[int, int, float]:
    runs = events = 0
    start = time.perf_counter()
    for item in scan_stream(read_runs(paths), Config(), jobs):
        if isinstance(item, Report):
            runs += 1
            events += item.events
    return runs, events, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--events", type=int, default=1_000_000)
    args = parser.parse_args()
    corpus = sorted(str(p) for p in (HERE.parents[1] / "shared" / "corpus").glob("*.jsonl"))
    print(f"scan with {args.jobs} worker process(es) on {os.cpu_count()} cores")
    if corpus:
        for jobs in sorted({1, args.jobs}):
            runs, events, secs = timed_scan(corpus, jobs)
            print(
                f"  corpus ({len(corpus)} files): {runs:,} runs, {events:,} events in {secs:.2f} s"
                f" = {events / secs:,.0f} events/s (jobs={jobs})"
            )
    with tempfile.TemporaryDirectory() as tmp:
        for short, label in ((True, "short events"), (False, "realistic events")):
            path = Path(tmp) / f"gen-{label.split()[0]}.jsonl"
            per_run = 200
            lines = runs_file_lines(args.events // per_run, per_run, short)
            path.write_bytes(b"\n".join(lines) + b"\n")
            size = path.stat().st_size / 1e6
            for jobs in sorted({1, args.jobs}):
                runs, events, secs = timed_scan([str(path)], jobs)
                print(
                    f"  generated, {label} ({size:.0f} MB): {runs:,} runs, {events:,} events in"
                    f" {secs:.2f} s = {events / secs:,.0f} events/s (jobs={jobs})"
                )


if __name__ == "__main__":
    main()
