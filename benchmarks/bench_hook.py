"""Latency of one coding-agent hook call, process start to exit, as the agent sees it.

Each call runs the command ``loopwatch install`` writes, exactly as the agent runs it
(``/bin/sh -c`` on the project command: ``loopwatch`` found on PATH, this virtualenv's;
and on the user command, this interpreter pinned) with one payload on stdin, waits
for it to exit, and times the whole thing. The payloads replay a real Claude Code
session from the shared corpus (PreToolUse / PostToolUse / PostToolUseFailure in
order) on one SQLite state file, so state grows as it would.

The installed command asks the hook daemon (``loopwatch.hooks.daemon``): the main row
is that path, with the daemon running. Beside it: the cold first call (no daemon yet:
it answers in its own process and starts one, each in a fresh state folder), the
in-process path every fallback takes (``LOOPWATCH_HOOK_DAEMON=0``), a bare ``python -c
pass`` (the floor no Python hook can beat), the user command (pinned interpreter,
``python -m _loopwatch_entry``), ``python -m loopwatch.hooks claude-code`` (in-process,
importing the whole package first) and the project command with no bytecode cache.

Target (issue 35): median <= 20 ms and p95 <= 40 ms for the installed command.

Usage: python benchmarks/bench_hook.py [--calls 200]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
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
        f"{name:<44} n={len(times):<4} median {statistics.median(times):6.1f} ms   "
        f"p95 {p95:6.1f} ms   max {ordered[-1]:6.1f} ms"
    )


def daemon_ready(env: dict[str, str], timeout: float = 30.0) -> int:
    """Wait until the daemon for ``env`` answers; its pid."""
    code = "import json; from loopwatch.hooks.daemon import status; print(json.dumps(status()))"
    probe = [sys.executable, "-c", code]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        out = subprocess.run(probe, capture_output=True, env=env, check=True).stdout
        found = json.loads(out)
        if found.get("running"):
            return int(found["pid"])
        time.sleep(0.1)
    raise SystemExit("the hook daemon did not start")


def stop(pids: list[int]) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="hook calls to time")
    args = parser.parse_args()
    pids: list[int] = []
    with tempfile.TemporaryDirectory(dir="/tmp") as tmp:
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
        # As installed: bytecode cached (pip writes it). Kept out of the source tree.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env.pop("LOOPWATCH_HOOK_DAEMON", None)
        env["LOOPWATCH_HOOK_DAEMON_IDLE"] = "60"  # the daemons started here go soon
        env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        env["LOOPWATCH_STATE"] = str(Path(tmp) / "s" / "state.db")
        inputs = [json.dumps(p).encode() for p in payloads(args.calls)]
        py = sys.executable
        # The project command finds `loopwatch` on PATH: this interpreter's.
        env["PATH"] = os.path.dirname(py) + os.pathsep + env.get("PATH", "")
        project, user = installed("project"), installed("user")
        short = inputs[: max(20, args.calls // 5)]
        try:
            # Warm the file-system cache and write the bytecode once, untimed; the
            # first project call starts the daemon.
            time_calls([py, "-m", "loopwatch.hooks", "claude-code"], inputs[:3], env)
            time_calls(project, inputs[:3], env)
            pids.append(daemon_ready(env))
            floor = time_calls([py, "-c", "pass"], short, env)
            hook = time_calls(project, inputs, env)
            pinned = time_calls(user, short, env)
            cold = []
            for n in range(5):  # a fresh state folder each: no daemon there yet
                env["LOOPWATCH_STATE"] = str(Path(tmp) / f"c{n}" / "state.db")
                cold += time_calls(project, inputs[:1], env)
                pids.append(daemon_ready(env))
            off = {**env, "LOOPWATCH_HOOK_DAEMON": "0"}
            fresh = []
            for n in range(5):  # as the cold calls, in-process
                off["LOOPWATCH_STATE"] = str(Path(tmp) / f"i{n}" / "state.db")
                fresh += time_calls(project, inputs[:1], off)
            off["LOOPWATCH_STATE"] = str(Path(tmp) / "f" / "state.db")
            inproc = time_calls(project, short, off)
            env["LOOPWATCH_STATE"] = str(Path(tmp) / "m" / "state.db")
            via_m = time_calls([py, "-m", "loopwatch.hooks", "claude-code"], short, env)
            env["PYTHONDONTWRITEBYTECODE"] = "1"
            env["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "empty-pycache")
            env["LOOPWATCH_STATE"] = str(Path(tmp) / "n" / "state.db")
            time_calls(project, inputs[:1], env)
            pids.append(daemon_ready(env))
            nocache = time_calls(project, short, env)
        finally:
            stop(pids)
    version = sys.version.split()[0]
    print(f"hook latency, process start to exit ({os.cpu_count()} CPUs, Python {version})")
    print(summary("python -c pass (floor)", floor))
    print(summary("project command, daemon running", hook))
    print(summary("project command, cold: starts the daemon", cold))
    print(summary("project command, in-process, fresh folder", fresh))
    print(summary("project command, in-process (fallback)", inproc))
    print(summary("user command (pinned interpreter), daemon", pinned))
    print(summary("python -m loopwatch.hooks (in-process)", via_m))
    print(summary("project command, no bytecode cache, daemon", nocache))
    median = statistics.median(hook)
    p95 = p95_of(hook)
    ok = median <= 20 and p95 <= 40
    print(f"target median <= 20 ms, p95 <= 40 ms: {'met' if ok else 'NOT met'}")


if __name__ == "__main__":
    main()
