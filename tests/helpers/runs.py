"""Small builders for runs in the native format, shared by the tests."""

from __future__ import annotations

from typing import Any

Events = list[dict[str, Any]]


def tool(name: str, args: Any, text: str, error: bool = False, cid: str | None = None) -> Events:
    """A tool call and its result."""
    call: dict[str, Any] = {"kind": "tool_call", "name": name, "args": args}
    res: dict[str, Any] = {"kind": "tool_result", "name": name, "text": text}
    if error:
        res["error"] = True
    if cid is not None:
        call["id"] = res["id"] = cid
    return [call, res]


def model(text: str, agent: str | None = None, **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"kind": "model", "text": text, **extra}
    if agent is not None:
        ev["agent"] = agent
    return ev


def run(events: Events, run_id: str = "r") -> dict[str, Any]:
    return {"run_id": run_id, "events": events}
