"""The Claude Code reader: stream-json logs (the 48 real ones in the shared corpus) and
``~/.claude/projects`` transcripts, sniffed by content."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from loopwatch import Config, Scanner, TraceRun, read_runs
from loopwatch.traces import detect
from loopwatch.traces.claude_code import looks_like, session_events

CORPUS = Path("/work/shared/corpus/claude_code")
if not CORPUS.is_dir():
    CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus" / "claude_code"
FILES = sorted(CORPUS.glob("*.jsonl")) if CORPUS.is_dir() else []


def write_lines(path: Path, records: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def assistant(msg_id: str, *blocks: dict[str, Any], session: str = "S") -> dict[str, Any]:
    return {
        "type": "assistant",
        "session_id": session,
        "message": {"id": msg_id, "role": "assistant", "content": list(blocks),
                    "usage": {"output_tokens": 7}},
        "parent_tool_use_id": None,
    }  # fmt: skip


def use(call_id: str, command: str) -> dict[str, Any]:
    return {"type": "tool_use", "id": call_id, "name": "Bash", "input": {"command": command}}


def result(call_id: str, structured: Any, content: str, error: bool = False) -> dict[str, Any]:
    return {
        "type": "user",
        "session_id": "S",
        "message": {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": call_id, "content": content, "is_error": error}
        ]},
        "tool_use_result": structured,
        "parent_tool_use_id": None,
    }  # fmt: skip


@pytest.mark.skipif(not FILES, reason="the Claude Code corpus is not here")
def test_every_corpus_file_is_sniffed_and_read() -> None:
    assert len(FILES) == 48
    for path in FILES:
        first = json.loads(path.open().readline())
        assert detect(first) == "claude_code"
        items = list(read_runs(str(path)))
        runs = [r for r in items if isinstance(r, TraceRun)]
        assert len(runs) == 1 and len(items) == 1, path.name
        run = runs[0]
        assert run.meta["format"] == "claude_code" and run.meta["model"] == "kimi-k2.5"
        kinds = {e["kind"] for e in run.events}
        assert {"model", "tool_call", "tool_result"} <= kinds
        calls = {e["id"] for e in run.events if e["kind"] == "tool_call"}
        results = [e for e in run.events if e["kind"] == "tool_result"]
        assert all(r["id"] in calls for r in results), path.name


@pytest.mark.skipif(not FILES, reason="the Claude Code corpus is not here")
def test_corpus_scan_finds_the_noop_loop() -> None:
    [run] = read_runs(str(CORPUS / "adaptive-rejection-sampler__8swhKXC.jsonl"))
    assert isinstance(run, TraceRun)
    assert run.run_id == "bfe498c9-d3fe-4098-8e1c-95379d43fd60"
    assert run.meta["dropped_calls"] == 2  # the never-run 'which R' and a superseded call
    report = Scanner(Config()).scan(run.to_dict())
    assert report.verdict == "stop"
    calls = [e for e in run.events if e["kind"] == "tool_call"]
    assert calls[0]["args"] == {"command": ': ""', "description": ""}


def test_stream_json_mapping(tmp_path: Path) -> None:
    records = [
        {"type": "system", "subtype": "init", "session_id": "S", "model": "m", "cwd": "/app",
         "claude_code_version": "2.1.89", "tools": ["Bash"]},
        # a message split over lines: thinking, text, two parallel calls
        assistant("m1", {"type": "thinking", "thinking": "hmm"}),
        assistant("m1", {"type": "text", "text": "Let me look."}),
        assistant("m1", use("c1", "ls")),
        assistant("m1", use("c2", "cat x")),
        result("c1", {"stdout": "a\nb", "stderr": "", "interrupted": False}, "a\nb"),
        result("c2", "Error: Exit code 1\ncat: x: No such file", "Exit code 1\ncat: x", True),
        # a call that was never run (no result, more calls after it)
        assistant("m2", use("c3", "rm -rf /")),
        assistant("m3", {"type": "text", "text": "Trying again."}, use("c4", "ls")),
        result("c4", {"stdout": "a\nb", "stderr": "warn"}, "a\nb\nwarn"),
        {"type": "result", "subtype": "success", "session_id": "S", "num_turns": 3,
         "total_cost_usd": 0.1, "result": "done"},
    ]  # fmt: skip
    [run] = read_runs(write_lines(tmp_path / "s.jsonl", records))
    assert isinstance(run, TraceRun)
    assert run.run_id == "S" and run.meta["claude_code_version"] == "2.1.89"
    assert run.meta["dropped_calls"] == 1 and run.meta["num_turns"] == 3
    assert [(e["kind"], e.get("id")) for e in run.events] == [
        ("model", None), ("tool_call", "c1"), ("tool_call", "c2"),
        ("tool_result", "c1"), ("tool_result", "c2"),
        ("model", None), ("tool_call", "c4"), ("tool_result", "c4"),
    ]  # fmt: skip
    model, _, _, ok, failed, model2, _, warned = run.events
    assert model == {"kind": "model", "text": "Let me look.", "tokens": 7.0}
    assert ok["text"] == "a\nb" and ok["error"] is False and ok["name"] == "Bash"
    assert failed["text"] == "Exit code 1\ncat: x: No such file" and failed["error"] is True
    assert model2["text"] == "Trying again."
    assert warned["text"] == "a\nb\nwarn"


def test_projects_transcript(tmp_path: Path) -> None:
    """The shape of ~/.claude/projects/<dir>/<session>.jsonl: camelCase ids, meta
    lines, a summary line without a session."""
    base = {"sessionId": "P", "cwd": "/w", "version": "2.1.0", "userType": "external",
            "isSidechain": False}  # fmt: skip
    records = [
        {"type": "summary", "summary": "Fix tests", "leafUuid": "u9"},
        {**base, "type": "user", "isMeta": True, "uuid": "u0",
         "message": {"role": "user", "content": "<command-name>/clear</command-name>"}},
        {**base, "type": "user", "uuid": "u1", "message": {"role": "user", "content": "fix it"}},
        {**base, "type": "assistant", "uuid": "u2", "requestId": "r1",
         "message": {"id": "m1", "role": "assistant", "type": "message", "model": "claude",
                     "content": [use("t1", "pytest")], "usage": {"output_tokens": 3}}},
        {**base, "type": "user", "uuid": "u3",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "t1", "content": "1 failed", "is_error": True}
         ]},
         "toolUseResult": "Error: 1 failed"},
    ]  # fmt: skip
    assert not looks_like(records[0]) and looks_like(records[1])
    [run] = read_runs(write_lines(tmp_path / "p.jsonl", records))
    assert isinstance(run, TraceRun) and run.run_id == "P"
    assert [e["kind"] for e in run.events] == ["user", "model", "tool_call", "tool_result"]
    assert run.events[0]["text"] == "fix it"
    assert run.events[3] == {"kind": "tool_result", "name": "Bash", "text": "1 failed",
                             "error": True, "id": "t1"}  # fmt: skip


def test_not_claude_code() -> None:
    assert not looks_like({"run_id": "r", "events": []})
    assert not looks_like({"type": "assistant", "message": {"role": "assistant"}})
    assert not looks_like([1, 2])
    assert session_events([]) == ([], {"format": "claude_code"})


def test_a_projects_directory_is_scanned_whole(tmp_path: Path) -> None:
    """`loopwatch scan ~/.claude/projects`: every session file under the directory,
    sub-agents' transcripts as runs of their own."""
    from loopwatch.cli import main

    projects = tmp_path / "projects" / "-home-me-repo"
    (projects / "S1" / "subagents").mkdir(parents=True)
    base = {"cwd": "/w", "version": "2.1.0"}
    for name, session, extra in (
        ("S1.jsonl", "S1", {}),
        ("S2.jsonl", "S2", {}),
        ("S1/subagents/agent-a1.jsonl", "S1", {"isSidechain": True, "agentId": "a1"}),
    ):
        lines = [{**base, **extra, "sessionId": session, "type": "user",
                  "message": {"role": "user", "content": "go"}}]  # fmt: skip
        for n in range(6):
            lines.append({**base, **extra, "sessionId": session, "type": "assistant",
                          "message": {"id": f"m{n}", "role": "assistant",
                                      "content": [use(f"t{n}", "make")]}})  # fmt: skip
            lines.append({**base, **extra, "sessionId": session, "type": "user",
                          "message": {"role": "user", "content": [
                              {"type": "tool_result", "tool_use_id": f"t{n}",
                               "content": "make: *** [all] Error 2", "is_error": True}]},
                          "toolUseResult": "Error: make: *** [all] Error 2"})  # fmt: skip
        write_lines(projects / name, lines)
    (projects / "notes.txt").write_text("not a trace")
    runs = [r for r in read_runs(str(tmp_path / "projects")) if isinstance(r, TraceRun)]
    assert sorted(r.run_id for r in runs) == ["S1", "S1/a1", "S2"]
    import contextlib
    import io

    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        assert main(["scan", "--json", str(tmp_path / "projects")]) == 0
    reports = [json.loads(x) for x in buffer.getvalue().splitlines()]
    verdicts = {r["run_id"]: r["verdict"] for r in reports}
    assert verdicts == {"S1": "stop", "S1/a1": "stop", "S2": "stop"}


