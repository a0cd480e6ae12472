"""Per tool call, side by side: loopwatch's Guard against agent-watchdog, loopguard and
the minimal floor.

The same stream for all three, in one process: the tool calls of the bench_guard
workload (1,000 live runs interleaved, small JSON arguments). The other guards are
never dependencies of loopwatch; install them in a throwaway directory first:

    make bench-competitors            # installs them into .bench-competitors/, runs this

or ``pip install --target .bench-competitors agent-watchdog==0.1.5 loopguard==0.2.0``
and ``python benchmarks/bench_competitors.py``.

What each one does per call, so the numbers are read fairly:

* agent-watchdog 0.1.5 (``AgentWatchdog.record_tool_call``): md5 of ``str(args)``,
  N identical calls in a row, and a repeating pattern filling the last 8 calls. One
  run per watchdog (it watches one run at a time), so one watchdog per live run.
* loopguard 0.2.0 (``@loopguard``): sha256 of ``repr(args)``, N identical calls
  within a time window, under a lock. Keyed by the arguments, so the run id is one.
* the minimal floor (``_workload.Floor``, as bench_guard prints it): an exact key of
  the call (orjson + xxhash), a count per run and a period-1..6 ring of recent keys.
  What any loop guard must at least do per call; the issue's target is loopwatch
  within 3x of it.
* loopwatch (``Guard.observe``): the default detectors, every run's state in the
  memory store; timed on the same tool calls, once when fed only the calls (what
  the others see) and once when fed the whole stream (model outputs and results
  too, its real use), where only the tool-call steps are timed.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(ROOT / "src"))
sys.path.append(str(ROOT / ".bench-competitors"))

from _workload import Floor, interleaved  # noqa: E402

from loopwatch import Config, Guard  # noqa: E402
from loopwatch._build import describe  # noqa: E402

Traffic = list[tuple[str, dict[str, Any]]]
INSTALL = "pip install --target .bench-competitors agent-watchdog==0.1.5 loopguard==0.2.0"


def timed(
    stream: Traffic, observe: Callable[[str, dict[str, Any]], Any], only: str | None = None
) -> list[float]:
    """Microseconds per call of ``observe`` over the stream (only the events of kind
    ``only`` are counted when it is given; the others are still observed)."""
    clock = time.perf_counter_ns
    out = []
    gc.disable()
    try:
        for run_id, event in stream:
            t0 = clock()
            observe(run_id, event)
            if only is None or event["kind"] == only:
                out.append((clock() - t0) / 1000)
    finally:
        gc.enable()
    return out


def agent_watchdog(calls: Traffic) -> list[float]:
    from agent_watchdog import AgentWatchdog, WatchdogHalt

    with contextlib.ExitStack() as stack:
        dogs: dict[str, Any] = {}
        for run_id, _ in calls:
            if run_id not in dogs:
                # no budget and no timer thread: only its loop detection is timed
                dog = AgentWatchdog(max_budget_usd=float("inf"), timeout_seconds=None)
                stack.enter_context(dog.watch(run_id))
                dogs[run_id] = dog

        def observe(run_id: str, event: dict[str, Any]) -> None:
            with contextlib.suppress(WatchdogHalt):  # it raises on each loop it sees
                dogs[run_id].record_tool_call(event["name"], event.get("args"))

        with contextlib.redirect_stdout(io.StringIO()):  # it prints each halt
            return timed(calls, observe)


def loopguard(calls: Traffic) -> list[float]:
    from loopguard import loopguard as decorate

    @decorate(max_repeats=5, window=3600, on_loop=lambda fn, args, kwargs: None)
    def tool(run_id: str, name: str, args: Any) -> None:
        return None

    return timed(calls, lambda run_id, event: tool(run_id, event["name"], event.get("args")))


def floor(calls: Traffic) -> list[float]:
    return timed(calls, Floor().observe)


def loopwatch_calls_only(calls: Traffic) -> list[float]:
    guard = Guard(Config())
    return timed(calls, guard.observe)


def loopwatch_whole_stream(traffic: Traffic) -> list[float]:
    return timed(traffic, Guard(Config()).observe, only="tool_call")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--runs", type=int, default=1_000)
    parser.add_argument("--repeat", type=int, default=3, help="rounds, alternating the guards")
    args = parser.parse_args()
    try:
        import agent_watchdog as _watchdog_package  # noqa: F401
        import loopguard as _loopguard_package  # noqa: F401
    except ImportError:
        sys.exit(f"bench_competitors: the other guards are not installed; run: {INSTALL}")
    traffic = interleaved(args.runs, args.events)
    calls = [(r, e) for r, e in traffic if e["kind"] == "tool_call"]
    contenders: dict[str, Callable[[], list[float]]] = {
        "minimal floor": lambda: floor(calls),
        "agent-watchdog 0.1.5": lambda: agent_watchdog(calls),
        "loopguard 0.2.0": lambda: loopguard(calls),
        "loopwatch, calls only": lambda: loopwatch_calls_only(calls),
        "loopwatch, whole stream": lambda: loopwatch_whole_stream(traffic),
    }
    medians: dict[str, list[float]] = {name: [] for name in contenders}
    p99s: dict[str, list[float]] = {name: [] for name in contenders}
    for _ in range(args.repeat):
        for name, run in contenders.items():
            values = sorted(run())
            medians[name].append(statistics.median(values))
            p99s[name].append(values[int(0.99 * (len(values) - 1))])
    print(
        f"per tool call: {len(calls):,} calls over {args.runs:,} live runs, "
        f"{args.repeat} rounds; loopwatch {describe()}"
    )
    for name in contenders:
        lo, hi = min(medians[name]), max(medians[name])
        print(
            f"  {name:26s} median {lo:5.2f}-{hi:5.2f} us   p99 {min(p99s[name]):6.2f}-"
            f"{max(p99s[name]):6.2f} us"
        )
    ours = statistics.median(medians["loopwatch, whole stream"])
    rivals = ("agent-watchdog 0.1.5", "loopguard 0.2.0")
    for rival in rivals:
        theirs = statistics.median(medians[rival])
        verdict = "faster" if ours < theirs else "slower"
        print(f"  loopwatch (whole stream) vs {rival}: {ours / theirs:.2f}x the time ({verdict})")
    least = statistics.median(medians["minimal floor"])
    ratio = ours / least
    # The targets (#35); printed, never asserted (the machine is shared).
    print(
        f"  loopwatch (whole stream) = {ratio:.1f}x the floor; targets: within 3x the floor:"
        f" {'met' if ratio <= 3 else 'missed'}; faster than every peer:"
        f" {'met' if all(ours < statistics.median(medians[r]) for r in rivals) else 'missed'}"
    )


if __name__ == "__main__":
    main()
