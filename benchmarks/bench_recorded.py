"""The guard on recorded runs: what a step of a real agent costs, not a synthetic one.

bench_guard's workload is regular by construction (short results built from 41
words, small JSON arguments). Real tool results are file listings, test output and
JSON, real arguments are shell commands and scripts, and those are what masking and
normalising read. This replays every run of the given trace files (any format
``loopwatch scan`` reads) through ``Guard.observe``, one run after another, with
``on_loop="warn"`` so that every run plays to its end, and prints the cost per event
by kind:

    python benchmarks/bench_recorded.py ../shared/corpus/*.jsonl
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from loopwatch import Config, Guard
from loopwatch._build import describe
from loopwatch.traces import InputError, read_runs


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="+", help="trace files or folders")
    args = parser.parse_args()
    runs = [r for r in read_runs(args.paths) if not isinstance(r, InputError)]
    guard = Guard(Config(on_loop="warn"))
    clock = time.perf_counter_ns
    per_kind: dict[str, list[float]] = {}
    gc.collect()
    gc.disable()
    try:
        for run in runs:
            for event in run.events:
                t0 = clock()
                guard.observe(run.run_id, event)
                dt = (clock() - t0) / 1000
                per_kind.setdefault(str(event.get("kind")), []).append(dt)
    finally:
        gc.enable()
    timings = [t for values in per_kind.values() for t in values]
    if not timings:
        sys.exit("no events read")

    def line(label: str, values: list[float]) -> str:
        ordered = sorted(values)
        p99 = ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]
        return (
            f"  {label:12} median {statistics.median(values):6.2f} us  mean "
            f"{statistics.mean(values):6.2f}  p99 {p99:7.2f}  ({len(values):,} events)"
        )

    print(f"guard on {len(runs):,} recorded runs, {len(timings):,} events, default detectors")
    print(f"  build: {describe()}")
    print(line("all", timings))
    for kind in sorted(per_kind, key=lambda k: -len(per_kind[k])):
        print(line(kind, per_kind[kind]))


if __name__ == "__main__":
    main()
