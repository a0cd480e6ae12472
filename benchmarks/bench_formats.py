"""Reading and scanning exported traces: events per second per format.

Generates (in a temporary directory) an OTLP JSON Lines file of ``--spans``
spans (default 1,000,000; GenAI conventions: per trace an ``invoke_agent``
root with chat and ``execute_tool`` children), and the same traces as LangSmith
runs and Langfuse observations, one record per line. For each format it
prints the events/s of reading alone (``read_runs``) and of reading + scanning
with the CLI's ``scan_stream`` (loopwatch.scan) on all cores. Prints numbers; asserts nothing.

    python benchmarks/bench_formats.py [--spans 1000000] [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import orjson

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

from loopwatch import Config  # noqa: E402
from loopwatch.scan import Report, scan_stream  # noqa: E402
from loopwatch.traces import TraceRun, read_runs  # noqa: E402

SPANS_PER_TRACE = 21  # the agent span + 10 x (chat, execute_tool)
QUERIES = ["paris weather", "lyon population", "acme ceo", "rust borrow checker", "tokyo trains"]


def _traces(n_traces: int) -> Iterator[tuple[int, list[dict[str, object]]]]:
    """Abstract traces: (index, spans as plain dicts) — shared by every format."""
    rnd = random.Random(7)
    for t in range(n_traces):
        base = 1_700_000_000_000_000_000 + t * 10_000_000_000
        spans: list[dict[str, object]] = [
            {
                "kind": "agent",
                "i": 0,
                "start": base,
                "end": base + 9_000_000_000,
                "name": "agent",
                "input": f"task number {t}",
            }
        ]
        looping = t % 5 == 0
        for k in range(10):
            q = QUERIES[0] if looping else f"{rnd.choice(QUERIES)} {k} {t}"
            start = base + (2 * k + 1) * 400_000_000
            spans.append(
                {
                    "kind": "chat",
                    "i": 2 * k + 1,
                    "start": start,
                    "end": start + 300_000_000,
                    "text": f"I will search for {q}.",
                    "tokens": 120,
                }
            )
            spans.append(
                {
                    "kind": "tool",
                    "i": 2 * k + 2,
                    "start": start + 400_000_000,
                    "end": start + 700_000_000,
                    "name": "web_search",
                    "args": {"q": q},
                    "result": f"results for {q}",
                }
            )
        yield t, spans


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def otlp_lines(n_traces: int) -> Iterator[bytes]:
    for t, spans in _traces(n_traces):
        trace_id = f"{t:032x}"
        out = []
        for s in spans:
            span_id = f"{t:08x}{s['i']:08x}"
            if s["kind"] == "agent":
                attrs = [
                    _attr("gen_ai.operation.name", "invoke_agent"),
                    _attr("gen_ai.agent.name", s["name"]),
                    _attr(
                        "gen_ai.input.messages",
                        orjson.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": s["input"]}]}]
                        ).decode(),
                    ),
                ]
                name, parent = "invoke_agent agent", ""
            elif s["kind"] == "chat":
                attrs = [
                    _attr("gen_ai.operation.name", "chat"),
                    _attr(
                        "gen_ai.output.messages",
                        orjson.dumps(
                            [
                                {
                                    "role": "assistant",
                                    "parts": [{"type": "text", "content": s["text"]}],
                                }
                            ]
                        ).decode(),
                    ),
                    _attr("gen_ai.usage.output_tokens", s["tokens"]),
                ]
                name, parent = "chat model", f"{t:08x}{0:08x}"
            else:
                attrs = [
                    _attr("gen_ai.operation.name", "execute_tool"),
                    _attr("gen_ai.tool.name", s["name"]),
                    _attr("gen_ai.tool.call.arguments", orjson.dumps(s["args"]).decode()),
                    _attr("gen_ai.tool.call.result", s["result"]),
                ]
                name, parent = "execute_tool web_search", f"{t:08x}{0:08x}"
            out.append(
                {
                    "traceId": trace_id,
                    "spanId": span_id,
                    "parentSpanId": parent,
                    "name": name,
                    "kind": 1,
                    "startTimeUnixNano": str(s["start"]),
                    "endTimeUnixNano": str(s["end"]),
                    "attributes": attrs,
                    "status": {},
                }
            )
        out.append(out.pop(0))  # exporters write the root last: it ends last
        yield orjson.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": {"attributes": [_attr("service.name", "bench")]},
                        "scopeSpans": [{"scope": {"name": "bench"}, "spans": out}],
                    }
                ]
            }
        )


def _iso(ns: int) -> str:
    secs, rem = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{rem // 1000:06d}Z"


def langsmith_lines(n_traces: int) -> Iterator[bytes]:
    for t, spans in _traces(n_traces):
        trace_id = f"00000000-0000-4000-8000-{t:012x}"
        root = f"{trace_id[:-4]}0000"
        for s in reversed(spans):  # children first, as an unordered export would have them
            rid = f"{trace_id[:-4]}{s['i']:04x}"
            run: dict[str, object] = {
                "id": rid,
                "trace_id": trace_id,
                "start_time": _iso(int(s["start"])),  # type: ignore[call-overload]
                "end_time": _iso(int(s["end"])),  # type: ignore[call-overload]
                "parent_run_id": None if s["kind"] == "agent" else root,
            }
            if s["kind"] == "agent":
                run.update(
                    run_type="chain",
                    name=s["name"],
                    inputs={"input": s["input"]},
                    extra={"metadata": {"lc_agent_name": s["name"]}},
                )
            elif s["kind"] == "chat":
                run.update(
                    run_type="llm",
                    name="ChatOpenAI",
                    inputs={},
                    outputs={"generations": [[{"text": s["text"]}]]},
                    total_tokens=s["tokens"],
                )
            else:
                run.update(
                    run_type="tool",
                    name=s["name"],
                    inputs=s["args"],
                    outputs={"output": s["result"]},
                )
            yield orjson.dumps(run)


def langfuse_lines(n_traces: int) -> Iterator[bytes]:
    for t, spans in _traces(n_traces):
        trace_id = f"{t:032x}"
        for s in spans:
            obs: dict[str, object] = {
                "id": f"{trace_id}-{s['i']}",
                "traceId": trace_id,
                "startTime": _iso(int(s["start"])),  # type: ignore[call-overload]
                "endTime": _iso(int(s["end"])),  # type: ignore[call-overload]
                "projectId": "bench",
                "parentObservationId": None if s["kind"] == "agent" else f"{trace_id}-0",
            }
            if s["kind"] == "agent":
                obs.update(type="AGENT", name=s["name"], input=s["input"])
            elif s["kind"] == "chat":
                obs.update(
                    type="GENERATION",
                    name="llm",
                    output=orjson.dumps({"role": "assistant", "content": s["text"]}).decode(),
                    usageDetails={"total": s["tokens"]},
                )
            else:
                obs.update(
                    type="TOOL",
                    name=s["name"],
                    input=orjson.dumps(s["args"]).decode(),
                    output=s["result"],
                )
            yield orjson.dumps(obs)


def measure(path: Path, jobs: int) -> None:
    start = time.perf_counter()
    runs = events = 0
    for item in read_runs(str(path)):
        if isinstance(item, TraceRun):
            runs += 1
            events += len(item.events)
    read_secs = time.perf_counter() - start
    start = time.perf_counter()
    scanned = stops = 0
    for item in scan_stream(read_runs(str(path)), Config(), jobs):
        if isinstance(item, Report):
            scanned += item.events
            stops += item.verdict == "stop"
    scan_secs = time.perf_counter() - start
    print(
        f"  read: {runs:,} runs, {events:,} events in {read_secs:.1f} s = "
        f"{events / read_secs:,.0f} events/s\n"
        f"  read + scan (jobs={jobs}): {scanned:,} events in {scan_secs:.1f} s = "
        f"{scanned / scan_secs:,.0f} events/s ({stops:,} runs stopped)"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
    n_traces = max(1, args.spans // SPANS_PER_TRACE)
    print(
        f"{n_traces:,} traces x {SPANS_PER_TRACE} spans = {n_traces * SPANS_PER_TRACE:,} spans; "
        f"{os.cpu_count()} cores"
    )
    with tempfile.TemporaryDirectory() as tmp:
        for fmt, lines in (
            ("otlp", otlp_lines),
            ("langsmith", langsmith_lines),
            ("langfuse", langfuse_lines),
        ):
            path = Path(tmp) / f"{fmt}.jsonl"
            start = time.perf_counter()
            with open(path, "wb") as fh:
                for line in lines(n_traces):
                    fh.write(line + b"\n")
            size = path.stat().st_size / 1e6
            print(f"{fmt}: {size:,.0f} MB generated in {time.perf_counter() - start:.1f} s")
            measure(path, args.jobs)
            path.unlink()


if __name__ == "__main__":
    main()
