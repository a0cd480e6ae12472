"""Each detector on its own: what it catches, and what it deliberately ignores."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from runs import Events, model, run, tool

from loopwatch import (
    Chanting,
    Config,
    Cycle,
    Detector,
    ErrorLoop,
    Frequency,
    IterationCap,
    NameCycle,
    NoProgress,
    Recursion,
    RepeatedCall,
    Report,
    Stagnation,
    default_detectors,
    scan,
)


def only(detector: Detector, events: Events) -> Report:
    return scan(run(events), Config(), detectors=[detector])


def firsts(report: Report) -> tuple[int | None, int | None]:
    return report.first_warn, report.first_stop


# -- repeated call --------------------------------------------------------------------
ANSWER = "Paris: 18C, cloudy, light wind from the west, no rain until Friday."


def test_repeated_call_tells_at_the_second_same_answer_and_stops_the_third_call() -> None:
    events: Events = []
    for _ in range(6):
        events += tool("search", {"q": "x"}, ANSWER)
    report = only(RepeatedCall(), events)
    # calls at 0, 2, 4...: the second identical answer (3) is told, the third call stops
    assert firsts(report) == (3, 4)
    told, stop = report.findings[0], report.findings[1]
    assert told.severity.value == "warn" and told.steps == (0, 1, 2, 3)
    assert stop.severity.value == "stop" and stop.steps == (0, 1, 2, 3, 4)
    assert "search" in stop.message and "3 times" in stop.message
    assert stop.message.endswith("You were told at step 3.")
    # a single retry that brings the same answer is told, never stopped
    assert firsts(only(RepeatedCall(), events[:4])) == (3, None)
    # two identical calls whose second answer is not back yet: nothing
    assert firsts(only(RepeatedCall(), events[:3])) == (None, None)


def test_a_repeat_whose_answer_says_little_or_failed_is_told_at_the_third_call() -> None:
    # an empty or bare answer, or a failure, may still change on a retry (a hiccup):
    # the third call is told (skipped under on_loop="stop"), the fourth stopped
    for answer in ("ok", "Error: payment does not add up", "<returncode>1</returncode>"):
        events: Events = []
        for _ in range(5):
            events += tool("book", {"id": 1}, answer)
        report = only(RepeatedCall(), events)
        assert firsts(report) == (4, 6), answer
        assert "If you do it again, the run will be stopped." in report.findings[0].message


SECTION = (
    "<returncode>0</returncode>\n<output>\n  260  def distance(self, p):\n"
    "  261      return sqrt(...)\n</output>"
)


def test_a_shell_command_run_again_at_once_is_told_at_the_third_run() -> None:
    """A coding agent looking again at what it just printed, before it acts, is not told
    at the second identical answer; the third run is, and the fourth is stopped."""
    read = {"command": "sed -n '260,275p' point.py"}
    events: Events = []
    for _ in range(5):
        events += tool("bash", read, SECTION)
    assert firsts(only(RepeatedCall(), events[:4])) == (None, None)
    assert firsts(only(RepeatedCall(), events)) == (4, 6)
    # with another call in between (a test run that failed: no progress), the second
    # identical answer is told as for any call
    apart = tool("bash", read, SECTION)
    apart += tool("bash", {"command": "pytest test_point.py"}, "1 failed", True)
    apart += tool("bash", read, SECTION)
    assert firsts(only(RepeatedCall(), apart)) == (5, None)


def test_the_same_error_each_time_is_named_in_the_message() -> None:
    events: Events = []
    for _ in range(4):
        events += tool("book", {"id": 1}, "Error: payment does not add up")  # no error flag
    report = only(RepeatedCall(), events)
    assert firsts(report) == (4, 6)
    assert all("the same error each time" in f.message for f in report.findings)


def test_repeated_call_with_changing_results_is_progress() -> None:
    events: Events = []
    for i in range(10):
        events += tool("status", {"job": "j"}, f"running {i * 10}%")
    assert firsts(only(RepeatedCall(), events)) == (None, None)


def test_scanning_days_for_a_free_flight_is_no_repeated_call() -> None:
    """Each day asked about is a new question (as each page is), even when every
    answer is empty; the same day asked again is the same call."""
    events: Events = [{"kind": "user", "text": "Find me a flight SFO to JFK early in May."}]
    for day in range(1, 7):
        args = {"origin": "SFO", "destination": "JFK", "date": f"2024-05-0{day}"}
        events += tool("search_direct_flight", args, "[]")
        events += [model(f"No flight on May {day}. Trying the next day.")]
    assert firsts(scan(run(events), Config())) == (None, None)
    again: Events = []
    for _ in range(4):
        again += tool("search_direct_flight", {"origin": "SFO", "date": "2024-05-01"}, "[]")
    assert only(RepeatedCall(), again).first_stop is not None


def test_repeated_call_restarts_after_a_new_call_in_between() -> None:
    events: Events = []
    for i in range(5):
        events += tool("edit", {"patch": f"fix {i}"}, "ok")
        events += tool("run_tests", {"path": "t"}, "1 failed")
    assert firsts(only(RepeatedCall(), events)) == (None, None)


def test_failed_new_calls_are_not_progress() -> None:
    events: Events = []
    for i in range(5):
        events += tool("load", {"path": "data"}, "loaded 100 rows")
        events += tool("analyse", {"attempt": i}, f"Traceback: error {i}", error=True)
    # the 3rd load is told (its two before loaded the same bare count), the 4th stopped
    assert firsts(only(RepeatedCall(), events)) == (8, 12)


def test_restarting_from_the_same_step_is_caught_in_the_window() -> None:
    events: Events = []
    for i in range(8):  # new work in between succeeds, but the agent keeps reloading
        events += tool("load", {"path": "data"}, "loaded 100 rows")
        events += tool("analyse", {"attempt": i}, f"partial result {i}")
    report = only(RepeatedCall(), events)
    assert firsts(report) == (20, 24)  # the 6th and 7th identical load
    stop = next(f for f in report.findings if f.step == 24)
    assert stop.steps == (0, 4, 8, 12, 16, 20, 24)
    assert "7 times" in stop.message


def test_near_identical_long_results_count_as_the_same() -> None:
    page = " ".join(f"word{i}" for i in range(40))
    events: Events = []
    for i in range(6):  # the same page, re-rendered with one word changed each time
        events += tool("click", {"target": "Month"}, page + f" render{i}")
    report = only(RepeatedCall(), events)
    assert report.first_warn is not None and report.first_stop is not None
    short: Events = []
    for i in range(6):  # a short status line that changes is news
        short += tool("status", {"job": "j"}, f"running {i}")
    assert firsts(only(RepeatedCall(), short)) == (None, None)


def test_identical_calls_without_results_prove_nothing() -> None:
    # calls proposed and never run (a group chat's code blocks), or a screenshot agent
    # whose screens are not in the trace: the outcome is unknown, not the same
    events = [{"kind": "tool_call", "name": "search", "args": {"q": "x"}} for _ in range(5)]
    assert firsts(only(RepeatedCall(), events)) == (None, None)
    # results the trace did not record (an image) are unknown too, never "the same"
    unknown: Events = []
    for _ in range(5):
        unknown += [
            {"kind": "tool_call", "name": "click", "args": {"x": 5, "y": 9}},
            {"kind": "tool_result", "name": "click", "unknown": ["text"]},
        ]
    assert firsts(only(RepeatedCall(), unknown)) == (None, None)
    # one result of three is no evidence that the other two were the same
    partly = [*events[:2], {"kind": "tool_result", "name": "search", "text": ANSWER}, events[2]]
    report = only(RepeatedCall(), partly)
    assert all("no new result" not in f.message for f in report.findings)
    assert report.first_stop is None


def test_repeated_call_thresholds_are_configurable() -> None:
    events: Events = []
    for _ in range(4):
        events += tool("search", {"q": "x"}, "same")
    pinned = RepeatedCall(warn_at=2, stop_at=4, result_warn_at=None)
    assert firsts(only(pinned, events)) == (2, 6)
    quiet = RepeatedCall(warn_at=5, stop_at=None, result_warn_at=None)
    assert firsts(only(quiet, events)) == (None, None)


# -- cycle ----------------------------------------------------------------------------
def _cycle(period: int, rounds: int, vary: bool = False) -> Events:
    events: Events = []
    for r in range(rounds):
        for p in range(period):
            suffix = f" round {r}" if vary else ""
            events += tool(f"t{p}", {"a": p}, f"result {p}{suffix}")
    return events


def test_cycle_of_period_two_and_three() -> None:
    assert firsts(only(Cycle(), _cycle(2, 5))) == (10, 14)
    assert firsts(only(Cycle(), _cycle(3, 5))) == (16, 22)


def test_cycle_with_new_results_each_round_is_not_a_cycle() -> None:
    assert firsts(only(Cycle(), _cycle(3, 6, vary=True))) == (None, None)


def test_cycle_leaves_a_single_repeated_call_to_repeated_call() -> None:
    assert firsts(only(Cycle(), _cycle(1, 8))) == (None, None)


def test_name_level_cycle_fires_on_edit_test_rounds() -> None:
    events: Events = []
    for i in range(6):
        events += tool("edit", {"patch": f"fix {i}"}, "ok")
        events += tool("run_tests", {"path": "t"}, f"{5 - i} failed")
    assert firsts(only(Cycle(), events)) == (None, None)
    report = only(NameCycle(warn_repeats=3), events)
    assert report.first_warn is not None and report.first_stop is None
    assert report.findings[0].detector == "name_cycle"


# -- frequency ------------------------------------------------------------------------
def test_frequency_counts_one_tool_in_the_window_with_overrides() -> None:
    events: Events = []
    for i in range(25):
        events += tool("poll", {"page": i}, f"page {i}")
    assert only(Frequency(warn_at=20), events).first_warn == 38
    assert only(Frequency(exempt={"poll"}), events).first_warn is None
    report = only(Frequency(per_tool={"poll": (10, 15)}), events)
    assert firsts(report) == (18, 28)


# -- error loop -----------------------------------------------------------------------
def test_error_loop_same_error_from_reworded_calls() -> None:
    events: Events = []
    for i in range(5):
        events += tool("sh", {"cmd": f"pytest -k t{i}"}, "ModuleNotFoundError: foo", error=True)
    report = only(ErrorLoop(), events)
    assert firsts(report) == (5, 7)  # warned at the 3rd, stopped at the 4th
    assert "same error" in report.findings[0].message
    assert report.findings[1].message.endswith("You were told at step 5.")


def test_error_loop_counts_a_rejection_whose_small_number_moves_as_one_error() -> None:
    # a harness rejecting the same format mistake: "found 2 actions", "found 3 actions"
    events: Events = []
    for n in (2, 3, 2, 3):
        events += tool("bash", {"command": "ls"}, f"Please provide ONE action, found {n}.", True)
    assert firsts(only(ErrorLoop(), events)) == (5, 7)


def test_error_loop_tool_failing_with_different_errors() -> None:
    events: Events = []
    words = ["disk", "network", "permission", "syntax", "import", "memory", "timeout",
             "encoding", "locale", "socket"]  # fmt: skip
    for i, word in enumerate(words):
        events += tool("sh", {"cmd": f"c{i}"}, f"{word} problem reported", error=True)
    # warn at the 5th failure in a row (tool_warn_at), stop at the 10th
    assert firsts(only(ErrorLoop(), events)) == (9, 19)


def test_error_loop_resets_on_success() -> None:
    events: Events = []
    for i in range(6):
        events += tool("fetch", {"u": "a"}, "TimeoutError", error=True)
        events += tool("fetch", {"u": f"b{i}"}, f"page {i}")
    assert firsts(only(ErrorLoop(), events)) == (None, None)


# -- no progress ----------------------------------------------------------------------
def test_no_progress_reworded_searches_landing_on_the_same_page() -> None:
    page = "Acme Corp - Wikipedia. Acme Corp is a fictional company that makes everything."
    events: Events = []
    words = ["who", "name", "chief", "executive", "head", "leader", "boss", "current",
             "founder", "president", "chair", "director"]  # fmt: skip
    for word in words:
        events += tool("search", {"q": f"acme ceo {word}"}, page)
    assert firsts(only(NoProgress(), events)) == (11, 21)
    # the same page for another year asked about each time: each is another question
    asked: Events = []
    for year in range(2010, 2022):
        asked += tool("search", {"q": f"acme ceo in {year}"}, page)
    assert firsts(only(NoProgress(), asked)) == (None, None)


def test_no_progress_ignores_acknowledgements_of_new_writes() -> None:
    events: Events = []
    for i in range(20):
        events += tool("write_file", {"path": f"out/{i}.txt", "body": f"chunk {i}"}, "ok")
    events += tool("sh", {"cmd": "sed -i s/a/b/ f"}, "<returncode>0</returncode><output></output>")
    assert firsts(only(NoProgress(), events)) == (None, None)


# -- stagnation -----------------------------------------------------------------------
PLAN = (
    "I will analyze the requirements carefully, then consider the available options, "
    "and choose the most appropriate solution for the parser module."
)


def test_stagnation_catches_reordered_restatements() -> None:
    clauses = [c.strip() for c in PLAN.rstrip(".").split(",")]
    outputs = [", ".join(clauses[i:] + clauses[:i]) + "." for i in range(5)]
    assert firsts(only(Stagnation(), [model(o) for o in outputs])) == (1, 3)


def test_stagnation_needs_outputs_in_a_row_without_actions_between() -> None:
    events: Events = []
    for i in range(6):
        events.append(model(PLAN))
        events += tool("step", {"i": i}, f"result {i}")
    assert firsts(only(Stagnation(), events)) == (None, None)


def test_stagnation_is_per_agent_so_ping_pong_is_caught() -> None:
    events = []
    for _ in range(4):
        events.append(model("Could you clarify which report you need?", agent="writer"))
        events.append(model("Please clarify which report you need me to write.", agent="boss"))
    report = only(Stagnation(), events)
    assert firsts(report) == (2, 6)
    assert "writer" in report.findings[0].message


def test_stagnation_empty_outputs_and_distinct_outputs() -> None:
    assert firsts(only(Stagnation(), [model("") for _ in range(5)])) == (1, 3)
    distinct = [model(f"Step {i}: now looking at topic number {i} in detail.") for i in range(6)]
    assert firsts(only(Stagnation(), distinct)) == (None, None)


PREAMBLE = (
    "[Acme is a software company powered by multiple intelligent agents, such as a chief "
    "executive officer, a chief technology officer and programmers, with the mission of "
    "changing the digital world through programming. You are the Programmer; we are both "
    "working at Acme and share an interest in completing the customer's task.] "
) * 3


def test_stagnation_reads_a_long_output_past_what_it_compares() -> None:
    # one agent's long outputs in a row (a role-play's code rounds): the first 1,500
    # characters alike, the code after them new each time
    rounds = [PREAMBLE + "main.py\n" + "x = compute(grid)\n" * 100 + f"y = {i}\n" for i in range(5)]
    assert firsts(only(Stagnation(), [model(r, agent="dev") for r in rounds])) == (None, None)
    same = [model(rounds[0], agent="dev") for _ in range(5)]
    assert firsts(only(Stagnation(), same)) == (1, 3)


ROLE = (
    "[Acme is a software company powered by many intelligent agents: a chief executive "
    "officer, a chief product officer, a chief technology officer, a counselor, testers "
    "and programmers, organised like any firm, whose mission is changing the digital "
    "world through programming. You are the Programmer. We both work at Acme and share "
    "an interest in collaborating to complete a task assigned by a new customer. You can "
    "write software in Python, Java, C, C++, HTML, CSS, JavaScript, XML, SQL and PHP, "
    "with extensive experience across many platforms and varieties of languages.] "
)


def test_stagnation_a_preamble_then_much_against_a_preamble_then_little() -> None:
    # after the same opening, one message goes on (a design) and the next hardly does:
    # the second says nothing the first said, it is not the first again
    design = ROLE + "The board module keeps tiles; moves slide them; merges double values."
    events = [model(design, agent="dev"), model(ROLE + "<INFO> Finished", agent="dev")]
    assert firsts(only(Stagnation(), events)) == (None, None)
    # the same opening and a closing too short to compare: the same message again
    again = [model(ROLE + "<INFO> Finished", agent="dev") for _ in range(2)]
    assert firsts(only(Stagnation(), again)) == (1, None)


UNABLE = (
    "I'm unable to provide information about the balance of your {}. You may want to "
    "check your user profile or contact customer support for assistance with this."
)


def test_stagnation_counts_no_reply_that_takes_up_the_users_new_question() -> None:
    """One template answering two questions answers each: the second reply says what the
    user's message in between asked about (in another inflection, too)."""
    events: Events = [
        {"kind": "user", "text": "Could you tell me the total balance of my gift cards?"},
        model(UNABLE.format("gift cards")),
        {"kind": "user", "text": "No worries. Could you check my certificate balance then?"},
        model(UNABLE.format("certificates")),
    ]
    assert firsts(only(Stagnation(), events)) == (None, None)


