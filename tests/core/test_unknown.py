"""Absent is not equal: values a trace did not record (``unknown``) are never counted
as identical, empty or repeated, by any detector, in the scan or in the guard."""

from __future__ import annotations

from typing import Any

from loopwatch import Config, Guard, scan
from loopwatch.events import Event

Events = list[dict[str, Any]]


def unknown_calls(n: int, unknown: list[str]) -> Events:
    events: Events = []
    for i in range(n):
        call: dict[str, Any] = {"kind": "tool_call", "name": "web_search", "id": f"c{i}"}
        res: dict[str, Any] = {"kind": "tool_result", "name": "web_search", "id": f"c{i}"}
        if "args" in unknown:
            call["unknown"] = ["args"]
        else:
            call["args"] = {"q": "paris weather"}
        if "text" in unknown:
            res["unknown"] = ["text"]
        else:
            res["text"] = "18C, cloudy"
        events += [{"kind": "model", "text": f"Searching ({i})."}, call, res]
    return events


def run(events: Events) -> dict[str, Any]:
    return {"run_id": "u", "events": events}


def test_calls_whose_arguments_and_results_were_not_recorded_are_not_a_loop() -> None:
    report = scan(run(unknown_calls(8, ["args", "text"])), Config())
    assert report.verdict == "ok", report.to_dict()
    # the control: the same run with the values recorded and identical is a loop
    assert scan(run(unknown_calls(8, [])), Config()).first_stop is not None


def test_unknown_arguments_alone_are_not_the_same_call() -> None:
    report = scan(run(unknown_calls(8, ["args"])), Config())
    assert not any(f.detector in ("repeated_call", "cycle") for f in report.findings)


def test_unknown_results_alone_are_not_the_same_result() -> None:
    report = scan(run(unknown_calls(8, ["text"])), Config())
    # the same call 8 times with no result known: still "no new result" for
    # repeated_call (the call repeats), but never "the same result"
    assert all("same result" not in f.message for f in report.findings)


def test_unknown_outputs_are_neither_empty_nor_restatements() -> None:
    events: Events = [
        {"kind": "model", "unknown": ["text"], "tokens": 500, "cost": 0.01} for _ in range(8)
    ]
    report = scan(run(events), Config())
    assert report.verdict == "ok", report.to_dict()
    assert report.metrics["empty_outputs"] == 0
    assert report.metrics["degenerate_loop"] is False
    # the control: eight recorded empty outputs are empty
    empty = [{"kind": "model", "text": "", "tokens": 500} for _ in range(8)]
    assert scan(run(empty), Config()).first_stop is not None


def test_unknown_span_inputs_never_equal_an_ancestor() -> None:
    spans: Events = [
        {"kind": "span", "type": "agent", "name": "planner", "id": "s0", "unknown": ["text"]}
    ]
    for i in range(1, 5):
        spans.append(
            {
                "kind": "span",
                "type": "agent",
                "name": "planner",
                "id": f"s{i}",
                "parent": f"s{i - 1}",
                "unknown": ["text"],
            }
        )
    assert scan(run(spans), Config()).verdict == "ok"


def test_the_marker_survives_a_round_trip_and_guard_agrees_with_scan() -> None:
    events = unknown_calls(6, ["args", "text"]) + unknown_calls(6, [])
    for data in events:
        assert (
            Event.from_dict(Event.from_dict(data).to_dict()).unknown
            == Event.from_dict(data).unknown
        )
    report = scan(run(events), Config())
    guard = Guard(Config())
    actions = [guard.observe("u", ev).action for ev in events]
    # a told call is skipped: the scan's first stop is the guard's first stop
    first_stop = next((i for i, a in enumerate(actions) if a == "stop"), None)
    assert first_stop == report.first_stop
    first_warn = next((i for i, a in enumerate(actions) if a != "ok"), None)
    assert first_warn == report.first_warn


def test_a_result_without_its_text_is_unknown_and_an_empty_one_stays_empty() -> None:
    left_out = Event.from_dict({"kind": "tool_result", "name": "computer", "id": "c1"})
    null = Event.from_dict({"kind": "tool_result", "name": "computer", "text": None})
    empty = Event.from_dict({"kind": "tool_result", "name": "computer", "text": ""})
    assert not left_out.text_known and not null.text_known and empty.text_known
    # written back, each says what it is: an empty result keeps its empty text
    assert Event.from_dict(empty.to_dict()).text_known
    assert not Event.from_dict(left_out.to_dict()).text_known
    # a screenshot agent's scrolls, the results left out, the narration saying nothing
    # about them: nothing is known to repeat
    events: Events = [{"kind": "user", "text": "Find the cheapest flight."}]
    for i in range(8):
        events += [
            {"kind": "tool_call", "name": "computer", "id": f"s{i}",
             "args": {"action": "scroll", "coordinate": [640, 400]}},
            {"kind": "tool_result", "name": "computer", "id": f"s{i}"},
            {"kind": "model", "text": "I'll scroll down to see more of the results."},
        ]  # fmt: skip
    assert scan(run(events), Config()).findings == []
    # the guard, replaying the same events, agrees step for step
    guard = Guard(Config())
    assert {guard.observe("u", ev).action for ev in events} == {"ok"}


