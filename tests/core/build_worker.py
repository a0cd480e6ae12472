"""Runs event streams through whichever loopwatch build this process loaded and
prints, per stream, everything the two builds must agree on (tests/core/test_build.py).

One JSON request per stdin line, one JSON answer per stdout line:

* ``{"events": [...], "on_loop": "stop", "state": "<hex of RunState bytes>"?}``:
  the guard's verdict at every step (action, message, findings with their steps,
  severities, messages and patterns), the scan's FORMAT.md report and score, and
  the final run state's bytes (hex). With ``state``, the guard starts from that
  state (written by the other build) instead of a fresh one.
* ``{"describe": true}``: which build is loaded, every detector's constructor
  defaults, and every run-state record class's serialised field order.
"""

from __future__ import annotations

import inspect
import sys
import time
from typing import Any

import orjson

import loopwatch
from loopwatch import Config, Guard, scan
from loopwatch.config import DETECTORS
from loopwatch.engine import Engine
from loopwatch.events import Event
from loopwatch.findings import Action, Verdict
from loopwatch.policy import Policy
from loopwatch.state import Record, RunState, _fields

# The one input the two builds do not share: the wall clock, which a run state holds
# where the events carry no time (when a poll's wait began). Pinned while a request runs.
_NOW = 1_750_000_000.0


def run(request: dict[str, Any]) -> dict[str, Any]:
    clock = time.time
    time.time = lambda: _NOW
    try:
        return _run(request)
    finally:
        time.time = clock


def _run(request: dict[str, Any]) -> dict[str, Any]:
    events: list[dict[str, Any]] = request["events"]
    config = Config.from_mapping({"on_loop": request.get("on_loop", "stop")})
    engine = Engine(config.detectors(), config.exempt_tools)
    policy = Policy(config.on_loop)  # type: ignore[arg-type]
    given = request.get("state")
    state = RunState.from_bytes(bytes.fromhex(given)) if given else RunState()
    steps = []
    for raw in events:
        n = state.n
        findings = engine.step(state, Event.from_dict(raw))
        verdict = policy.decide(n, raw.get("kind", ""), findings, state)
        steps.append(_verdict(verdict))
    out: dict[str, Any] = {"steps": steps, "state": state.to_bytes().hex()}
    if not given:
        report = scan({"run_id": "r", "events": events}, config)
        out["report"] = report.to_dict()
        guard = Guard(config)
        out["guard"] = [_verdict(guard.observe("r", ev)) for ev in events]
    return out


def _verdict(verdict: Verdict) -> list[Any]:
    return [
        verdict.action.value if isinstance(verdict.action, Action) else str(verdict.action),
        verdict.step,
        verdict.message,
        [
            [f.detector, f.severity.value, f.step, list(f.steps), f.message, f.pattern]
            for f in verdict.findings
        ],
    ]


def describe() -> dict[str, Any]:
    defaults = {
        name: {
            p.name: repr(p.default)
            for p in inspect.signature(cls).parameters.values()
            if p.name not in ("self", "level")
        }
        for name, (cls, _) in DETECTORS.items()
    }
    records = {
        cls.__qualname__: list(_fields(cls))
        for cls in _records(Record)
        if cls.dump is Record.dump  # the others serialise themselves
    }
    return {"compiled": loopwatch.compiled, "defaults": defaults, "records": records}


def _records(cls: type[Record]) -> list[type[Record]]:
    out = []
    for sub in cls.__subclasses__():
        out += [sub, *_records(sub)]
    return out


def main() -> None:
    for line in sys.stdin.buffer:
        request = orjson.loads(line)
        answer = describe() if request.get("describe") else run(request)
        sys.stdout.buffer.write(orjson.dumps(answer) + b"\n")
        sys.stdout.buffer.flush()


if __name__ == "__main__":
    main()
