"""Realistic synthetic agent traffic for the speed benchmarks (deterministic)."""

from __future__ import annotations

import random
import statistics
import time
from typing import Any

import orjson
import xxhash

WORDS = [
    "the",
    "agent",
    "reads",
    "the",
    "file",
    "and",
    "then",
    "runs",
    "the",
    "tests",
    "to",
    "check",
    "whether",
    "the",
    "parser",
    "handles",
    "nested",
    "quotes",
    "correctly",
    "before",
    "it",
    "edits",
    "the",
    "tokenizer",
    "module",
    "again",
    "with",
    "a",
    "smaller",
    "patch",
    "that",
    "keeps",
    "the",
    "public",
    "interface",
    "stable",
    "for",
    "callers",
    "in",
    "the",
    "cli",
]
TOOLS = ["web_search", "read_file", "run_tests", "edit_file", "list_files", "bash"]


def model_text(rng: random.Random) -> str:
    """Model output of 200-2,000 characters."""
    target = rng.randint(200, 2000)
    out: list[str] = []
    size = 0
    while size < target:
        word = rng.choice(WORDS)
        out.append(word)
        size += len(word) + 1
    return " ".join(out)


def agent_turn(rng: random.Random, run: int, turn: int) -> list[dict[str, Any]]:
    """One turn: a model output, then one or two tool calls with their results.
    About one call in five repeats an earlier call of the run (re-reads, re-runs)."""
    events: list[dict[str, Any]] = [{"kind": "model", "text": model_text(rng), "tokens": 300}]
    for _ in range(rng.choice((1, 1, 2))):
        tool = rng.choice(TOOLS)
        key = rng.randint(0, 3) if rng.random() < 0.2 else turn
        cid = f"{run}-{turn}-{len(events)}"
        events.append(
            {
                "kind": "tool_call",
                "name": tool,
                "args": {"path": f"src/m{key}.py", "n": key},
                "id": cid,
            }
        )
        events.append(
            {
                "kind": "tool_result",
                "name": tool,
                "id": cid,
                "text": f"result of {tool} #{key}: "
                + " ".join(rng.choices(WORDS, k=rng.randint(5, 60))),
                "error": rng.random() < 0.05,
            }
        )
    return events


def interleaved(runs: int, events_total: int, seed: int = 7) -> list[tuple[str, dict[str, Any]]]:
    """(run_id, event) pairs, ``runs`` live runs advancing in random order."""
    rng = random.Random(seed)
    queues: list[list[dict[str, Any]]] = [[] for _ in range(runs)]
    turns = [0] * runs
    out: list[tuple[str, dict[str, Any]]] = []
    while len(out) < events_total:
        r = rng.randrange(runs)
        if not queues[r]:
            queues[r] = agent_turn(rng, r, turns[r])
            turns[r] += 1
        out.append((f"run-{r}", queues[r].pop(0)))
    return out


def runs_file_lines(n_runs: int, events_per_run: int, short: bool, seed: int = 11) -> list[bytes]:
    """Native JSONL lines; ``short`` events are a few dozen bytes each."""
    import orjson

    rng = random.Random(seed)
    lines = []
    for r in range(n_runs):
        events: list[dict[str, Any]] = []
        turn = 0
        while len(events) < events_per_run:
            if short:
                k = rng.randint(0, 30)
                events.append({"kind": "tool_call", "name": "t", "args": {"k": k}})
                events.append({"kind": "tool_result", "name": "t", "text": f"r{k % 7}"})
                events.append({"kind": "model", "text": f"step {turn}"})
            else:
                events += agent_turn(rng, r, turn)
            turn += 1
        lines.append(orjson.dumps({"run_id": f"r{r}", "events": events[:events_per_run]}))
    return lines


class Floor:
    """The minimal loop guard the issue measures against: an exact key of the call
    (orjson + xxhash), a count per run, and a period-1..6 ring of recent keys. What
    any guard must at least do per event; loopwatch's cost is printed as a multiple."""

    def __init__(self) -> None:
        self.runs: dict[str, tuple[dict[int, int], list[int]]] = {}

    def observe(self, run_id: str, event: dict[str, Any]) -> bool:
        counts, ring = self.runs.setdefault(run_id, ({}, []))
        if event.get("kind") != "tool_call":
            return False
        key = xxhash.xxh3_64_intdigest(
            orjson.dumps([event.get("name"), event.get("args")], option=orjson.OPT_SORT_KEYS)
        )
        counts[key] = counts.get(key, 0) + 1
        ring.append(key)
        if len(ring) > 12:
            del ring[0]
        n = len(ring)
        cycle = any(ring[n - p :] == ring[n - 2 * p : n - p] for p in range(1, 7) if n >= 2 * p)
        return counts[key] >= 5 or cycle


def floor_median(traffic: list[tuple[str, dict[str, Any]]]) -> float:
    floor = Floor()
    clock = time.perf_counter_ns
    timings = []
    for run_id, event in traffic:
        t0 = clock()
        floor.observe(run_id, event)
        timings.append((clock() - t0) / 1000)
    return statistics.median(timings)