# -- Codex rollouts and Gemini CLI session files (traces/coding_cli.py) -----------------
def test_codex_rollout(tmp_path: Path) -> None:
    def item(payload: dict[str, Any]) -> dict[str, Any]:
        return {"timestamp": "2026-11-23T15:41:54.476Z", "type": "response_item",
                "payload": payload}  # fmt: skip

    header = "Chunk ID: d675ca\nWall time: 0.0000 seconds\nProcess exited with code {}\n"
    records = [
        {"timestamp": "t", "type": "session_meta",
         "payload": {"id": "C1", "cwd": "/w", "cli_version": "0.169.0"}},
        item({"type": "message", "role": "developer",
              "content": [{"type": "input_text", "text": "You are Codex"}]}),
        item({"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "<environment_context>x"}]}),
        item({"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "fix the build"}]}),
        item({"type": "function_call", "name": "exec_command", "call_id": "c1",
              "arguments": json.dumps({"cmd": "make"})}),
        item({"type": "function_call_output", "call_id": "c1",
              "output": header.format(2) + "Original token count: 3\nOutput:\nmake: Error 2\n"}),
        item({"type": "message", "role": "assistant",
              "content": [{"type": "output_text", "text": "It fails."}]}),
        item({"type": "function_call", "name": "apply_patch", "call_id": "c2",
              "arguments": json.dumps({"input": "*** Begin Patch"})}),
        item({"type": "function_call_output", "call_id": "c2",
              "output": json.dumps({"output": "Done", "metadata": {"exit_code": 0}})}),
    ]  # fmt: skip
    [run] = read_runs(write_lines(tmp_path / "rollout.jsonl", records))
    assert isinstance(run, TraceRun) and run.run_id == "C1"
    assert run.meta["format"] == "codex" and run.meta["cli_version"] == "0.169.0"
    assert run.events == [
        {"kind": "user", "text": "fix the build"},
        {"kind": "model", "text": ""},
        {"kind": "tool_call", "name": "Bash", "args": {"command": "make"}, "id": "c1"},
        {"kind": "tool_result", "name": "Bash", "text": "make: Error 2\n", "error": True,
         "id": "c1"},
        {"kind": "model", "text": "It fails."},
        {"kind": "tool_call", "name": "apply_patch", "args": {"input": "*** Begin Patch"},
         "id": "c2"},
        {"kind": "tool_result", "name": "apply_patch", "text": "Done", "error": False,
         "id": "c2"},
    ]  # fmt: skip


def test_gemini_session_file(tmp_path: Path) -> None:
    output = ("<untrusted_context>\nOutput: boom\nExit Code: 1\nProcess Group PGID: {}\n"
              "</untrusted_context>")  # fmt: skip

    def gemini(rid: str, pgid: int, with_calls: bool) -> dict[str, Any]:
        rec: dict[str, Any] = {"id": rid, "type": "gemini", "content": "", "model": "g-pro",
                               "tokens": {"output": 4}}  # fmt: skip
        if with_calls:
            rec["toolCalls"] = [{
                "id": f"call-{rid}", "name": "run_shell_command", "args": {"command": "npm t"},
                "status": "success",
                "result": [{"functionResponse": {"id": f"call-{rid}", "name": "run_shell_command",
                            "response": {"output": output.format(pgid) + "\n\n<hook_context>"
                                         "[loopwatch] Warning: x</hook_context>"}}}],
            }]  # fmt: skip
        return rec

    records = [
        {"sessionId": "G1", "projectHash": "abc", "startTime": "t", "kind": "main"},
        {"$set": {"messages": [{"id": "u0", "type": "user",
                                "content": [{"text": "<session_context>\nhi"}]}]}},
        {"id": "u1", "type": "user", "content": [{"text": "run the tests"}]},
        {"$set": {"lastUpdated": "t"}},
        gemini("m1", 100, False),
        gemini("m1", 100, True),  # the same record, written again with its call
        {"id": "u2", "type": "user", "content": [{"functionResponse": {"id": "call-m1"}}]},
        gemini("m2", 200, True),
    ]  # fmt: skip
    [run] = read_runs(write_lines(tmp_path / "session-1.jsonl", records))
    assert isinstance(run, TraceRun) and run.run_id == "G1"
    kinds = [(e["kind"], e.get("id")) for e in run.events]
    assert kinds == [("user", None), ("model", None), ("tool_call", "call-m1"),
                     ("tool_result", "call-m1"), ("model", None), ("tool_call", "call-m2"),
                     ("tool_result", "call-m2")]  # fmt: skip
    first, second = run.events[3], run.events[6]
    assert first["text"] == second["text"]  # the process id and hook context are dropped
    assert "PGID" not in first["text"] and "loopwatch" not in first["text"]