def test_stagnation_counts_an_output_repeated_in_spite_of_the_users_message() -> None:
    """A harness rejecting the same mistake, with another count each time (numbers
    masked, its message is the same): from its second rejection on, the outputs between
    its messages go on counting. The first rejection is a new message, after which only
    the very same output counts (see the refusal test below)."""
    rejection = "Please always provide EXACTLY ONE action in triple backticks, found {} actions."
    events: Events = [{"kind": "user", "text": "Fix the failing test in utils.py."}]
    for i in range(5):
        events.append(
            model(f"THOUGHT: I will run two commands now: ls, then cat f{i}.py to read it.")
        )
        events.append({"kind": "user", "text": rejection.format(2 + i % 2)})
    assert firsts(only(Stagnation(), events)) == (5, 9)
    # the same reply to an unchanged refusal's prompt, identical each time, too
    same = [model(UNABLE.format("gift cards")), {"kind": "user", "text": "Why not?"}]
    assert firsts(only(Stagnation(), same * 4)) == (2, 6)


REFUSAL = (
    "I'm sorry, but I am unable to add travel insurance to your existing reservation, "
    "as insurance can only be purchased at the time of booking."
)
INSISTS = [
    "Can you please just add it?",
    "I really need the insurance, please.",
    "Come on, it's important, add it.",
    "Please, I'm begging you.",
    "Why not? Just add it.",
]


