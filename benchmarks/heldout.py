"""Public agent runs of kinds the dev corpus does not have, in loopwatch's native format:
the held-out check behind the quality page's "Runs nobody tuned on" table.

Two converters, each printing native JSON Lines (one run a line) on stdout:

    python benchmarks/heldout.py tau2 RESULTS.json... > tau2.jsonl
    python benchmarks/heldout.py chatdev LOG... > chatdev.jsonl
    python benchmarks/quality.py tau2.jsonl chatdev.jsonl --show-solved-stops

* ``tau2``: tau2-bench results files (sierra-research/tau2-bench, the leaderboard's
  submitted trajectories under ``web/leaderboard/public/submissions/*/trajectories/``):
  customer-service conversations (airline, retail, medical triage) of agents the corpus
  does not have, with a simulated user. ``meta.reward`` is the task outcome: a run with
  reward 1 solved its task, and quality.py counts a stop there as a stop on a solved run.
* ``chatdev``: ChatDev logs (OpenBMB/ChatDev, ``WareHouse/*/*.log``): a software
  company role-play (CEO, CTO, programmer, reviewer, tester) writing small programs.
  Each message keeps the role's preamble the log shows before it. No task verdict.

Nothing here is a loop label: the runs are read for false alarms (stops and warnings
on runs that solved their task, or that a reading finds healthy). The converters keep
what a trace of these agents would carry and nothing more: a tool call without a result
in the file has none here either, and a value the file does not hold (a result's
content, a call's arguments) is ``unknown``, never empty.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson


def tau2_runs(path: Path) -> Iterator[dict[str, Any]]:
    """The conversations of one tau2-bench results file."""
    data = orjson.loads(path.read_bytes())
    sims = data if isinstance(data, list) else data.get("simulations") or []
    for sim in sims:
        events: list[dict[str, Any]] = []
        for message in sim.get("messages") or []:
            role = message.get("role")
            content = message.get("content")
            calls = message.get("tool_calls") or []
            if isinstance(calls, str):  # some exports write the list's repr
                calls = ast.literal_eval(calls)
            if role in ("assistant", "user"):
                if content:
                    if role == "assistant":
                        events.append({"kind": "model", "text": content, "to": "user"})
                    else:
                        events.append({"kind": "user", "text": content})
                for call in calls:
                    event = {"kind": "tool_call", "name": call.get("name"), "id": call.get("id")}
                    if call.get("arguments") is None:
                        event["unknown"] = ["args"]  # not exported: unknown, not empty
                    else:
                        event["args"] = call["arguments"]
                    if role == "user":  # a simulated user's own tools (telecom)
                        event["agent"] = "user"
                    events.append(event)
            elif role == "tool":
                result: dict[str, Any] = {"kind": "tool_result", "id": message.get("id")}
                if content is None:
                    result["unknown"] = ["text"]  # not recorded: unknown, not empty
                else:
                    result["text"] = content
                if message.get("error") in (True, "True"):
                    result["error"] = True
                events.append(result)
        reward = (sim.get("reward_info") or {}).get("reward")
        yield {
            "run_id": f"tau2/{path.stem}/{sim.get('task_id')}/{sim.get('trial')}",
            "meta": {"source": "tau2-bench", "reward": reward},
            "events": events,
        }


# A ChatDev log entry: "[2023-22-08 14:46:15 INFO] Name: text", up to the next one.
_ENTRY = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d INFO\] ", re.MULTILINE)
_ROLE = re.compile(r"^[A-Z][A-Za-z ]{1,40}$")
_HEADER = re.compile(r"\*\*(.+?)<->(.+?) on : (.+?), turn \d+\*\*\s*")
_ASSISTANT = re.compile(r"\*\*assistant_role_name\*\* \| ([^|]+)\|")
_TASK = re.compile(r"\*\*task_prompt\*\*: (.*)")
_TOKENS = re.compile(r"total_tokens: (\d+)")


def chatdev_run(path: Path) -> dict[str, Any] | None:
    """One ChatDev log as a run: the task, then each role's messages (``agent``, and
    ``to`` the other role of the phase), with the tokens the log reports for each."""
    raw = path.read_text(encoding="utf-8", errors="replace")
    task = _TASK.search(raw)
    events: list[dict[str, Any]] = []
    if task:
        events.append({"kind": "user", "text": task.group(1).strip()})
    assistant = None
    tokens = 0
    for entry in _ENTRY.split(raw)[1:]:
        name, _, body = entry.partition(":")
        name, body = name.strip(), body.strip()
        if name.startswith("**[OpenAI_Usage_Info Receive]"):
            found = _TOKENS.search(entry)
            tokens = int(found.group(1)) if found else 0
            continue
        if name == "System":
            found = _ASSISTANT.search(body)
            if found:
                assistant = found.group(1).strip()
            continue
        if not _ROLE.match(name):
            continue  # phase summaries, usage, rate-limit errors
        header = _HEADER.match(body)
        if header:
            to, body = header.group(2).strip(), body[header.end() :]
        elif body.startswith("**[Start Chat]**"):
            body = body[len("**[Start Chat]**") :].strip()
            to = assistant if assistant != name else None
        else:
            continue  # not a message between roles (HTTP lines, test notes)
        event: dict[str, Any] = {"kind": "model", "agent": name, "text": body}
        if to:
            event["to"] = to
        if tokens:
            event["tokens"], tokens = tokens, 0
        events.append(event)
    if len(events) < 3:
        return None
    return {
        "run_id": f"chatdev/{path.parent.name}/{path.stem}",
        "meta": {"source": "ChatDev WareHouse"},
        "events": events,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=("tau2", "chatdev"))
    parser.add_argument("paths", nargs="+", type=Path)
    args = parser.parse_args()
    out = sys.stdout.buffer
    for path in args.paths:
        if args.kind == "tau2":
            runs: list[dict[str, Any] | None] = list(tau2_runs(path))
        else:
            runs = [chatdev_run(path)]
        for run in runs:
            if run is not None:
                out.write(orjson.dumps(run) + b"\n")


if __name__ == "__main__":
    main()
