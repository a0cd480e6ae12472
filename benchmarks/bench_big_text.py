"""Cost of one huge event: a 10 MB model output, tool result and user message.

Each kind is observed five times (different texts, one run each) in a guard with
the default detectors; prints the first and the median time per kind. The first
touch of 10 MB of fresh memory costs a few ms on this VM by itself.

    python benchmarks/bench_big_text.py [--mb 10]
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from loopwatch import Guard


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--mb", type=float, default=10.0)
    args = parser.parse_args()
    rng = random.Random(1)
    words = ["".join(rng.choice("abcdefghij") for _ in range(6)) for _ in range(5000)]
    base = " ".join(rng.choice(words) for _ in range(int(args.mb * 1_000_000 / 7)))
    guard = Guard()
    print(f"one event of {len(base) / 1e6:.1f} M characters, default guard")
    for kind in ("model", "tool_result", "user"):
        times = []
        for i in range(5):
            run = f"{kind}-{i}"
            event = {"kind": kind, "text": f"{i} {base}", "name": "t"}
            if kind == "tool_result":
                guard.observe(run, {"kind": "tool_call", "name": "t", "args": {}})
            t0 = time.perf_counter()
            guard.observe(run, event)
            times.append((time.perf_counter() - t0) * 1e3)
        print(f"  {kind:12s} first {times[0]:6.2f} ms  median {statistics.median(times):6.2f} ms")


if __name__ == "__main__":
    main()
