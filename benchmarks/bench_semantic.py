"""Benchmark the semantic layer: model size and load time, embeddings per second,
separation of paraphrase vs distinct pairs, and the microseconds it adds per event
(cheap lexical pass on) over a realistic stream of recorded runs.

    .venv/bin/python benchmarks/bench_semantic.py [--runs N] [--static PATH]

``--static PATH`` also measures a model2vec static model saved at PATH (needs the
``model2vec`` package; nothing is downloaded). Prints numbers; asserts nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # nothing may download weights

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
CORPUS = ROOT.parent / "shared" / "corpus"


def dir_size(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def stream(runs_per_file: int) -> list[dict[str, Any]]:
    """The labelled scenarios plus the first runs of each corpus file."""
    from conftest import load_scenarios

    runs = load_scenarios("semantic_scenarios.jsonl") + load_scenarios()
    for name in ("mini_swe_agent", "tau_bench", "who_and_when", "bioagent"):
        path = CORPUS / f"{name}.jsonl"
        if not path.is_file():
            continue
        with open(path, encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i >= runs_per_file:
                    break
                runs.append(json.loads(line))
    return runs


def separation(name: str, embed: Any) -> None:
    from test_semantic import DISTINCT, PARAPHRASES

    def cos(a: str, b: str) -> float:
        va, vb = embed([a, b])
        na = sum(x * x for x in va) ** 0.5
        nb = sum(x * x for x in vb) ** 0.5
        return sum(x * y for x, y in zip(va, vb, strict=True)) / (na * nb)

    para = [cos(a, b) for a, b in PARAPHRASES]
    dist = [cos(a, b) for a, b in DISTINCT]
    total = len(para) + len(dist)
    best = max(
        ((sum(p >= t / 100 for p in para) + sum(d < t / 100 for d in dist)) / total, t / 100)
        for t in range(30, 96)
    )
    print(
        f"  {name}: paraphrases min {min(para):.3f} mean {sum(para) / len(para):.3f} | "
        f"distinct max {max(dist):.3f} mean {sum(dist) / len(dist):.3f} | "
        f"best accuracy {best[0]:.2f} at cut {best[1]:.2f}"
    )


def throughput(name: str, embed: Any) -> None:
    from test_semantic import DISTINCT, PARAPHRASES

    texts = [t for pair in PARAPHRASES + DISTINCT for t in pair]
    embed(texts[:4])  # warm up
    start = time.perf_counter()
    rounds = 3
    for _ in range(rounds):
        embed(texts)
    batch = rounds * len(texts) / (time.perf_counter() - start)
    start = time.perf_counter()
    for text in texts:
        embed([text])
    single = len(texts) / (time.perf_counter() - start)
    rate = f"{batch:,.0f} embeddings/s in batches of {len(texts)}"
    print(f"  {name}: {rate}, {single:,.0f}/s one by one")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=25, help="runs per corpus file (default 25)")
    parser.add_argument("--static", type=Path, help="a model2vec model folder to compare")
    args = parser.parse_args()

    from loopwatch.detectors.semantic import Semantic
    from loopwatch.embeddings import EmbeddingCache, MiniLMEmbedder, semantic_unavailable_reason

    reason = semantic_unavailable_reason()
    if reason:
        print(reason)
        return
    print("model")
    start = time.perf_counter()
    embedder = MiniLMEmbedder()  # imports torch + transformers, loads the weights
    load = time.perf_counter() - start
    start = time.perf_counter()
    MiniLMEmbedder()
    reload = time.perf_counter() - start
    size = dir_size(embedder.path)
    weights = dir_size(embedder.path) - sum(
        p.stat().st_size for p in embedder.path.rglob("*") if p.suffix != ".safetensors"
    )
    print(f"  all-MiniLM-L6-v2 at {embedder.path}")
    print(f"  size on disk {size / 1e6:.1f} MB (weights {weights / 1e6:.1f} MB)")
    print(f"  load {load:.2f} s cold (with torch/transformers imports), {reload:.2f} s warm")

    print("throughput")
    throughput("all-MiniLM-L6-v2", embedder.embed)
    print("separation (20 paraphrase pairs vs 20 distinct pairs, cosine)")
    separation("all-MiniLM-L6-v2", embedder.embed)
    if args.static is not None:
        from model2vec import StaticModel

        start = time.perf_counter()
        static = StaticModel.from_pretrained(str(args.static))
        print(
            f"  static {args.static.name}: {dir_size(args.static) / 1e6:.1f} MB, "
            f"load {time.perf_counter() - start:.2f} s"
        )

        def static_embed(texts: list[str]) -> list[list[float]]:
            out: list[list[float]] = static.encode(list(texts)).tolist()
            return out

        throughput(f"static {args.static.name}", static_embed)
        separation(f"static {args.static.name}", static_embed)

    print("added cost per event (scan, default detectors vs + Semantic, cold cache)")
    from loopwatch import Config
    from loopwatch.detectors import default_detectors
    from loopwatch.events import Event
    from loopwatch.scan import Scanner

    runs = stream(args.runs)
    prepared = [[Event.from_dict(e) for e in r["events"]] for r in runs]
    events = sum(len(r) for r in prepared)
    candidates = sum(1 for r in prepared for e in r if e.kind in ("model", "tool_call"))

    def timed(dets: list[Any]) -> float:
        scanner = Scanner(Config(), detectors=dets)
        begin = time.perf_counter()
        for evs in prepared:
            scanner.scan([Event.from_dict(e.to_dict()) for e in evs])
        return time.perf_counter() - begin

    timed(list(default_detectors()))  # warm the fingerprint caches
    base = min(timed(list(default_detectors())) for _ in range(2))
    cache = EmbeddingCache(embedder)
    semantic = Semantic(cache)
    with_semantic = timed([*default_detectors(), semantic])
    warm = timed([*default_detectors(), Semantic(cache)])
    print(f"  stream: {len(runs)} runs, {events:,} events ({candidates:,} outputs and calls)")
    print(f"  default detectors: {base / events * 1e6:.1f} us/event")
    print(
        f"  + semantic, cold cache: {with_semantic / events * 1e6:.1f} us/event "
        f"(+{(with_semantic - base) / events * 1e6:.1f} us)"
    )
    print(
        f"  + semantic, warm cache: {warm / events * 1e6:.1f} us/event "
        f"(+{(warm - base) / events * 1e6:.1f} us)"
    )
    compare = semantic.comparer
    print(
        f"  comparisons: {compare.lexical + compare.embedded:,} "
        f"({compare.lexical:,} decided lexically, {compare.embedded:,} by the model); "
        f"{cache.embedded:,} texts embedded = {cache.embedded / events:.3f} per event, "
        f"vs {candidates:,} if every output and call were embedded"
    )


if __name__ == "__main__":
    main()
