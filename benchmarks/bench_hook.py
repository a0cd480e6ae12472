"""Latency of one coding-agent hook call, process start to exit, as the agent sees it.

Each call runs the command ``loopwatch install`` writes, exactly as the agent runs it
(``/bin/sh -c`` on the project command: ``loopwatch`` found on PATH, this virtualenv's;
and on the user command, this interpreter pinned) with one payload on stdin, waits
for it to exit, and times the whole thing. The payloads replay a real Claude Code
session from the shared corpus (PreToolUse / PostToolUse / PostToolUseFailure in
order) on one SQLite state file, so state grows as it would. For scale it also times a
bare ``python -c pass`` (the floor no Python hook can beat), ``python -m
loopwatch.hooks claude-code`` (which imports the whole package first) and the
installed project command with no bytecode cache.

Target (issue 27): median <= 50 ms and p95 <= 100 ms for the installed command.

Usage: python benchmarks/bench_hook.py [--calls 200]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path("/work/shared/corpus/claude_code")
if not CORPUS.is_dir():
    CORPUS = ROOT.parent / "shared" / "corpus" / "claude_code"


def payloads(limit: int) -> list[dict[str, Any]]:
    """Hook payloads from the corpus's sessions (synthetic ones if it is absent)."""
    out: list[dict[str, Any]] = []
    files = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
    for path in files:
        for line in path.open():
            rec = json.loads(line)
            content = rec.get("message", {}).get("content")
            for block in content if isinstance(content, list) else []:
                base = {"session_id": rec.get("session_id"), "cwd": str(ROOT)}
                if block.get("type") == "tool_use":
                    out.append({**base, "hook_event_name": "PreToolUse",
                                "tool_name": block["name"], "tool_input": block["input"],
                                "tool_use_id": block["id"]})  # fmt: skip
                elif block.get("type") == "tool_result":
                    response = rec.get("tool_use_result")
                    if block.get("is_error"):
                        out.append({**base, "hook_event_name": "PostToolUseFailure",
                                    "tool_use_id": block["tool_use_id"],
                                    "error": response})  # fmt: skip
                    else:
                        out.append({**base, "hook_event_name": "PostToolUse",
                                    "tool_use_id": block["tool_use_id"],
                                    "tool_response": response})  # fmt: skip
            if len(out) >= limit:
                return out
    while len(out) < limit:
        n = len(out)
        out.append({"session_id": "synthetic", "cwd": str(ROOT), "hook_event_name": "PreToolUse",
                    "tool_name": "Bash", "tool_input": {"command": f"echo {n}"},
                    "tool_use_id": f"t{n}"})  # fmt: skip
    return out


def time_calls(argv: list[str], inputs: list[bytes], env: dict[str, str]) -> list[float]:
    """Milliseconds from spawn to exit for each input."""
    times = []
    for data in inputs:
        start = time.perf_counter()
        proc = subprocess.run(argv, input=data, capture_output=True, env=env, check=False)
        times.append((time.perf_counter() - start) * 1000)
        if proc.returncode != 0:
            raise SystemExit(f"{argv} exited {proc.returncode}: {proc.stderr.decode()[:500]}")
    return times


def installed(scope: str) -> list[str]:
    """The command ``loopwatch install`` writes for Claude Code, run as the agent runs it."""
    sys.path.insert(0, str(ROOT / "src"))
    from loopwatch.hooks.install import hook_command

    return ["/bin/sh", "-c", hook_command("claude-code", scope)]


def p95_of(times: list[float]) -> float:
    ordered = sorted(times)
    return ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]


def summary(name: str, times: list[float]) -> str:
    ordered = sorted(times)
    p95 = p95_of(times)
    return (
        f"{name:<42} n={len(times):<4} median {statistics.median(times):6.1f} ms   "
        f"p95 {p95:6.1f} ms   max {ordered[-1]:6.1f} ms"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="hook calls to time")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        # As installed: bytecode cached (pip writes it). Kept out of the source tree.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        env["LOOPWATCH_STATE"] = str(Path(tmp) / "state.db")
        inputs = [json.dumps(p).encode() for p in payloads(args.calls)]
        py = sys.executable
        # The project command finds `loopwatch` on PATH: this interpreter's.
        env["PATH"] = os.path.dirname(py) + os.pathsep + env.get("PATH", "")
        project, user = installed("project"), installed("user")
        short = inputs[: max(20, args.calls // 5)]
        # Warm the file-system cache and write the bytecode once, untimed.
        time_calls([py, "-m", "loopwatch.hooks", "claude-code"], inputs[:3], env)
        time_calls(project, inputs[:3], env)
        floor = time_calls([py, "-c", "pass"], short, env)
        hook = time_calls(project, inputs, env)
        env["LOOPWATCH_STATE"] = str(Path(tmp) / "state1.db")
        pinned = time_calls(user, short, env)
        env["LOOPWATCH_STATE"] = str(Path(tmp) / "state2.db")
        via_m = time_calls([py, "-m", "loopwatch.hooks", "claude-code"], short, env)
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "empty-pycache")
        env["LOOPWATCH_STATE"] = str(Path(tmp) / "state3.db")
        cold = time_calls(project, short, env)
    version = sys.version.split()[0]
    print(f"hook latency, process start to exit ({os.cpu_count()} CPUs, Python {version})")
    print(summary("python -c pass (floor)", floor))
    print(summary("project command (loopwatch hook, PATH)", hook))
    print(summary("user command (pinned interpreter)", pinned))
    print(summary("python -m loopwatch.hooks claude-code", via_m))
    print(summary("project command, no bytecode cache", cold))
    median = statistics.median(hook)
    p95 = p95_of(hook)
    ok = median <= 50 and p95 <= 100
    print(f"target median <= 50 ms, p95 <= 100 ms: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
