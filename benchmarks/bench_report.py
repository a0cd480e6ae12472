"""Benchmark the HTML report: 10,000 runs plus one run of 5,000 events.

Prints the time to scan and write the report, its size, and what a reader waits
for in headless Chromium: time until the page is ready (table drawn, worst run's
timeline open), re-sorting and filtering 10,000 rows, opening the 5,000-event
run, and selecting one of its findings.

    .venv/bin/python benchmarks/bench_report.py [--runs 10000] [--keep DIR]

Needs /usr/bin/chromium (scripts/services.d/chromium.sh) and Playwright for the
browser part; without them it prints the Python numbers and says why it stopped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import orjson

from loopwatch import Config, Scanner, TraceRun, read_runs
from loopwatch.report import write_report

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
WORDS = (
    "the", "agent", "searches", "for", "flights", "to", "paris", "and", "compares", "prices",
    "across", "several", "providers", "before", "it", "books", "the", "cheapest", "refundable",
    "option", "for", "the", "customer",
)  # fmt: skip


def sentence(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def make_run(rng: random.Random, index: int, events: int | None = None) -> dict[str, Any]:
    """A run of 10..80 events; about a third of runs loop on one search."""
    length = events if events is not None else rng.randint(10, 80)
    looping = events is not None or rng.random() < 0.33
    out: list[dict[str, Any]] = [{"kind": "user", "text": sentence(rng, 12)}]
    turn = 0
    while len(out) < length:
        out.append(
            {
                "kind": "model",
                "text": sentence(rng, rng.randint(8, 50)),
                "tokens": rng.randint(200, 900),
                "cost": round(rng.uniform(0.0005, 0.004), 5),
            }
        )
        query = "paris flights" if looping and turn > 2 else f"query {index} {turn}"
        call_id = f"c{turn}"
        out.append({"kind": "tool_call", "name": "web_search", "args": {"q": query}, "id": call_id})
        result = "no results" if looping and turn > 2 else sentence(rng, rng.randint(20, 150))
        out.append({"kind": "tool_result", "name": "web_search", "id": call_id, "text": result})
        turn += 1
    return {"run_id": f"run-{index:05d}", "meta": {"agent": "bench"}, "events": out[:length]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--long-run", type=int, default=5_000, help="events in the long run")
    parser.add_argument("--keep", metavar="DIR", help="keep the trace and report files here")
    args = parser.parse_args()

    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-report-"))
    work.mkdir(parents=True, exist_ok=True)
    traces = work / "traces.jsonl"
    report = work / "report.html"
    rng = random.Random(8)
    started = time.perf_counter()
    events = 0
    with open(traces, "wb") as fh:
        for index in range(args.runs):
            run = make_run(rng, index)
            events += len(run["events"])
            fh.write(orjson.dumps(run) + b"\n")
        long_run = make_run(rng, args.runs, events=args.long_run)
        long_run["run_id"] = "long-run"
        events += len(long_run["events"])
        fh.write(orjson.dumps(long_run) + b"\n")
    runs = args.runs + 1
    print(f"input: {runs:,} runs, {events:,} events, {traces.stat().st_size / 1e6:.1f} MB JSONL")
    print(f"  generated in {time.perf_counter() - started:.2f} s")

    config = Config()
    started = time.perf_counter()
    summary = write_report(read_runs(str(traces)), report, config=config)
    total = time.perf_counter() - started
    print(f"read + scan + write report: {total:.2f} s ({runs / total:,.0f} runs/s)")

    scanner = Scanner(config)
    started = time.perf_counter()
    pairs = [
        (run, scanner.scan(run.to_dict()))
        for run in read_runs(str(traces))
        if isinstance(run, TraceRun)
    ]
    scan_only = time.perf_counter() - started
    started = time.perf_counter()
    write_report(pairs, work / "report-prescanned.html")
    render_only = time.perf_counter() - started
    del pairs
    print(f"  of which read + scan: {scan_only:.2f} s; writing the HTML alone: {render_only:.2f} s")
    print(
        f"report: {summary.bytes / 1e6:.1f} MB ({summary.bytes / runs / 1e3:.1f} kB per run), "
        f"verdicts {summary.verdicts}"
    )

    if not os.access(CHROMIUM, os.X_OK):
        print(f"browser: skipped, {CHROMIUM} missing (run scripts/services.d/chromium.sh)")
        return 1
    if importlib.util.find_spec("playwright") is None:
        print("browser: skipped, Playwright missing (pip install playwright)")
        return 1
    browser_numbers(report, "long-run")
    if not args.keep:
        for path in work.iterdir():
            path.unlink()
        work.rmdir()
    return 0


def browser_numbers(report: Path, long_id: str) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
        started = time.perf_counter()
        page.goto(report.resolve().as_uri(), wait_until="commit", timeout=120_000)
        page.wait_for_selector("html[data-ready='1']", timeout=120_000)
        wall = time.perf_counter() - started
        timings = page.evaluate("() => window.loopwatchReport.timings")
        print(
            f"browser: ready {timings['ready']:.0f} ms after navigation start "
            f"(wall {wall * 1000:.0f} ms incl. IPC); in the script: JSON.parse rows "
            f"{timings['parse']:.0f} ms, filter+sort+first page {timings['table']:.0f} ms, "
            f"open worst run {timings['run']:.0f} ms"
        )
        sort_ms = page.evaluate(
            """() => {
                const t = performance.now();
                document.querySelector("#run-table th[data-key='n'] button").click();
                return performance.now() - t;
            }"""
        )
        filter_ms = page.evaluate(
            """() => {
                const t = performance.now();
                const select = document.getElementById("f-verdict");
                select.value = "stop";
                select.dispatchEvent(new Event("change"));
                return performance.now() - t;
            }"""
        )
        print(f"  re-sort 10k rows by length: {sort_ms:.0f} ms; filter to stop: {filter_ms:.0f} ms")
        # script time, then the style and layout the browser must do before painting
        open_ms, open_layout_ms = page.evaluate(
            """(id) => {
                const rows = JSON.parse(document.getElementById("lw-runs").textContent);
                const index = rows.findIndex(row => row.id === id);
                let t = performance.now();
                window.loopwatchReport.openRun(index);
                const script = performance.now() - t;
                t = performance.now();
                void document.body.offsetHeight;
                return [script, performance.now() - t];
            }""",
            long_id,
        )
        marks = page.locator("#timeline .mk").count()
        select_ms = page.evaluate(
            """() => {
                const t = performance.now();
                document.querySelector("#findings li[data-f] button").click();
                void document.body.offsetHeight;
                return performance.now() - t;
            }"""
        )
        heap = page.evaluate("() => performance.memory ? performance.memory.usedJSHeapSize : 0")
        print(
            f"  open the {marks:,}-mark run: {open_ms:.0f} ms script + {open_layout_ms:.0f} ms "
            f"style and layout; select a finding (incl. layout): {select_ms:.0f} ms"
        )
        print(f"  JS heap in use: {heap / 1e6:.0f} MB; console/page errors: {len(errors)}")
        browser.close()


if __name__ == "__main__":
    sys.exit(main())
