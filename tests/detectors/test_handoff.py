"""Ping-pong between agents (PingPong): the exchange pattern, lexical and semantic."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
from conftest import load_scenarios, meets_expectation
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch import Config
from loopwatch.detectors.handoff import PingPong
from loopwatch.embeddings import semantic_unavailable_reason
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.findings import Severity
from loopwatch.scan import Scanner
from loopwatch.state import RunState

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing may download weights

CONFORMANCE = {r["run_id"]: r for r in load_scenarios()}
SCENARIOS = {r["run_id"]: r for r in load_scenarios("semantic_scenarios.jsonl")}
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def scan_with(run: dict[str, Any], det: PingPong) -> tuple[int | None, int | None]:
    report = Scanner(Config(), detectors=[det]).scan(run)
    return report.first_warn, report.first_stop


def msg(agent: str, text: str, to: str | None = None) -> dict[str, Any]:
    out = {"kind": "model", "agent": agent, "text": text}
    if to:
        out["to"] = to
    return out


@pytest.fixture(scope="module")
def semantic_ping_pong() -> PingPong:
    reason = semantic_unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    return PingPong(semantic=True)


def test_conformance_ping_pong_warns_in_time() -> None:
    run = CONFORMANCE["A-ping-pong"]
    first_warn, first_stop = scan_with(run, PingPong())
    assert not meets_expectation(run["expect"], first_warn, first_stop)
    # the opening message has no recipient yet (no ``to``, nobody spoke before it):
    # the pair forms with the manager's reply; the 2nd restatement (step 3) warns and
    # the 3rd (step 4) stops
    assert (first_warn, first_stop) == (3, 4)


def test_one_agent_repeating_itself_is_not_ping_pong() -> None:
    events = [msg("writer", "Could you clarify which report you need?", to="manager")] * 8
    assert scan_with({"run_id": "solo", "events": events}, PingPong()) == (None, None)


def test_messages_that_move_forward_are_not_ping_pong() -> None:
    run = SCENARIOS["S-manager-worker-progress"]
    assert scan_with(run, PingPong()) == (None, None)


ROLE_PLAY = (
    "As the Chief Technology Officer of our software company, I oversee the technical "
    "direction. The company makes programs for its users; the CEO, the product owner, "
    "the programmer, the reviewer and the tester work together on each task, in turns, "
    "until the task is done. Our customer asked for a game with a graphical interface. "
)


def test_a_fixed_preamble_before_each_message_is_not_the_request() -> None:
    # both roles open every message with the same long preamble (longer than the part
    # of a message compared) and then say something new each time: a conversation
    bodies = [
        "We will write it in Python with pygame.",
        "The main loop reads input, updates the snake and draws the board.",
        "Collision detection checks the head against the walls and the body.",
        "The score grows by ten whenever the snake eats the food.",
        "A game over screen offers a restart or quitting.",
        "Unit tests cover moving, growing and colliding.",
    ]
    events = [msg(("cto", "programmer")[i % 2], ROLE_PLAY * 2 + b) for i, b in enumerate(bodies)]
    assert scan_with({"run_id": "rp", "events": events}, PingPong()) == (None, None)
    # the same request bounced after the same preamble is still ping-pong
    ask = ["Which screen size should the game use?", "Which screen size do you want?"]
    bounced = [msg(("cto", "programmer")[i % 2], ROLE_PLAY * 2 + ask[i % 2]) for i in range(6)]
    first_warn, first_stop = scan_with({"run_id": "rp2", "events": bounced}, PingPong())
    assert first_warn is not None and first_stop is not None
    # a short opening shared with the last message is the request itself, sent again
    # with something added: not a preamble
    unzip = "Please unzip the file located at /workspace/archive_savings_2001_2010_v2.zip"
    done = "Download complete. Saved the file to /workspace/archive_savings_2001_2010_v2.zip"
    asks = [unzip, done, unzip, done, unzip + " and list the contents.", done]
    resent = [msg(("orchestrator", "surfer")[i % 2], t) for i, t in enumerate(asks)]
    assert scan_with({"run_id": "rp3", "events": resent}, PingPong()) == (3, 4)


# A software-company role-play's review rounds: a framework template opens every
# message, and what changes (the code, the comments) comes after it.
REVIEW = (
    "According to the new user's task, our designed product modality, languages and "
    "ideas, our developed first-edition source codes are listed below: Task: design a "
    "simple 2048 game with a 10x10 grid that follows the standard rules. Modality: "
    "application. Programming Language: Python. Codes: "
)


def _code(version: int) -> str:
    lines = [f"def move_{i}(grid):\n    return shift(grid, {i})\n" for i in range(40)]
    lines[30 + version % 10] = f"def move_fixed_{version}(grid):\n    return merge(grid)\n"
    return "main.py\n```python\n" + "".join(lines) + "```"


def test_review_rounds_with_new_code_after_the_same_template_are_work() -> None:
    # each round's code differs past the part of a message compared: new work to look
    # at, however alike the openings (publicly logged role-play runs were stopped here)
    events = []
    for version in range(6):
        events.append(msg("programmer", REVIEW + _code(version), to="reviewer"))
        events.append(msg("reviewer", REVIEW + _code(version), to="programmer"))
    assert scan_with({"run_id": "review", "events": events}, PingPong()) == (None, None)
    # the very same code sent back and forth is the same message again
    pair = [("programmer", "reviewer"), ("reviewer", "programmer")]
    same = [msg(pair[i % 2][0], REVIEW + _code(0), to=pair[i % 2][1]) for i in range(6)]
    first_warn, first_stop = scan_with({"run_id": "resent", "events": same}, PingPong())
    assert first_warn is not None and first_stop is not None


def test_a_negotiation_or_a_plan_whose_numbers_move_is_not_ping_pong() -> None:
    """The same words with another price or another step each time: progress, not the
    same request (both were stopped at the 4th message). The same numbers again are."""

    def haggle(prices: list[tuple[int, int]]) -> list[dict[str, Any]]:
        events = []
        for bid, ask in prices:
            events.append(msg("buyer", f"I can offer ${bid} for the bicycle. Deal?", "seller"))
            events.append(msg("seller", f"Thanks. The lowest I can accept is ${ask}.", "buyer"))
        return events

    converging = haggle([(50, 95), (55, 90), (60, 85), (65, 80), (70, 75)])
    assert scan_with({"run_id": "deal", "events": converging}, PingPong()) == (None, None)
    stuck = haggle([(50, 95)] * 5)
    assert scan_with({"run_id": "no-deal", "events": stuck}, PingPong()) == (3, 4)

    plan = []
    for step in range(1, 7):
        plan.append(msg("planner", f"Please implement step {step} of the plan.", "coder"))
        plan.append(msg("coder", f"Done with step {step}. What next?", "planner"))
    assert scan_with({"run_id": "plan", "events": plan}, PingPong()) == (None, None)


def test_clock_readings_and_counts_of_tries_are_not_news() -> None:
    """A number that moves because time passes or because the same thing is asked again
    ("Attempt 3", "visited 12 seconds ago") does not make a restatement new."""
    retries, revisits = [], []
    for i in range(5):
        retries.append(msg("boss", f"Attempt {i + 1}: please unzip /w/data.zip", "surfer"))
        retries.append(msg("surfer", "Title: Download complete. Saved file to /w/data.zip", "boss"))
        revisits.append(msg("boss", "Please unzip /w/data.zip and list it", "surfer"))
        revisits.append(
            msg(
                "surfer",
                f"Download complete. You visited this page {4 * i + 3} seconds ago.",
                "boss",
            )
        )
    assert scan_with({"run_id": "retries", "events": retries}, PingPong()) == (3, 4)
    assert scan_with({"run_id": "revisits", "events": revisits}, PingPong()) == (3, 4)
    # a timestamp, an epoch time, an id or a path that changes is no number that moves
    stamped = []
    for i in range(5):
        stamp = f"2024-05-03 10:4{i}:07 (epoch {1714732807 + 60 * i})"
        stamped.append(msg("boss", f"[{stamp}] Please unzip /w/run-{i}/data.zip", "surfer"))
        stamped.append(msg("surfer", f"[{stamp}] Download complete: /w/run-{i}/data.zip", "boss"))
    first_warn, first_stop = scan_with({"run_id": "stamped", "events": stamped}, PingPong())
    assert first_warn is not None and first_stop is not None and first_stop <= 4


def test_new_tool_results_between_restatements_reset_the_count() -> None:
    events: list[dict[str, Any]] = []
    for i in range(10):
        speaker, other = ("a", "b") if i % 2 == 0 else ("b", "a")
        events.append(msg(speaker, "Please check the build status for release candidate", other))
        events.append({"kind": "tool_call", "name": "ci_status", "args": {"n": i}, "id": f"c{i}"})
        events.append({"kind": "tool_result", "id": f"c{i}", "text": f"build {i} running"})
    assert scan_with({"run_id": "p", "events": events}, PingPong()) == (None, None)


def test_recipient_defaults_to_the_previous_speaker() -> None:
    """Group chats (AG2) have no ``to``: a reply goes to whoever spoke last."""
    events = [
        msg("planner", "Which file holds the parser tests?"),
        msg("coder", "Which file holds the parser tests? Please tell me."),
    ] * 4
    first_warn, first_stop = scan_with({"run_id": "g", "events": events}, PingPong())
    assert (first_warn, first_stop) == (3, 4)  # the pair forms with the first reply


def test_handoffs_in_a_span_tree() -> None:
    """A planner hands the task to a researcher, who hands it back, and so on."""
    events: list[dict[str, Any]] = [
        {"kind": "span", "type": "agent", "name": "planner", "id": "s0", "text": "trip plan"}
    ]
    parent = "s0"
    for i in range(1, 9):
        name = "researcher" if i % 2 else "planner"
        events.append(
            {
                "kind": "span",
                "type": "agent",
                "name": name,
                "id": f"s{i}",
                "parent": parent,
                "text": "Find the cheapest flight from Paris to Rome next Friday",
            }
        )
        parent = f"s{i}"
    report = Scanner(Config(), detectors=[PingPong()]).scan({"run_id": "s", "events": events})
    assert report.first_warn == 3 and report.first_stop == 4
    assert "planner and researcher" in report.findings[0].message


def test_span_handoffs_with_new_inputs_are_delegation() -> None:
    events: list[dict[str, Any]] = [
        {"kind": "span", "type": "agent", "name": "planner", "id": "s0", "text": "trip plan"}
    ]
    tasks = [
        "Find flights from Paris to Rome",
        "Summarise the flight options you found",
        "Find hotels near the Colosseum",
        "Compare hotel prices and ratings",
        "Book the cheapest refundable flight",
        "Draft the itinerary email",
    ]
    for i, task in enumerate(tasks, start=1):
        name = "researcher" if i % 2 else "planner"
        events.append(
            {"kind": "span", "type": "agent", "name": name, "id": f"s{i}", "parent": "s0",
             "text": task}
        )  # fmt: skip
    assert scan_with({"run_id": "d", "events": events}, PingPong()) == (None, None)


def test_reworded_clarify_loop_needs_the_semantic_layer(semantic_ping_pong: PingPong) -> None:
    run = SCENARIOS["S-clarify-ping-pong"]
    lexical = scan_with(run, PingPong())
    semantic = scan_with(run, semantic_ping_pong)
    assert lexical[1] is None  # too reworded for word overlap to stop it
    assert not meets_expectation(run["expect"], *semantic), semantic
    assert scan_with(SCENARIOS["S-manager-worker-progress"], semantic_ping_pong) == (None, None)


agents = st.sampled_from(["a", "b", "c"])
texts = st.sampled_from(
    ["please clarify the task", "which task?", "done: 3 files", "clarify the task please", ""]
)


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(agents, st.one_of(st.none(), agents), texts), max_size=40))
def test_findings_need_two_speakers_and_state_stays_json(
    messages: list[tuple[str, str | None, str]],
) -> None:
    engine = Engine([PingPong(warn_at=2, stop_at=3)])
    state = new_state()
    for sender, to, text in messages:
        for finding in engine.step(state, Event.from_dict(msg(sender, text, to))):
            assert finding.detector == "ping_pong"
            assert len(finding.steps) >= 2
            if finding.severity is Severity.STOP:
                assert len(finding.steps) >= 3
        assert RunState.from_bytes(state.to_bytes()) == state


def _solved(meta: dict[str, Any]) -> bool:
    return (
        meta.get("resolved") is True or meta.get("reward") == 1 or meta.get("task_solved") is True
    )


@pytest.mark.skipif(not (CORPUS / "tau_bench.jsonl").is_file(), reason="corpus not found")
def test_no_stop_on_solved_multi_agent_corpus_runs() -> None:
    """tau_bench (agent <-> user, 51 solved) and who_and_when / bioagent (multi-agent,
    all failed): lexical PingPong stops no solved run, and it does stop Magentic-One's
    Hand-Crafted/26, where the orchestrator re-sends one request and the file surfer
    returns the same page ("You previously visited this page") four times."""
    scanner = Scanner(Config(), detectors=[PingPong()])
    solved_stops = []
    stopped = set()
    solved = 0
    for name in ("tau_bench.jsonl", "who_and_when.jsonl", "bioagent.jsonl"):
        with open(CORPUS / name, encoding="utf-8") as fh:
            for line in fh:
                run = json.loads(line)
                is_solved = _solved(run.get("meta") or {})
                solved += is_solved
                if scanner.scan(run).first_stop is not None:
                    stopped.add(run["run_id"])
                    if is_solved:
                        solved_stops.append(run["run_id"])
    assert solved >= 50
    assert solved_stops == []
    assert "who_and_when/Hand-Crafted/26" in stopped
