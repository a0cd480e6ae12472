"""The benchmarks print numbers and are not run by the suite; this only checks that
each still loads against the current API (two of them had been importing a name
that moved, and nothing noticed)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

from loopwatch import Config, Guard, scan

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_each_benchmark_loads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(path.parent))
    # run_name other than "__main__": the module's imports and definitions run, its
    # main() does not
    namespace = runpy.run_path(str(path), run_name="loopwatch_benchmark")
    assert namespace
    sys.modules.pop("_workload", None)


def test_the_heldout_converters_keep_what_the_files_carry(tmp_path: Path) -> None:
    """benchmarks/heldout.py on a tau2-bench results file and a ChatDev log of the
    public shapes: messages, calls and results in order, the reward, the roles."""
    heldout = runpy.run_path(str(BENCHMARKS[0].parent / "heldout.py"), run_name="heldout")
    results = tmp_path / "airline.json"
    results.write_text(
        '{"simulations": [{"task_id": "7", "trial": 0, "reward_info": {"reward": 1.0},'
        ' "messages": ['
        '{"role": "assistant", "content": "Hi! How can I help?"},'
        '{"role": "user", "content": "Cancel reservation EHGLP3."},'
        '{"role": "assistant", "content": null, "tool_calls":'
        " \"[{'id': 't1', 'name': 'get_reservation_details',"
        " 'arguments': {'reservation_id': 'EHGLP3'}}]\"},"
        '{"role": "tool", "id": "t1", "content": "Error: not found", "error": "True"}]}]}',
        encoding="utf-8",
    )
    (run,) = heldout["tau2_runs"](results)
    assert run["run_id"] == "tau2/airline/7/0" and run["meta"]["reward"] == 1.0
    assert [e["kind"] for e in run["events"]] == ["model", "user", "tool_call", "tool_result"]
    assert run["events"][2]["args"] == {"reservation_id": "EHGLP3"}
    assert run["events"][3] == {
        "kind": "tool_result",
        "text": "Error: not found",
        "id": "t1",
        "error": True,
    }
    log = tmp_path / "Game_Org_20230101" / "Game_Org_20230101.log"
    log.parent.mkdir()
    log.write_text(
        "[2023-22-08 14:46:15 INFO] **task_prompt**: Design a 2048 game\n\n"
        "[2023-22-08 14:46:16 INFO] System: **[RolePlaying]**\n\n"
        "| **assistant_role_name** | Programmer |\n\n"
        "[2023-22-08 14:46:17 INFO] Chief Technology Officer: **[Start Chat]**\n\n"
        "Write the code.\n\n"
        "[2023-22-08 14:46:18 INFO] **[OpenAI_Usage_Info Receive]**\ntotal_tokens: 370\n\n"
        "[2023-22-08 14:46:19 INFO] Programmer: **Programmer<->Chief Technology Officer on :"
        " Coding, turn 0**\n\nmain.py\n\n"
        "[2023-22-08 14:46:20 INFO] HTTP Request: POST https://api.example/v1 200\n",
        encoding="utf-8",
    )
    run = heldout["chatdev_run"](log)
    assert run["events"] == [
        {"kind": "user", "text": "Design a 2048 game"},
        {
            "kind": "model",
            "agent": "Chief Technology Officer",
            "text": "Write the code.",
            "to": "Programmer",
        },
        {
            "kind": "model",
            "agent": "Programmer",
            "text": "main.py",
            "to": "Chief Technology Officer",
            "tokens": 370,
        },
    ]


def test_the_heldout_converters_mark_what_a_file_does_not_hold_unknown(tmp_path: Path) -> None:
    """A call exported without its arguments and a result without its content are
    unknown, never empty: three such calls are not "the same call" three times, and
    the guard replaying the converted run agrees with the scan."""
    heldout = runpy.run_path(str(BENCHMARKS[0].parent / "heldout.py"), run_name="heldout")
    call = '{"role": "assistant", "content": null, "tool_calls": [{"id": "t%d", "name": "lookup"}]}'
    result = '{"role": "tool", "id": "t%d", "content": null}'
    messages = ",".join(call % i + "," + result % i for i in range(4))
    results = tmp_path / "retail.json"
    results.write_text(
        '[{"task_id": "1", "trial": 0, "reward_info": {"reward": 1.0}, "messages": ['
        + messages
        + "]}]",
        encoding="utf-8",
    )
    (run,) = heldout["tau2_runs"](results)
    calls = [e for e in run["events"] if e["kind"] == "tool_call"]
    answers = [e for e in run["events"] if e["kind"] == "tool_result"]
    assert all(e["unknown"] == ["args"] and "args" not in e for e in calls)
    assert all(e["unknown"] == ["text"] and "text" not in e for e in answers)
    report = scan(run, Config())
    assert report.findings == []
    guard = Guard(Config())
    assert all(guard.observe(run["run_id"], e).action == "ok" for e in run["events"])
