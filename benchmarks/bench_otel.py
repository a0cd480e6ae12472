"""What ``LoopwatchSpanProcessor`` adds to each span, against a bare ``TracerProvider``.

A span processor runs on the thread that starts and ends each span: its cost is paid by
the agent, span by span. This writes the spans an instrumented agent writes (GenAI
conventions, content captured: an ``invoke_agent`` span around turns of a ``chat`` span
and an ``execute_tool`` span, the tool's arguments at its start and its result at its
end), half of the runs looping on one call and half not, and times each span's start
and end calls (``start_span`` + ``end``, where processors run) on a bare provider and on
one with the processor (default detectors, memory store), interleaved round by round.
For scale, ``guard.observe`` alone on the same events: the processor's floor.

Usage: python benchmarks/bench_otel.py [--runs 200] [--turns 10] [--rounds 5]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Iterator
from typing import Any

from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider

from loopwatch import Config, Guard
from loopwatch.integrations.opentelemetry import LoopwatchSpanProcessor

Timings = dict[str, list[int]]  # "healthy tool"... -> ns per span (its start + its end)
KINDS = ("tool", "chat", "agent")


def looping(run: int) -> bool:
    return run % 2 == 1


def workload(runs: int, turns: int) -> Iterator[tuple[int, int, dict[str, Any]]]:
    """(run, turn, tool arguments) of every turn, runs interleaved turn by turn."""
    for turn in range(turns):
        for run in range(runs):
            q = "paris weather" if looping(run) else f"topic {run} {turn}"
            yield run, turn, {"q": q}


def health(run: int) -> str:
    return "looping" if looping(run) else "healthy"


def write_spans(provider: TracerProvider, runs: int, turns: int) -> Timings:
    tracer = provider.get_tracer("bench")
    out: Timings = {}
    clock = time.perf_counter_ns
    agents = []
    for run in range(runs):
        t0 = clock()
        span = tracer.start_span(
            f"invoke_agent agent-{run}",
            attributes={"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "agent",
                        "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [
                            {"type": "text", "content": f"task {run}"}]}])},
        )  # fmt: skip
        agents.append((span, clock() - t0))
    for run, turn, args in workload(runs, turns):
        parent, _ = agents[run]
        ctx = otel_trace.set_span_in_context(parent)
        call = {"type": "tool_call", "id": f"c{run}.{turn}", "name": "search", "arguments": args}
        text = {"type": "text", "content": f"Searching {args['q']}."}
        output = [{"role": "assistant", "parts": [text, call]}]
        t0 = clock()
        chat = tracer.start_span("chat model", ctx, attributes={"gen_ai.operation.name": "chat"})
        t1 = clock()
        chat.set_attribute("gen_ai.output.messages", json.dumps(output))
        chat.set_attribute("gen_ai.usage.output_tokens", 12)
        t2 = clock()
        chat.end()
        out.setdefault(f"{health(run)} chat", []).append(clock() - t2 + t1 - t0)
        t0 = clock()
        tool = tracer.start_span(
            "execute_tool search", ctx,
            attributes={"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "search",
                        "gen_ai.tool.call.id": f"c{run}.{turn}",
                        "gen_ai.tool.call.arguments": json.dumps(args)},
        )  # fmt: skip
        t1 = clock()
        tool.set_attribute("gen_ai.tool.call.result", f"Results for {args['q']}: 18C, cloudy")
        t2 = clock()
        tool.end()
        out.setdefault(f"{health(run)} tool", []).append(clock() - t2 + t1 - t0)
    for run, (span, started) in enumerate(agents):
        t0 = clock()
        span.end()
        out.setdefault(f"{health(run)} agent", []).append(clock() - t0 + started)
    return out


def guard_alone(runs: int, turns: int) -> list[int]:
    """ns per ``guard.observe`` on the events the processor reads from the same spans."""
    guard = Guard(Config())
    clock = time.perf_counter_ns
    out = []
    for run, turn, args in workload(runs, turns):
        rid = f"run-{run}"
        for event in (
            {"kind": "model", "text": f"Searching {args['q']}.", "tokens": 12.0},
            {"kind": "tool_call", "name": "search", "args": args, "id": f"c{run}.{turn}"},
            {"kind": "tool_result", "name": "search", "id": f"c{run}.{turn}",
             "text": f"Results for {args['q']}: 18C, cloudy"},
        ):  # fmt: skip
            t0 = clock()
            guard.observe(rid, event)
            out.append(clock() - t0)
    return out


def stats(values: list[int]) -> tuple[float, float]:
    """(median, p95) in microseconds."""
    ordered = sorted(values)
    return statistics.median(ordered) / 1e3, ordered[int(len(ordered) * 0.95)] / 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    bare: Timings = {}
    watched: Timings = {}
    stops = 0
    for _ in range(args.rounds):
        provider = TracerProvider()
        for kind, values in write_spans(provider, args.runs, args.turns).items():
            bare.setdefault(kind, []).extend(values)
        provider.shutdown()

        found: list[Any] = []
        provider = TracerProvider()
        processor = LoopwatchSpanProcessor(Guard(Config()), on_verdict=found.append)
        provider.add_span_processor(processor)
        for kind, values in write_spans(provider, args.runs, args.turns).items():
            watched.setdefault(kind, []).extend(values)
        provider.shutdown()
        stops = len({f.run_id for f in found if f.action == "stop"})
    spans = sum(len(v) for v in bare.values()) // args.rounds
    print(f"{args.runs} runs x {args.turns} turns ({spans} spans), {args.rounds} rounds, "
          f"default detectors; {stops} of {args.runs} runs stopped (the looping half, whose "
          "verdicts are written on the trace and passed to on_verdict)")  # fmt: skip
    print("per span, its start + end, us:     bare median / p95   processor median / p95"
          "   added median / p95")  # fmt: skip
    for which in ("healthy", "looping", "all"):
        for kind in (*KINDS, "all"):
            keys = [k for k in bare if (which == "all" or k.startswith(which))
                    and (kind == "all" or k.endswith(kind))]  # fmt: skip
            b = [v for k in keys for v in bare[k]]
            w = [v for k in keys for v in watched[k]]
            (bm, bp), (wm, wp) = stats(b), stats(w)
            label = f"{which} {kind}"
            print(f"  {label:<15} {bm:>19.1f} / {bp:<6.1f} {wm:>16.1f} / {wp:<6.1f}"
                  f" {wm - bm:>13.1f} / {wp - bp:.1f}")  # fmt: skip
    gm, gp = stats(guard_alone(args.runs, args.turns * args.rounds))
    print(f"guard.observe alone on the same events: median {gm:.1f} us, p95 {gp:.1f} us "
          "(tool spans give two events, chat spans one)")  # fmt: skip


if __name__ == "__main__":
    main()
