"""User turns: a chat that legitimately repeats a call once per turn is not a loop,
while a loop inside one turn, or a user who keeps having to repeat themselves, is."""

from __future__ import annotations

from runs import Events, model, tool

from loopwatch import Config, Guard, scan

QUESTIONS = [
    "What's the weather in Paris?",
    "Thanks. Should I take an umbrella tonight?",
    "And tomorrow morning, jacket or not?",
    "My sister lands at 6, will her flight be ok?",
    "Is it a good evening for a walk along the Seine?",
    "Last one: picnic on Sunday, yes or no?",
    "Ok, and what about the weekend after?",
    "Great, thank you!",
]
FORECAST = "Paris: 18C, cloudy, light wind from the west, no rain expected until Friday."


def chat(calls_per_turn: int = 1) -> Events:
    events: Events = []
    for i, question in enumerate(QUESTIONS):
        events.append({"kind": "user", "text": question})
        for _ in range(calls_per_turn):
            events += tool("web_search", {"q": "paris weather"}, FORECAST)
        events.append(model(f"Answer {i}: based on the forecast, {question.lower()}"))
    return events


def replay(events: Events) -> tuple[int | None, int | None]:
    guard = Guard(Config())
    first_warn = first_stop = None
    for step, ev in enumerate(events):
        action = guard.observe("thread-1", ev).action
        if action != "ok" and first_warn is None:
            first_warn = step
        if action in ("stop", "skip") and first_stop is None:
            first_stop = step
    return first_warn, first_stop


def test_one_lookup_per_user_turn_is_not_a_loop() -> None:
    events = chat()
    report = scan({"run_id": "chat", "events": events}, Config())
    assert report.verdict == "ok", report.to_dict()
    assert replay(events) == (None, None)


def test_a_loop_inside_one_turn_is_still_a_loop() -> None:
    report = scan({"run_id": "chat", "events": chat(calls_per_turn=6)}, Config())
    assert report.first_stop is not None
    assert report.first_stop < 10  # in the first turn
    assert replay(chat(calls_per_turn=6))[1] == report.first_stop


def test_a_user_repeating_the_same_message_is_still_a_loop() -> None:
    events: Events = []
    for i in range(6):
        events.append({"kind": "user", "text": "I already told you, it's #W2378156."})
        events += tool("get_order", {"id": f"attempt {i}"}, "error: order not found", error=True)
        events.append(model(f"Sorry, could you give me the order number? ({i})"))
    report = scan({"run_id": "r", "events": events}, Config())
    assert report.first_stop is not None
    assert any(f.detector == "futility" and "user" in f.message for f in report.findings)