def test_stagnation_leaves_a_refusal_restated_in_words_to_a_user_who_insists() -> None:
    """A support agent holding a correct line, in slightly other words each time, against
    a user who asks again in new words: the user is the one going round. Stagnation
    counts no such reply (restated_reply tells the agent, and stops only when the user
    said they cannot give what would move things on); the very same reply each time is
    still a restatement, told but not stopped while each answers a new message of the
    user's; any reply to a user saying the very same thing counts, and is stopped."""
    openings = ["", "I understand. ", "I hear you. ", "Again, ", "I know this matters. "]
    reworded: Events = []
    for opening, said in zip(openings, INSISTS, strict=True):
        reworded += [model(opening + REFUSAL, to="user"), {"kind": "user", "text": said}]
    assert firsts(only(Stagnation(), reworded)) == (None, None)
    verbatim: Events = []
    for said in INSISTS:
        verbatim += [model(REFUSAL, to="user"), {"kind": "user", "text": said}]
    assert firsts(only(Stagnation(), verbatim)) == (2, None)
    same_push: Events = []
    for opening in openings:
        same_push += [model(opening + REFUSAL, to="user"), {"kind": "user", "text": INSISTS[0]}]
    # the user's first message is new (the count starts after it), then it is said again
    assert firsts(only(Stagnation(), same_push)) == (4, 8)


