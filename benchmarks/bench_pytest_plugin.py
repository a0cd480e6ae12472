"""What the pytest plugin costs a test suite, dormant and watching.

pytest imports every installed plugin's entry point at start-up, so loopwatch's is paid
by every project that has loopwatch installed, watched or not. This prints:

* the import of the entry point (``_loopwatch_pytest``) against ``import loopwatch``,
  each in a fresh interpreter (``-X importtime``'s cumulative microseconds);
* a whole pytest session of trivial tests, in a process of its own: the plugin
  dormant, turned off (``-p no:loopwatch``), and watching every test (``--loopwatch``);
* per call of a bare ``@watch`` tool: outside any test (the shared guard) and inside
  ``use_guard`` (the test's guard), to show the context lookup costs nothing to speak of.

Usage: python benchmarks/bench_pytest_plugin.py [--sessions 7] [--tests 200]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def import_us(module: str, runs: int) -> float:
    """Median cumulative import time of ``module`` in a fresh interpreter where pytest
    is already imported, as it is when pytest loads its plugins (us)."""
    times = []
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", f"import pytest; import {module}"],
            capture_output=True, text=True, check=True,
        )  # fmt: skip
        last = [line for line in done.stderr.splitlines() if line.rstrip().endswith(f" {module}")][
            -1
        ]
        times.append(float(last.split("|")[1]))
    return statistics.median(times)


def sessions_ms(folder: Path, variants: dict[str, list[str]], runs: int) -> dict[str, float]:
    """Median wall time of a pytest session in ``folder`` per variant (ms). The variants
    take turns, round after round, so that a machine busy for a while slows them alike."""
    times: dict[str, list[float]] = {label: [] for label in variants}
    for _ in range(runs):
        for label, args in variants.items():
            start = time.perf_counter()
            subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:deepeval",
                 "-p", "no:cacheprovider", "-o", "asyncio_default_fixture_loop_scope=function",
                 *args],
                cwd=folder, capture_output=True, check=True,
            )  # fmt: skip
            times[label].append((time.perf_counter() - start) * 1000)
    return {label: statistics.median(t) for label, t in times.items()}


def per_call_us(calls: int) -> tuple[float, float]:
    """A bare ``@watch`` tool's cost per call (us): shared guard, then use_guard's."""
    from loopwatch import Guard
    from loopwatch.integrations import current_run, use_guard, watch

    @watch
    def tool(n: int) -> str:
        return "ok"

    def timed() -> float:
        start = time.perf_counter()
        with current_run("bench"):
            for n in range(calls):
                tool(n)  # different arguments: nothing to find, the plain cost
        return (time.perf_counter() - start) / calls * 1e6

    timed()  # warm: the shared guard is built at the first call
    shared = statistics.median(timed() for _ in range(5))
    with use_guard(Guard(max_runs=10)):
        scoped = statistics.median(timed() for _ in range(5))
    return shared, scoped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=7, help="runs of each measurement")
    parser.add_argument("--tests", type=int, default=200, help="tests in the session")
    parser.add_argument("--calls", type=int, default=20_000, help="@watch calls timed")
    args = parser.parse_args()

    print("import, fresh interpreter with pytest imported (median us, cumulative):")
    for module in ("_loopwatch_pytest", "loopwatch"):
        print(f"  {module:<20} {import_us(module, args.sessions):>10,.0f}")

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        body = "".join(f"def test_{n}():\n    assert {n} + 1 > {n}\n\n" for n in range(args.tests))
        (folder / "test_many.py").write_text(body)
        os.environ.pop("PYTEST_ADDOPTS", None)
        print(f"\npytest session, {args.tests} trivial tests (median ms over {args.sessions}):")
        variants = {
            "plugin dormant": [],
            "-p no:loopwatch": ["-p", "no:loopwatch"],
            "--loopwatch": ["--loopwatch"],
        }
        for label, ms in sessions_ms(folder, variants, args.sessions).items():
            print(f"  {label:<20} {ms:>10,.1f}")

    shared, scoped = per_call_us(args.calls)
    print(f"\nbare @watch, per call (median us over 5 x {args.calls:,} calls):")
    print(f"  {'shared guard':<20} {shared:>10.2f}")
    print(f"  {'use_guard':<20} {scoped:>10.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
