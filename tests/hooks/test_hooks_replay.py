"""Replaying real Claude Code sessions through ``loopwatch hook claude-code`` gives the
verdict ``loopwatch scan`` gives for the same transcript.

The 48 stream-json logs in ../shared/corpus/claude_code/ are turned into the hook
payloads Claude Code would have sent (PreToolUse for each call it ran, PostToolUse or
PostToolUseFailure for each result, with the structured ``tool_use_result`` as the
payload's ``tool_response``), built here from the raw lines, independently of the
reader. Each is answered by the hook's dispatch with a fresh SQLite state file (a new
connection per call, as in one process per call); a few go through real processes.

Agreement means the same verdict (ok / warn / stop) at the same tool event (kind and
tool_use_id) for the first warning and for the first block; or, for the block, the
call itself when the scan stops on its result and that stop did not depend on the
result (the hook denies such a call before it runs: ``foresee``), or a call the model
made in the same message as that one (a parallel batch: the hook judges the first
call of the batch before the results of the others, and of the calls before it,
are in).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loopwatch import Config, Scanner, read_runs
from loopwatch.hooks._dispatch import Answer, handle

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "claude_code"
if not CORPUS.is_dir():
    CORPUS = Path("/work/shared/corpus/claude_code")
FILES = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []
SRC = str(Path(__file__).resolve().parents[2] / "src")

pytestmark = pytest.mark.skipif(not FILES, reason="the Claude Code corpus is not here")

Point = tuple[str, str] | None  # (event kind, tool_use_id) of the hook call


def payloads(path: Path) -> Iterator[dict[str, Any]]:
    """The hook payloads Claude Code would have sent during this session."""
    records = [json.loads(line) for line in path.open() if line.strip()]
    steps = []  # (line, "use" | "result", id) in file order
    for i, rec in enumerate(records):
        content = rec.get("message", {}).get("content")
        for block in content if isinstance(content, list) else []:
            if block.get("type") == "tool_use":
                steps.append((i, "use", block["id"]))
            elif block.get("type") == "tool_result":
                steps.append((i, "result", block["tool_use_id"]))

    def was_run(line: int, call_id: str) -> bool:
        """Claude Code ran the call (and fired PreToolUse) if its result comes before
        the id is used again; or, with no result, if nothing was answered after it."""
        after = [s for s in steps if s[0] > line or (s[0] == line and s[1] == "result")]
        for _, kind, other in after:
            if other == call_id:
                return kind == "result"
        return not any(kind == "result" for _, kind, _ in after)

    calls: dict[str, dict[str, Any]] = {}
    for i, rec in enumerate(records):
        session = rec.get("session_id")
        content = rec.get("message", {}).get("content")
        if rec.get("type") == "assistant":
            for block in content:
                if block.get("type") != "tool_use":
                    continue
                if was_run(i, block["id"]):
                    calls[block["id"]] = block
                    yield {
                        "session_id": session,
                        "cwd": "/app",
                        "hook_event_name": "PreToolUse",
                        "tool_name": block["name"],
                        "tool_input": block["input"],
                        "tool_use_id": block["id"],
                    }
        elif rec.get("type") == "user" and isinstance(content, list):
            for block in content:
                if block.get("type") == "tool_result":
                    response = rec.get("tool_use_result", block.get("content"))
                    call = calls.get(block["tool_use_id"], {})
                    base = {
                        "session_id": session,
                        "cwd": "/app",
                        "tool_use_id": block["tool_use_id"],
                        "tool_name": call.get("name"),
                        "tool_input": call.get("input"),
                    }
                    if block.get("is_error"):
                        yield {**base, "hook_event_name": "PostToolUseFailure", "error": response}
                    else:
                        yield {**base, "hook_event_name": "PostToolUse", "tool_response": response}
                elif block.get("type") == "text" and rec.get("parent_tool_use_id") is None:
                    yield {
                        "session_id": session,
                        "hook_event_name": "UserPromptSubmit",
                        "prompt": block["text"],
                    }


def answer_action(answer: Answer) -> str:
    if not answer.stdout:
        return "ok"
    out = json.loads(answer.stdout)
    spec = out.get("hookSpecificOutput", {})
    if spec.get("permissionDecision") == "deny" or out.get("decision") == "block":
        return "stop"
    if out.get("continue") is False:
        return "stop"
    return "warn"


def point(payload: dict[str, Any]) -> Point:
    kind = "tool_call" if payload["hook_event_name"] == "PreToolUse" else "tool_result"
    if payload["hook_event_name"] == "UserPromptSubmit":
        return ("user", "")
    return (kind, payload["tool_use_id"])


def hook_verdict(answers: list[tuple[dict[str, Any], str]]) -> tuple[str, Point, Point]:
    first_warn = first_stop = None
    for payload, action in answers:
        if action != "ok" and first_warn is None:
            first_warn = point(payload)
        if action == "stop" and first_stop is None:
            first_stop = point(payload)
    verdict = "stop" if first_stop else "warn" if first_warn else "ok"
    return verdict, first_warn, first_stop


def scan_verdict(path: Path) -> tuple[str, Point, Point]:
    [run] = [r for r in read_runs(str(path)) if not hasattr(r, "reason")]
    events = run.events
    report = Scanner(Config()).scan(run.to_dict())

    def at(index: int | None) -> Point:
        if index is None:
            return None
        # A model event reaches the hook with the first call it made.
        for ev in events[index:]:
            if ev["kind"] in ("tool_call", "tool_result"):
                return (ev["kind"], ev["id"])
            if ev["kind"] == "user":
                return ("user", "")
        return ("model", "")

    return report.verdict, at(report.first_warn), at(report.first_stop)


def agrees(hook: tuple[str, Point, Point], scan: tuple[str, Point, Point], path: Path) -> bool:
    """The same verdicts at the same events, the first block possibly foreseen: on the
    call whose result the scan stops on, or on a call of the same model turn."""
    if hook == scan:
        return True
    if hook[:2] != scan[:2] or hook[2] is None or scan[2] is None:
        return False
    if (hook[2][0], scan[2][0]) != ("tool_call", "tool_result"):
        return False
    return hook[2][1] in batch_of(path, scan[2][1])


def batch_of(path: Path, call_id: str) -> set[str]:
    """The ids of the calls made in the same model turn as ``call_id``."""
    [run] = [r for r in read_runs(str(path)) if not hasattr(r, "reason")]
    turns: list[set[str]] = [set()]
    for ev in run.events:
        if ev["kind"] == "model":
            turns.append(set())
        elif ev["kind"] == "tool_call":
            turns[-1].add(ev["id"])
    return next((t for t in turns if call_id in t), {call_id})


def replay_in_process(path: Path) -> list[tuple[dict[str, Any], str]]:
    return [(p, answer_action(handle("claude-code", p))) for p in payloads(path)]


@pytest.fixture(autouse=True)
def fresh_state(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_STATE", str(tmp_path / "state.db"))
    monkeypatch.delenv("LOOPWATCH_STORE", raising=False)
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("path", FILES, ids=[f.stem for f in FILES])
def test_replay_through_hook_matches_scan(path: Path) -> None:
    hook, scan = hook_verdict(replay_in_process(path)), scan_verdict(path)
    assert agrees(hook, scan, path), (hook, scan)


def test_agreement_count(capsys: pytest.CaptureFixture[str]) -> None:
    pairs = [(hook_verdict(replay_in_process(p)), scan_verdict(p), p) for p in FILES]
    agree = sum(agrees(h, s, p) for h, s, p in pairs)
    foreseen = sum(agrees(h, s, p) and h != s for h, s, p in pairs)
    with capsys.disabled():
        print(
            f"\nhook replay agrees with scan on {agree}/{len(FILES)} Claude Code sessions "
            f"({foreseen} blocked on the call, or a call of the same turn, whose result the "
            "scan stops on)"
        )
    assert agree == len(FILES)


SUBPROCESS_SAMPLE = [
    "adaptive-rejection-sampler__8swhKXC.jsonl",
    "fix-ocaml-gc__sxV2aBK.jsonl",
    "chess-best-move__wpPQ5MU.jsonl",
]


@pytest.mark.parametrize("name", SUBPROCESS_SAMPLE)
def test_replay_one_process_per_hook_call(name: str, tmp_path: Path) -> None:
    path = CORPUS / name
    env = dict(os.environ)
    env["PYTHONPATH"] = SRC + os.pathsep + env.get("PYTHONPATH", "")
    env["LOOPWATCH_STATE"] = str(tmp_path / "procs.db")
    answers = []
    for payload in payloads(path):
        proc = subprocess.run(
            [sys.executable, "-m", "loopwatch.hooks", "claude-code"],
            input=json.dumps(payload).encode(),
            capture_output=True,
            env=env,
            timeout=60,
        )
        assert proc.returncode == 0 and proc.stderr == b"", proc.stderr
        answers.append((payload, answer_action(Answer(0, proc.stdout.decode()))))
    assert agrees(hook_verdict(answers), scan_verdict(path), path)