def test_stagnation_never_counts_across_a_user_message_not_recorded() -> None:
    """A message whose text the trace does not hold may have asked anything."""
    events: Events = []
    for _ in range(4):
        events += [model(UNABLE.format("gift cards")), {"kind": "user", "unknown": ["text"]}]
    assert firsts(only(Stagnation(), events)) == (None, None)


# -- chanting -------------------------------------------------------------------------
def test_chanting_repeated_sentence_and_run_on_text() -> None:
    text = "The answer is 42 because the question asks for it. " * 12
    assert firsts(only(Chanting(), [model(text)])) == (0, 0)
    run_on = "and then we loop around again " * 30
    assert only(Chanting(), [model(run_on)]).first_stop == 0
    assert only(Chanting(), [model("A sentence that says something. " * 7)]).first_stop is None


def test_chanting_ignores_code_tables_and_lists() -> None:
    code = "```\n" + "print('the same line of code here')\n" * 30 + "```"
    table = "\n".join("| the same cell value | the same cell value |" for _ in range(30))
    bullets = "\n".join("- the same bullet point text here" for _ in range(30))
    # several files' code listed without fences, each opening with the same imports
    files = "\n\n".join(
        f"# file_{i}.py\nimport tkinter as tk\nfrom game.board import Board\nclass Part{i}:\n"
        "    pass"
        for i in range(10)
    )
    for text in (code, table, bullets, files):
        assert firsts(only(Chanting(), [model(text)])) == (None, None)


