"""Offline scan speed and memory: events per second and peak RSS, over the corpus and
over generated files of two sizes.

Runs what ``loopwatch scan FILES --jobs N`` runs (``scan.scan_paths``: the workers read
and decode their own byte ranges of a native JSON Lines file), each measurement in a
fresh process so that its peak RSS (``resource.getrusage``: the process and, separately,
its largest worker) is its own. A generated file is scanned at two sizes, ``--events``
and a quarter of it: a scan in bounded memory shows the same peak at both.

    python benchmarks/bench_scan.py [--jobs N] [--events 1000000] [--corpus DIR]

To see where a worker's time goes, write a generated file and scan it as one worker:

    python benchmarks/bench_scan.py --generate 20000 long /tmp/long.jsonl
    valgrind --tool=callgrind python benchmarks/bench_scan.py --worker /tmp/long.jsonl
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))


def timed_scan(paths: list[str], jobs: int) -> tuple[int, int, float, float]:
    """Runs, events, wall seconds and CPU seconds (this process's and its workers')."""
    from loopwatch import Config
    from loopwatch.scan import Report, scan_paths

    runs = events = 0
    start = time.perf_counter()
    cpu = time.process_time()
    for item in scan_paths(paths, Config(), jobs):
        if isinstance(item, Report):
            runs += 1
            events += item.events
    workers = resource.getrusage(resource.RUSAGE_CHILDREN)  # the pool has been joined
    cpu = time.process_time() - cpu + workers.ru_utime + workers.ru_stime
    return runs, events, time.perf_counter() - start, cpu


def one(paths: list[str], jobs: int) -> None:
    """Child side: scan, then print runs, events, seconds, CPU seconds and the peak RSS
    in MB of this process and of its largest worker (ru_maxrss is in kB on Linux)."""
    runs, events, secs, cpu = timed_scan(paths, jobs)
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    workers = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(runs, events, secs, cpu, own, workers)


def worker(path: str) -> None:
    """Scan one native file in this process as a scan worker scans its ranges (read,
    decode, scan, one range the size of the file), and print its events and the CPU
    time per event: the unit to profile, e.g. under ``valgrind --tool=callgrind``."""
    import importlib

    from loopwatch import Config

    scan = importlib.import_module("loopwatch.scan")  # the module, not the function
    scan._init_worker(Config())
    cpu = time.process_time()
    items = scan._scan_range(None, path, 0, os.path.getsize(path), 1)
    cpu = time.process_time() - cpu
    events = sum(item.events for item in items if isinstance(item, scan.Report))
    print(f"{events:,} events, {cpu / max(events, 1) * 1e6:.2f} us CPU an event")


def generate(path: str, total: int, short: bool) -> None:
    """Child side: write a generated file of ``total`` events, 200 a run."""
    from _workload import runs_file_lines

    per_run = 200
    Path(path).write_bytes(b"\n".join(runs_file_lines(total // per_run, per_run, short)) + b"\n")


def child(*args: str) -> list[str]:
    """Run this script with ``args`` in a new process. Everything heavy happens in one:
    Linux keeps a process's peak RSS across fork and exec, so a child started by a
    parent holding a generated file in memory would report the parent's peak."""
    done = subprocess.run(
        [sys.executable, __file__, *args], check=True, capture_output=True, text=True
    )
    return done.stdout.split()


def measured(paths: list[str], jobs: int) -> str:
    out = child("--one", str(jobs), *paths)
    runs, events, secs, cpu, own, workers = int(out[0]), int(out[1]), *map(float, out[2:])
    peak = f"peak RSS {own:,.0f} MB" + (f" + {workers:,.0f} MB a worker" if jobs > 1 else "")
    rate = f"{events / secs:,.0f} events/s"
    # CPU time per event, all processes together: on a machine shared with other work it
    # moves less than the wall-clock rate does
    per_event = f"{cpu / max(events, 1) * 1e6:.1f} us CPU an event"
    return f"{runs:,} runs, {events:,} events in {secs:.2f} s = {rate} ({per_event}); {peak}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--corpus", type=Path, default=HERE.parents[1] / "shared" / "corpus")
    parser.add_argument("--one", type=int, help=argparse.SUPPRESS)  # child: jobs
    parser.add_argument("--generate", nargs=2, help=argparse.SUPPRESS)  # child: events, kind
    parser.add_argument("--worker", metavar="FILE", help="scan FILE as one worker does")
    parser.add_argument("paths", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        worker(args.worker)
        return
    if args.one is not None:
        one(args.paths, args.one)
        return
    if args.generate is not None:
        generate(args.paths[0], int(args.generate[0]), args.generate[1] == "short")
        return
    corpus = sorted(str(p) for p in args.corpus.glob("*.jsonl"))
    print(f"scan (scan_paths, as the CLI) on {os.cpu_count()} cores")
    jobs_list = sorted({1, args.jobs})
    if corpus:
        for jobs in jobs_list:
            print(f"  corpus ({len(corpus)} files), jobs={jobs}: {measured(corpus, jobs)}")
    with tempfile.TemporaryDirectory() as tmp:
        for short, label in ((True, "short events"), (False, "realistic events")):
            for total in (args.events // 4, args.events):
                path = Path(tmp) / f"gen-{label.split()[0]}-{total}.jsonl"
                child("--generate", str(total), "short" if short else "long", str(path))
                size = path.stat().st_size / 1e6
                for jobs in jobs_list:
                    print(
                        f"  generated, {label} ({size:,.0f} MB), jobs={jobs}: "
                        f"{measured([str(path)], jobs)}"
                    )
                path.unlink()


if __name__ == "__main__":
    main()