def test_an_unknown_marker_that_names_nothing_known_is_ignored() -> None:
    assert Event.from_dict({"kind": "model", "text": "x", "unknown": ["tokens"]}).text_known
    assert Event.from_dict({"kind": "model", "text": "x", "unknown": "text"}).unknown == {"text"}
    assert Event.from_dict({"kind": "model", "text": "x", "unknown": 5}).unknown == frozenset()


def test_a_model_turn_without_its_text_is_an_output_not_recorded() -> None:
    """A turn recorded by its tokens alone is unknown, not empty: twelve of them are not
    twelve empty outputs in a row (they were stopped as stagnation). An output recorded
    as "" is empty, and stays so through to_dict."""
    missing = Event.from_dict({"kind": "model", "tokens": 300})
    assert not missing.text_known and missing.to_dict() == {
        "kind": "model", "tokens": 300, "unknown": ["text"],
    }  # fmt: skip
    assert Event.from_dict({"kind": "model", "text": None}).unknown == {"text"}
    empty = Event.from_dict({"kind": "model", "text": ""})
    assert empty.text_known and Event.from_dict(empty.to_dict()).text_known
    events = [{"kind": "user", "text": "go"}] + [{"kind": "model", "tokens": 300}] * 12
    assert scan({"run_id": "r", "events": events}, Config()).findings == []
    guard = Guard(Config())
    assert {guard.observe("t", ev).action for ev in events} == {"ok"}


def test_a_user_message_without_its_text_is_a_message_not_recorded() -> None:
    """A conversation whose user side was not captured: eight replies from one template,
    each after a user message the trace does not hold, are not the user repeating an
    answer eight times nor the agent restating itself to a user who brought nothing (it
    was stopped at the 4th turn); a failing lookup after each such message is not one
    failure retried. A message recorded as "" is empty, and stays so through to_dict."""
    missing = Event.from_dict({"kind": "user"})
    assert not missing.text_known and missing.to_dict() == {"kind": "user", "unknown": ["text"]}
    assert Event.from_dict({"kind": "user", "text": None}).unknown == {"text"}
    empty = Event.from_dict({"kind": "user", "text": ""})
    assert empty.text_known and Event.from_dict(empty.to_dict()).text_known
    events: Events = []
    for i in range(8):
        events += [
            {"kind": "user"},
            {"kind": "tool_call", "name": "lookup", "args": {"q": "order"}},
            {"kind": "tool_result", "name": "lookup", "text": "Error: service unavailable",
             "error": True},
            {"kind": "model", "text": f"Here is what I found about topic {i * 13}, with details."},
        ]  # fmt: skip
    detectors = {"futility", "restated_reply", "error_loop", "repeated_call"}
    found = scan(run(events), Config()).findings
    assert not [f for f in found if f.detector in detectors and f.severity.value == "stop"]
    talk = [ev for ev in events if ev["kind"] in ("user", "model")]
    assert scan(run(talk), Config()).findings == []
    guard = Guard(Config())
    assert {guard.observe("c", ev).action for ev in talk} == {"ok"}


def test_hook_payloads_without_input_or_response_are_unknown() -> None:
    from loopwatch.hooks._events import tool_call, tool_result

    call = tool_call("Bash", None, "t1")
    assert call["unknown"] == ["args"] and "args" not in call
    assert tool_call("Bash", {}, "t1")["args"] == {}  # no arguments is known-empty
    result = tool_result("Bash", "t1", None, False)
    assert result["unknown"] == ["text"] and "text" not in result
    assert tool_result("Bash", "t1", "", False)["text"] == ""
    # six such calls are not six identical calls
    events: Events = []
    for i in range(6):
        events += [{"kind": "model", "unknown": ["text"]}, tool_call("Bash", None, f"t{i}")]
        events.append(tool_result("Bash", f"t{i}", None, False))
    assert scan(run(events), Config()).verdict == "ok"