def test_chanting_ignores_data_written_out_as_json_but_not_a_chant_inside_it() -> None:
    # an agent answering in structured output: every flight leg of the day has its date
    legs = [
        {"flight_number": f"HAT{n:03d}", "date": "2024-05-24", "origin": "JFK"} for n in range(12)
    ]
    data = json.dumps({"message": "Here are the options.", "options": legs}, indent=2)
    assert firsts(only(Chanting(), [model(data)])) == (None, None)
    chant = json.dumps({"message": "I will check the flight again now. " * 12}, indent=2)
    assert only(Chanting(), [model(chant)]).first_stop == 0


# The splits chanting made with regexes, which it now makes with str methods.
_SENTENCE_SPEC = re.compile(r"(?<=[.!?;])\s+|\n+")
_FENCE_SPEC = re.compile(r"```.*?(?:```|\Z)", re.DOTALL)
_PROSE = st.lists(
    st.sampled_from(["Done", "the same", "x", ".", "!", "?", ";", ",", "`", "```", "-", "İ"])
    | st.sampled_from([" ", "  ", "\n", "\n\n", "\t", "\r\n", "\x0b", "\x1c", "\x85", "\u2028"])
    | st.text(max_size=6),
    max_size=30,
).map("".join)


@given(_PROSE)
@example("One. Two!\nThree?  Four; five;\n\n  six. ```x. y```z. ```open. end")
@example("````x``` tail ``` ``` end")
def test_chanting_splits_sentences_and_fences_as_its_regexes_did(text: str) -> None:
    from loopwatch.detectors.chanting import _sentences, _without_fences

    assert _without_fences(text) == _FENCE_SPEC.sub("", text)
    folded = [" ".join(u.lower().split()) for u in _SENTENCE_SPEC.split(text)]
    assert _sentences(text) == [u for u in folded if u]


# -- recursion ------------------------------------------------------------------------
def _span(sid: str, text: str, parent: str | None = None, name: str = "agent_a") -> dict:
    ev = {"kind": "span", "name": name, "type": "agent", "id": sid, "text": text}
    if parent:
        ev["parent"] = parent
    return ev


def test_recursion_same_input_nested() -> None:
    events = [_span("a", "task"), _span("b", "Task.", "a"), _span("c", "task", "b")]
    report = only(Recursion(), events)
    assert firsts(report) == (1, 2)
    assert report.findings[-1].steps == (0, 1, 2)


def test_recursion_ignores_siblings_new_inputs_and_other_names() -> None:
    events = [
        _span("a", "task"),
        _span("b", "sub task one", "a"),
        _span("c", "task", "a", name="agent_b"),
        _span("d", "sub task two", "a"),
        _span("e", "task", "missing-parent"),
    ]
    assert firsts(only(Recursion(), events)) == (None, None)


# -- iteration cap --------------------------------------------------------------------
def test_iteration_cap() -> None:
    events = [model(f"turn {i}") for i in range(12)]
    assert firsts(only(IterationCap(max_iterations=10), events)) == (7, 10)
    assert firsts(only(IterationCap(max_iterations=None), events)) == (None, None)


def test_detectors_compose_with_or() -> None:
    combined = RepeatedCall() | Cycle(max_period=4)
    assert [d.name for d in combined] == ["repeated_call", "cycle"]


def test_detectors_register_themselves_and_config_only_loads() -> None:
    from loopwatch.config import DETECTORS
    from loopwatch.detectors import RUN_ORDER, registered

    assert list(registered()) == list(RUN_ORDER)
    assert {name: cls.default_on for name, cls in registered().items()} == {
        name: on for name, (_, on) in DETECTORS.items()
    }
    assert [type(d).name for d in Config().detectors()] == [d.name for d in default_detectors()]
    with pytest.raises(ValueError, match="NameCycle"):
        Cycle(level="name")


def test_a_users_own_detector_is_never_added_to_the_defaults() -> None:
    from loopwatch.detectors import registered

    class Mine(Detector):
        name = "mine"
        kinds = frozenset({"model"})

        def observe(self, ctx: Any) -> None:
            return None

    assert "mine" not in registered()
    assert "mine" not in {d.name for d in default_detectors()}
    assert "mine" in {d.name for d in scan_detectors(Mine())}


def scan_detectors(extra: Detector) -> list[Detector]:
    return [*default_detectors(), extra]
