"""Every kind of agent loops its own way: a support bot, a web agent under an
orchestrator, a coding CLI, a SWE harness. What is progress for one is noise for
another (DESIGN.md principle 9): a ``think`` call, a user who defers, a viewport
percentage, a reworded description or "No results found." are not progress."""

from __future__ import annotations

import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from runs import Events, model, run, tool

from loopwatch import Config, Guard, RestatedReply, RevisitedPage, scan
from loopwatch.events import Event
from loopwatch.fingerprints import is_reflection, looks_like_error
from loopwatch.text import negative, specifics


def think(thought: str) -> Events:
    return tool("think", {"thought": thought}, "")


# -- what a result says, when the trace does not say it --------------------------------
@pytest.mark.parametrize(
    ("text", "failed"),
    [
        ("Error: payment amount does not add up", True),
        ("  ERROR: no such table", True),
        ('Traceback (most recent call last):\n  File "x.py"', True),
        ('{"error": "not found", "code": 404}', True),
        ('{"error": null, "rows": []}', False),
        ('{"error": false}', False),
        ("Errors are reported in the log below.", False),
        ("The error handler was installed.", False),
        ("18C, cloudy", False),
    ],
)
def test_a_result_that_says_it_failed_is_an_error_without_a_flag(text: str, failed: bool) -> None:
    assert looks_like_error(text) is failed
    assert Event.from_dict({"kind": "tool_result", "text": text}).error is failed
    # a flag the trace recorded wins, either way
    assert Event.from_dict({"kind": "tool_result", "text": text, "error": False}).error is False
    assert Event.from_dict({"kind": "tool_result", "text": text, "error": True}).error is True
    # only results: a model saying "Error: ..." has not failed a call
    assert Event.from_dict({"kind": "model", "text": text}).error is False


@pytest.mark.parametrize(
    ("text", "found_nothing"),
    [
        ("No results found.", True),
        ("[]", True),
        (" {} ", True),
        ("null", True),
        ("0 matches for 'parser'", True),
        ("No files found", True),
        ("Nothing matched your query.", True),
        ("ok", False),
        ("File written.", False),
        ("Found 3 results: a, b, c", False),
        ("Notes: see above", False),
        ("x" * 250 + " no results", False),  # a long result says more than that
    ],
)
def test_a_lookup_that_found_nothing(text: str, found_nothing: bool) -> None:
    assert negative(text) is found_nothing


def test_specifics_are_what_a_user_brings() -> None:
    said = "I already told you, it's #W2378156; I'm sophia_silva_7557, flying SFO on the 5th."
    assert specifics(said) == ["#w2378156", "sophia_silva_7557", "sfo", "5th"]
    assert specifics("I'll try to find it and get back to you soon, thanks!") == []
    assert specifics("I understand. Is there really nothing else you can do?") == []


def _specifics_by_regex(text: str) -> list[str]:
    """The definition specifics() is a fast form of: runs of word characters and
    ``@#.:/+-`` in the first 2,000 characters; one holding a digit, ``_``, ``@`` or
    ``#`` is kept (its trailing marks stripped), any other gives its codes of 3+
    capitals."""
    out: dict[str, None] = {}
    for chars in re.findall(r"[\w@#.:/+-]+", text[:2000]):
        if re.search(r"[\d_@#]", chars):
            tok = chars.strip(".:/+-")
            if len(tok) >= 2:
                out[tok.lower()] = None
        else:
            for code in re.findall(r"\b[A-Z]{3,}\b", chars):
                out[code.lower()] = None
    return list(out)


_MESSAGE_CHARS = st.sampled_from(
    [*map(chr, range(128)), "\u00e9", "\u00c0", "\u00df", "\u01c5", "\u03a3", "\u0663", "\u00b2"]
)


@given(st.lists(_MESSAGE_CHARS, max_size=60).map("".join))
def test_specifics_read_by_str_methods_are_the_regex_definition(text: str) -> None:
    # plain words and ASCII text take str-method fast paths: the same tokens, in order
    assert specifics(text) == _specifics_by_regex(text)
    assert specifics(text * 40) == _specifics_by_regex(text * 40)  # past 2,000 characters


# -- reflection calls ------------------------------------------------------------------
def test_reflection_calls_are_known_by_name_or_by_their_only_argument() -> None:
    assert is_reflection("think", {"thought": "hm"})
    assert is_reflection("TodoWrite", {"todos": []})
    assert is_reflection("sequential_thinking", {"thought": "x", "next": True})
    assert is_reflection("notebook", {"thought": "x"})  # a thought, whatever the name
    assert not is_reflection("bash", {"command": "ls", "thought": "list"})
    assert not is_reflection("transfer_to_human_agents", {"summary": "wants a refund"})
    assert not is_reflection("search", {})


DECLINED = "Error: payment amount does not add up, total price is 4875, but paid 1625"


def booking_loop(between: Any) -> Events:
    events: Events = [{"kind": "user", "text": "Please book flight HAT023 for me."}]
    for i in range(4):
        events.append(model(""))
        events += tool("book_reservation", {"flight": "HAT023", "paid": 1625}, DECLINED)
        events += between(i)
    return events


def test_a_think_between_tries_does_not_make_the_same_failing_call_new() -> None:
    report = scan(
        run(booking_loop(lambda i: think("The total seems wrong; let me retry."))), Config()
    )
    # calls at 2, 7, 12, 17: the third identical failing call is told (it may still be a
    # hiccup); its result (13), the same error a third time, comes back before the model
    # could read that, so it is told too; the fourth call, made after both, is stopped
    assert (report.first_warn, report.first_stop) == (12, 17)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "repeated_call" and "You were told at step 13." in stop.message
    assert not any(f.severity.value == "stop" for f in report.findings if f.step == 13)
    told = next(f for f in report.findings if f.step == 12)
    assert told.detector == "repeated_call" and "the same error each time" in told.message

    # a real call in between that learns something each time is progress
    def look_up(i: int) -> Events:
        return tool("get_fare", {"segment": i}, f"segment {i}: {1000 + 300 * i} USD")

    assert scan(run(booking_loop(look_up)), Config()).first_stop is None


def test_a_thought_restated_turn_after_turn_is_read_as_model_output() -> None:
    events: Events = []
    for _ in range(5):
        events += think("I need to verify the flight segments and the total before booking.")
    report = scan(run(events), Config())
    assert any(f.detector == "stagnation" for f in report.findings)


def test_reflection_results_without_ids_are_not_taken_for_another_calls() -> None:
    events: Events = [
        {"kind": "tool_call", "name": "search", "args": {"q": "x"}},
        {"kind": "tool_call", "name": "notes", "args": {"thought": "wait for it"}},
        {"kind": "tool_result", "name": "notes", "text": ""},
        {"kind": "tool_result", "name": "search", "text": "18C"},
    ]
    guard = Guard(Config())
    for ev in events:
        guard.observe("r", ev)
    state = guard.state("r")
    assert state is not None
    assert [(c.name, c.rstep) for c in state.calls] == [("search", 3)]


# -- free-text arguments ---------------------------------------------------------------
DESCRIPTIONS = [
    "Run the tests", "Re-run the parser tests", "Check the tests again", "Run tests to verify",
    "Run pytest once more", "Verify the fix", "Run the failing test", "Test again",
]  # fmt: skip


def test_a_rewritten_description_does_not_make_a_repeat_new() -> None:
    events: Events = []
    for description in DESCRIPTIONS:
        events.append(model(""))
        events += tool(
            "Bash",
            {"command": "pytest tests/test_parser.py", "description": description},
            "FAILED tests/test_parser.py::test_nested - AssertionError\n1 failed in 0.12s",
            error=True,
        )
    report = scan(run(events), Config())
    # the third run of the same command is told (7); its failure (8) comes back before the
    # model could read that; the fourth run, made after, is the agent persisting
    assert (report.first_warn, report.first_stop) == (7, 10)
    message = report.findings[0].message
    assert "the same (reworded) arguments" in message
    # the description is kept for the message
    assert "pytest tests/test_parser.py" in message and "Check the tests again" in message


def test_a_description_that_is_the_only_argument_still_identifies_the_call() -> None:
    events: Events = []
    for i in range(4):
        events += tool("transfer", {"summary": f"customer {i} wants a refund"}, "Transfer ok")
    assert scan(run(events), Config()).verdict == "ok"


# -- lookups that find nothing ---------------------------------------------------------
QUERIES = [
    "paris hotel deals", "cheap hotels in paris", "paris accommodation discount",
    "budget stay paris", "paris lodging offers", "hotel bargains paris france",
    "affordable paris rooms", "paris inn prices", "low cost paris hotel", "paris hostel rates",
]  # fmt: skip


def test_reworded_searches_that_each_find_nothing_are_not_progress() -> None:
    events: Events = []
    for query in QUERIES:
        events.append(model("Let me search again."))
        events += tool("web_search", {"query": query}, "No results found.")
    report = scan(run(events), Config())
    assert report.first_warn is not None and report.first_stop is not None
    assert report.first_stop < len(events) - 3
    assert {f.detector for f in report.findings} >= {"futility"}


@pytest.mark.parametrize(
    ("name", "key", "values", "answer"),
    [
        ("whois", "domain", ["foo.com", "bar.org", "baz.net", "qux.io", "quux.dev", "corge.ai"],
         "No match for domain."),
        ("get_customer", "id", [f"C-{1000 + i}" for i in range(6)], "Customer not found."),
        ("search_dir", "search_term", ["parse_expr", "lex_number", "read_token", "next_char",
                                       "peek_char", "LexerState"], "No matches found in /repo"),
    ],
)  # fmt: skip
def test_lookups_of_other_things_that_each_find_nothing_are_answers(
    name: str, key: str, values: list[str], answer: str
) -> None:
    # each call asks about another domain, id or name: "not found" is that one's answer,
    # not the same empty result again
    events: Events = [{"kind": "user", "text": "Check each of these."}]
    for value in values:
        events += tool(name, {key: value}, answer)
    assert scan(run(events), Config()).findings == []


def test_reworded_searches_that_find_things_are_research() -> None:
    events: Events = []
    for i, query in enumerate(QUERIES):
        events.append(model("Let me search again."))
        events += tool("web_search", {"query": query}, f"Hotel {i}: {100 + i} EUR a night")
    assert scan(run(events), Config()).verdict == "ok"


# -- conversations ---------------------------------------------------------------------
REFUSALS = [
    "Unfortunately, I am unable to add travel insurance to your existing reservation "
    "due to policy restrictions.",
    "I understand your concern, but I am unable to add travel insurance to your existing "
    "reservation. A human agent may be able to help.",
    "I understand the importance of it. However, I am unable to add travel insurance to "
    "your existing reservation after booking.",
    "I truly wish I could help further, but I am unable to add travel insurance to your "
    "existing reservation.",
    "Unfortunately the policy is strict: I am unable to add travel insurance to your "
    "existing reservation.",
    "I am sorry, I am unable to add travel insurance to your existing reservation.",
]
PUSHES = [
    "That can't be right, can you check again?",
    "I'd really prefer not to be transferred. Is there anything else you can do?",
    "This is really important to me. Is there no other way?",
    "Maybe another department could do it?",
    "Are you sure there's absolutely nothing you can try?",
    "Alright, I see.",
]


def talk(replies: list[str], users: list[str]) -> Events:
    events: Events = [{"kind": "user", "text": "Please add insurance to reservation PEP4E0."}]
    events += tool("get_reservation_details", {"id": "PEP4E0"}, '{"insurance": "no"}')
    for reply, said in zip(replies, users, strict=True):
        events.append(model(reply, agent="airline_agent", to="user"))
        events.append({"kind": "user", "text": said})
    return events


def test_the_same_refusal_to_a_user_who_insists_is_told_not_stopped() -> None:
    # The agent holds a correct line against a user who keeps asking the same thing:
    # the user is the one going round. Told once (the 3rd restatement), never stopped:
    # on public tau2-bench conversations of agents the corpus does not have, this stop
    # ended solved runs.
    report = scan(run(talk(REFUSALS, PUSHES)), Config())
    # replies at 3, 5, 7, ...: each judged at the user turn after it; the reply at 5
    # restates the one at 3 (step 6), the 3rd restatement warns (step 10)
    assert (report.first_warn, report.first_stop) == (10, None)
    told = next(f for f in report.findings if f.detector == "restated_reply")
    assert "the same thing 4 times" in told.message
    assert told.steps == (6, 8, 10)


DEFERS = [
    "I don't have my other booking number with me. Can you check again?",
    "I'd really prefer not to be transferred. Is there anything else you can do?",
    "This is really important to me. Is there no other way?",
    "Maybe another department could do it?",
    "Are you sure there's absolutely nothing you can try?",
    "Alright, I see.",
]


def test_the_same_reply_to_a_user_who_cannot_give_more_is_a_loop() -> None:
    # The user said they do not have what would move things on: the agent restating
    # its reply turn after turn is not going on without it, and is stopped.
    report = scan(run(talk(REFUSALS, DEFERS)), Config())
    assert (report.first_warn, report.first_stop) == (10, 12)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "restated_reply"
    assert "the same thing 5 times" in stop.message
    assert "unable to add travel insurance" in stop.message
    assert stop.steps == (6, 8, 10, 12)


@pytest.mark.parametrize("apostrophe", ["\u2019", "\u2018", "\u02bc"])
def test_a_deferral_written_with_a_typographic_apostrophe_is_a_deferral(apostrophe: str) -> None:
    # Phones, word processors and many models write "don\u2019t": the user still says
    # they do not have it, and the verdict is the one for "don't".
    users = [DEFERS[0].replace("'", apostrophe), *DEFERS[1:]]
    assert apostrophe in users[0]
    report = scan(run(talk(REFUSALS, users)), Config())
    assert (report.first_warn, report.first_stop) == (10, 12)


def test_a_deferral_answered_by_a_lookup_is_over() -> None:
    # "I don't remember the reservation ID", and the agent finds it with the user id:
    # what the user could not give was found. Restating an answer afterwards to a user
    # who only insists is told, not stopped, as when nobody deferred.
    events: Events = [
        {"kind": "user", "text": "Please add insurance to my last booking."},
        model("Could you provide your user ID and the reservation ID?", to="user"),
        {"kind": "user", "text": "My user ID is noah_1. I don't remember the reservation ID."},
    ]
    events += tool("get_user_details", {"user_id": "noah_1"}, '{"reservations": ["4OG6T3"]}')
    events += tool("get_reservation_details", {"id": "4OG6T3"}, '{"passengers": 1}')
    for reply, said in zip(REFUSALS, PUSHES, strict=True):
        events.append(model(reply, agent="airline_agent", to="user"))
        events.append({"kind": "user", "text": said})
    report = scan(run(events), Config())
    assert report.first_warn is not None
    assert report.first_stop is None
    # without the lookups, the deferral stands and the restating is stopped
    del events[3:7]
    assert scan(run(events), Config()).first_stop is not None


def test_a_user_who_brings_something_specific_restarts_the_count() -> None:
    # without the booking number at step 8, the replies would be stopped at 12 (above)
    users = list(DEFERS)
    users[2] = "Fine: my other booking is XEWRD9, can you add it there?"
    report = scan(run(talk(REFUSALS, users)), Config())
    assert report.first_stop is None


def test_a_turn_in_which_the_agent_acts_is_work() -> None:
    events: Events = [{"kind": "user", "text": "Hi"}]
    for reply, said in zip(REFUSALS, PUSHES, strict=True):
        events += tool("lookup_policy", {"topic": "insurance"}, "Insurance: at booking only.")
        events.append(model(reply, to="user"))
        events.append({"kind": "user", "text": said})
    assert not any(f.detector == "restated_reply" for f in scan(run(events), Config()).findings)


def test_different_answers_are_a_conversation() -> None:
    replies = [
        "Your flight HAT023 leaves at 14:00 from gate B12.",
        "You may bring two checked bags of 23 kg each.",
        "Seat 14C is an aisle seat near the wing.",
        "Lunch is served on flights longer than three hours.",
        "Your gold status gives you lounge access at JFK.",
        "Glad I could help, safe travels!",
    ]
    report = scan(run(talk(replies, PUSHES)), Config())
    assert report.verdict == "ok", report.to_dict()


ASKS_AGAIN = [
    "Could you please provide your reservation ID so I can look up your booking?",
    "To change the flight, may I have the booking reference number?",
    "I need your reservation code to go on with the change. Could you share it?",
    "Please let me know your confirmation number so I can find the reservation.",
    "Without the reservation identifier I cannot continue. Can you provide it?",
    "Could you send me the reservation ID when you have it?",
]
DEFERS = [
    "I don't have it handy right now.",
    "Can we do it without it? I'm not sure where it is.",
    "Hmm. Can't you just look it up?",
    "I'd rather not look for it now.",
    "Maybe later.",
    "Not right now.",
]


def test_asking_the_user_again_in_new_words_while_they_defer_is_a_loop() -> None:
    """No two of these replies share a run of words: each asks in new words for the
    reservation the user never gives. Told at the 4th ask, stopped at the 5th."""
    report = scan(run(talk(ASKS_AGAIN, DEFERS)), Config())
    assert (report.first_warn, report.first_stop) == (10, 12)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert (
        stop.detector == "restated_reply" and "asked the user for the same thing 5" in stop.message
    )
    assert "You were told at step 10" in stop.message


def test_saying_what_is_still_needed_is_asking_for_it() -> None:
    # no question mark: "please check ... for the reservation ID", "I still need the
    # reservation ID" ask for it all the same
    said = [
        "Could you please provide your reservation ID?",
        "To cancel I must have the reservation ID. Please check your confirmation email for it.",
        "Unfortunately there is no way around it. Please look in your messages for the "
        "reservation ID.",
        "I understand, but I still need the reservation ID to go on with the cancellation.",
        "Without it nothing can be done: I still need the reservation ID.",
        "Goodbye.",
    ]
    report = scan(run(talk(said, DEFERS)), Config())
    assert (report.first_warn, report.first_stop) == (10, 12)
    assert {f.detector for f in report.findings} == {"restated_reply"}


def test_asking_for_one_thing_after_another_is_a_conversation() -> None:
    asks = [
        "Could you provide the date you want to fly?",
        "Which cabin class would you like: basic economy, economy or business?",
        "How many passengers will travel?",
        "Which payment method should I use: the gift card or the credit card on file?",
        "Do you want to add travel insurance for 30 dollars per passenger?",
        "Would you like a window or an aisle seat?",
    ]
    answers = ["Next Friday", "Economy", "Two", "The credit card", "No", "Window"]
    report = scan(run(talk(asks, answers)), Config())
    assert report.verdict == "ok", report.to_dict()


def test_a_user_who_gives_what_was_asked_restarts_the_asking() -> None:
    users = list(DEFERS)
    users[2] = "Found it: XEWRD9."
    report = scan(run(talk(ASKS_AGAIN, users)), Config())
    assert report.first_stop is None


DEFERS_WITH_DETAILS = [
    "I don't have it handy. The flight was from ATL to PHL on May 12.",
    "Let me check my email. Meanwhile: I want the 8:00 flight, seat 14C.",
    "I'll look for it later. Can the new date be 2024-05-13?",
    "Still searching for it. My member number is 55120, if that helps.",
    "I can't find it, sorry. Budget is 300 dollars at most.",
    "I'll get back to you.",
]
ONCE_YOU_HAVE_IT = [
    "Once you have the reservation ID, please let me know and I will make the change.",
    "Thank you. Once you have the reservation ID, please let me know and I can go on.",
    "Noted. Once you have the reservation ID, please let me know so I can book it.",
    "Good. Once you have the reservation ID, please let me know and we will proceed.",
    "Understood. Once you have the reservation ID, please let me know, I will be here.",
    "Once you have the reservation ID, please let me know.",
]


def test_asking_again_while_the_user_defers_with_other_details_is_a_loop() -> None:
    """Each user turn brings something specific (a route, a seat, a date, a number),
    but says they do not have what was asked for: the agent never uses what it got and
    asks for the same thing again. Each reply also restates the one before: both
    counts go on, and the asking one stops at the 5th ask."""
    report = scan(run(talk(ONCE_YOU_HAVE_IT, DEFERS_WITH_DETAILS)), Config())
    assert (report.first_warn, report.first_stop) == (10, 12)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert "asked the user for the same thing 5" in stop.message


def test_details_given_without_deferring_restart_the_asking() -> None:
    users = [said.split(". ", 1)[-1] for said in DEFERS_WITH_DETAILS]  # details only
    report = scan(run(talk(ASKS_AGAIN, users)), Config())
    assert report.first_stop is None


def test_an_offer_of_more_help_after_each_answer_asks_for_nothing() -> None:
    """'If you have any other questions, please let me know' closes many support
    replies: it does not carry the answer before it into a request."""
    replies = [
        f"Flight {n} leaves at {h}:00 from gate B{n % 9}. If you have any other questions, "
        "please let me know."
        for n, h in ((101, 8), (202, 9), (303, 10), (404, 11), (505, 12), (606, 13))
    ]
    users = [
        "And the next one?",
        "What about the one after?",
        "And then?",
        "Next one.",
        "More?",
        "Thanks",
    ]
    report = scan(run(talk(replies, users)), Config())
    assert report.verdict == "ok", report.to_dict()


def test_messages_to_another_agent_are_not_replies() -> None:
    events: Events = [{"kind": "user", "text": "Go"}]
    for refusal in REFUSALS:
        events.append(model(refusal, agent="orchestrator", to="web_surfer"))
        events.append({"kind": "user", "text": "continue"})
    assert scan(run(events), Config(), detectors=[RestatedReply()]).findings == []


def test_the_same_failing_call_across_user_turns_that_bring_nothing() -> None:
    def turns(users: list[str]) -> Events:
        events: Events = []
        for said in users:
            events.append({"kind": "user", "text": said})
            events += tool("update_flights", {"reservation": "XEWRD9", "flight": "HAT030"},
                           "Error: flight HAT030 not available on date 2024-05-13")  # fmt: skip
        return events

    deferring = ["Change my flight please", "Please try again", "Can you proceed?", "Go on"]
    # the third identical call is told (7), and its failure (8) too: the model has not read
    # that yet; the fourth call, made after, is the agent persisting
    assert scan(run(turns(deferring)), Config()).first_stop == 10
    # each turn names another flight: the user changed the request
    specific = ["Change to HAT030", "Try HAT031", "Then HAT032", "Or HAT033"]
    assert scan(run(turns(specific)), Config()).first_stop is None


# -- web agents ------------------------------------------------------------------------
def page(percent: int, call_id: str, extra: str = "") -> str:
    words = " ".join(f"item{i} price{i * 3} review{i}" for i in range(60))
    return (
        "I clicked 'Month Selection'.\n\nHere is a screenshot of [History | Weather]"
        f"(https://www.example.com/history). The viewport shows {percent}% of the page "
        f"(request {call_id}).\nThe following text is visible:\n{extra}{words}"
    )


def test_the_same_click_on_a_page_that_does_not_change_is_stopped_at_the_third() -> None:
    events: Events = [{"kind": "user", "text": "Find June 2021 in the history"}]
    for i, percent in enumerate((68, 70, 68, 69)):
        events.append(model("Please select the month.", agent="Orchestrator", to="WebSurfer"))
        events += tool("click", {"target": "Month Selection"}, page(percent, f"req_{i}A9x"))
    report = scan(run(events), Config())
    assert report.first_stop == 8  # the third click
    assert report.findings[0].detector == "repeated_call"


def test_scrolling_a_page_that_shows_new_content_is_reading() -> None:
    events: Events = [{"kind": "user", "text": "Read the article"}]
    for i in range(6):
        text = " ".join(f"para{i}word{j} topic{i}{j}" for j in range(80))
        result = f"I scrolled down.\nHere is a screenshot of [A](https://example.com/a).\n{text}"
        events += tool("scroll", {"direction": "down"}, result)
    assert scan(run(events), Config()).verdict == "ok"


@pytest.mark.parametrize(
    ("name", "args", "answer"),
    [
        ("scroll_down", {"amount": None}, "\U0001f50d  Scrolled down the page by one page"),
        ("computer", {"action": "scroll", "scroll_direction": "down"}, "Scrolled down 3 clicks"),
        ("browser_press_key", {"key": "PageDown"}, "Pressed PageDown"),
        ("scroll", {"delta_y": 600}, ""),
    ],
)
def test_a_scroll_answered_only_by_its_acknowledgement_is_no_evidence(
    name: str, args: dict[str, Any], answer: str
) -> None:
    """browser-use, computer-use tools and key presses answer a scroll with what they did
    ("Scrolled down the page by one page"), not with what came into view: six such
    answers are not six times the same screen, whatever the narration says about it
    (the screen is the result, and the trace does not hold it)."""
    events: Events = [{"kind": "user", "text": "Find the cheapest laptop with 16GB RAM"}]
    for i in range(6):
        events.append(model(f"Products {i * 8 + 1}-{i * 8 + 8} checked. Scrolling on."))
        events += tool(name, args, answer)
    report = scan(run(events), Config())
    assert report.verdict == "ok", report.to_dict()


@pytest.mark.parametrize(
    ("name", "args", "answer"),
    [
        ("click", {"selector": "button.load-more"}, "Clicked element button.load-more"),
        (
            "click_element_by_index",
            {"index": 5},
            "\U0001f5b1\ufe0f  Clicked button with index 5: Load more",
        ),
        ("browser_press_key", {"key": "End"}, "Pressed End"),
    ],
)
def test_a_click_answered_only_by_its_acknowledgement_is_no_evidence(
    name: str, args: dict[str, Any], answer: str
) -> None:
    """A "Load more" clicked six times, each answered "Clicked element ...": the page
    after each click is not in the trace, so the answers are not six times the same
    page. The narration names the new reviews: reading, not looping."""
    events: Events = [{"kind": "user", "text": "List all the reviews"}]
    for i in range(6):
        events += tool(name, args, answer)
        events.append(model(f"Now {i * 10 + 10} reviews are shown, the last by user{i}."))
    assert scan(run(events), Config()).verdict == "ok"
    # nor without any narration: an acknowledgement says nothing of the page
    events = [{"kind": "user", "text": "List all the reviews"}]
    for _ in range(6):
        events += tool(name, args, answer)
    assert scan(run(events), Config()).verdict == "ok"


def test_a_click_acknowledged_while_the_narration_says_nothing_changed_is_stopped() -> None:
    """The same acknowledged click, and after each the agent's own words that the form
    is still not sent: no_effect reads the narration, warns, then stops."""
    events: Events = [{"kind": "user", "text": "Submit the form"}]
    for _ in range(6):
        events.append(model("The form is still not submitted. Let me click Submit again."))
        events += tool("click", {"selector": "button#submit"}, "Clicked element button#submit")
    report = scan(run(events), Config())
    assert report.first_warn is not None and report.first_stop is not None
    assert report.first_warn < report.first_stop
    assert {f.detector for f in report.findings} == {"no_effect"}
    # an acknowledgement that reports a failure is a result: the same one is repeated
    events = [{"kind": "user", "text": "Submit the form"}]
    for _ in range(4):
        events += tool("click", {"selector": "#submit"}, "Clicked, but nothing happened")
    assert scan(run(events), Config()).first_stop is not None
    # and a domain tool's answer states what is now so: the same one is the same result
    events = [{"kind": "user", "text": "Book seat 12A"}]
    for _ in range(4):
        events += tool("select_seat", {"seat": "12A"}, "Selected seat 12A")
    assert scan(run(events), Config()).first_stop is not None


@pytest.mark.parametrize(
    "answer",
    [
        None,  # a screenshot agent: no result in the trace
        "Scrolled down 600 pixels",
        '[{"type":"image","source":{"type":"base64","media_type":"image/png","data":"AAAA"}}]',
    ],
)
def test_scrolling_on_while_the_narration_says_the_view_did_not_move_is_stopped(
    answer: str | None,
) -> None:
    """At the bottom of a page nothing moves: the agent says so after each scroll ("the
    page looks the same", "still at the bottom") and scrolls again. A scroll whose
    narration names what came into view is reading (the other runs below)."""

    def scrolls(narration: str) -> Events:
        events: Events = [{"kind": "user", "text": "Find the refund policy"}]
        for _ in range(6):
            if answer is None:
                events.append({"kind": "tool_call", "name": "scroll", "args": {"delta_y": 600}})
            else:
                events += tool("scroll", {"delta_y": 600}, answer)
            events.append(model(narration))
        return events

    stuck = scan(
        run(scrolls("The page looks the same; I'm still at the bottom. Let me scroll again.")),
        Config(),
    )
    assert stuck.first_warn is not None and stuck.first_stop is not None
    assert stuck.first_warn < stuck.first_stop
    assert stuck.findings[0].detector == "no_effect"
    for reading in (
        "I can see the warranty section. Let me keep scrolling to find the refund policy.",
        "I don't see the refund policy yet. Let me continue scrolling down.",
        "Scrolling down again to see more.",
    ):
        assert scan(run(scrolls(reading)), Config()).verdict == "ok", reading


def test_a_scroll_answered_with_a_limit_still_counts() -> None:
    """ "Already at the bottom of the page" says something: the same answer to the same
    scroll is the same result (the bottom of a page, where nothing moves)."""
    events: Events = [{"kind": "user", "text": "Find the footer"}]
    for _ in range(4):
        events += tool("scroll_down", {}, "Already at the bottom of the page")
    assert scan(run(events), Config()).first_stop is not None


def test_only_a_page_is_sketched_from_its_first_result() -> None:
    from loopwatch.detectors.repeat import RepeatState

    guard = Guard(Config())
    long_output = " ".join(f"line{i} value{i} status{i}" for i in range(80))
    for rid, text in (("page", page(68, "a")), ("log", long_output)):
        guard.observe(rid, {"kind": "tool_call", "name": "x", "args": {}})
        guard.observe(rid, {"kind": "tool_result", "name": "x", "text": text})
    sketched: dict[str, Any] = {}
    for rid in ("page", "log"):
        state = guard.state(rid)
        assert state is not None
        streaks = state.slot("repeated_call", RepeatState).by_key
        sketched[rid] = next(iter(streaks.values())).sketch is not None
    assert sketched == {"page": True, "log": False}


# -- orchestrators -----------------------------------------------------------------------
def screen(address: str, shown: str, percent: int) -> str:
    """A browser result: the address echoed near the start, then what the page shows."""
    return (
        f"I clicked it.\n\nHere is a screenshot of [Page]({address}). The viewport shows "
        f"{percent}% of the webpage.\nAutomatic OCR of the page screenshot has detected "
        f"the following text:\n{shown}"
    )


GRAVEYARD = " ".join(f"flavor{i} rhyme{i} years{i}" for i in range(30))


INSPECT = "Please inspect the headstone photo for other headstones and read their rhymes."


def test_an_instruction_resent_while_the_page_does_not_change_is_stopped_at_the_third() -> None:
    address = "https://www.example.com/flavors/graveyard"
    events: Events = [{"kind": "user", "text": "What is the rhyme on the oldest headstone?"}]
    # the first click shows the page; each later one lands on it again (another
    # percentage, OCR noise), so the instructions after the 2nd bring nothing new
    for target, percent in (("graveyard", 20), ("headstone", 22), ("photo", 25), ("back", 22)):
        events.append(model(INSPECT, agent="Orchestrator", to="WebSurfer"))
        shown = GRAVEYARD.replace("flavor7", "flavour7") if percent == 25 else GRAVEYARD
        events += tool("click", {"target": target}, screen(address, shown, percent))
    report = scan(run(events), Config())
    assert report.first_stop == 10  # the 4th instruction: the 3rd with nothing new
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "repeated_instruction"
    assert stop.steps == (4, 7, 10)
    assert "Orchestrator has sent WebSurfer the same instruction 3 times" in stop.message


def test_an_orchestrator_walking_a_list_gets_new_pages_and_is_not_stopped() -> None:
    events: Events = [{"kind": "user", "text": "Which eatery is open at 11pm?"}]
    places = ["Shack", "Olio", "Sneekers", "Pizza Palace", "Waterfront"]
    for n, place in enumerate(places):
        left = ", ".join(places[n:])
        events.append(model(f"Check the opening hours of {left} on Wednesdays.",
                            agent="Orchestrator", to="WebSurfer"))  # fmt: skip
        shown = " ".join(f"{place.lower()}{i} hours{i} review{i}" for i in range(30))
        address = f"https://www.bing.com/search?q={place.replace(' ', '+')}"
        events += tool("click", {"target": place}, screen(address, shown, 10))
    assert not any(
        f.detector == "repeated_instruction" for f in scan(run(events), Config()).findings
    )


def test_a_new_reply_from_the_instructed_agent_is_news() -> None:
    def exchange(replies: list[str]) -> list[str]:
        events: Events = [{"kind": "user", "text": "Read the downloaded file"}]
        for reply in replies:
            events.append(model("Please read the downloaded PDF and report the volume.",
                                agent="Orchestrator", to="FileSurfer"))  # fmt: skip
            events.append(model(reply, agent="FileSurfer"))
        return [f.detector for f in scan(run(events), Config()).findings]

    pages = ["Title page: authors and abstract.", "Methods: the bag is a cylinder.",
             "Results: fish counts per day.", "Appendix: raw tables of weights."]  # fmt: skip
    assert "repeated_instruction" not in exchange(pages)
    assert "repeated_instruction" in exchange(["Error 404: file not found"] * 4)


SUMMARIES = [
    "The paper proposes a sparse attention kernel that cuts memory by 40% on PG-19.",
    "Ordering code tasks by difficulty improves pass@1 by 3 points in this study.",
    "A benchmark of 500 multi-step web tasks: agents fail mostly at navigation.",
    "Retrieval-augmented models hallucinate less on biomedical QA, on a new dataset.",
    "Reward hacking in RLHF is curbed by a regulariser on the KL term, on summaries.",
]


@pytest.mark.parametrize("addressed", [True, False])
def test_a_manager_handing_out_a_list_from_a_template_is_not_stuck(addressed: bool) -> None:
    # only the item changes in the manager's messages; each worker reply is new (and
    # is news for the manager whether or not it is addressed back)
    events: Events = [{"kind": "user", "text": "Summarise these five papers."}]
    for i, summary in enumerate(SUMMARIES, 1):
        ask = f"Please summarise paper {i} in five bullet points, focusing on method and results."
        events.append(model(ask, agent="manager", **({"to": "worker"} if addressed else {})))
        events.append(model(summary, agent="worker", **({"to": "manager"} if addressed else {})))
    assert scan(run(events), Config()).findings == []
    # the same worker reply each time: the manager's instructions bring nothing new
    stuck: Events = [{"kind": "user", "text": "Summarise these five papers."}]
    for i in range(1, 6):
        ask = f"Please summarise paper {i} in five bullet points, focusing on method and results."
        stuck.append(model(ask, agent="manager", to="worker"))
        stuck.append(model("Error: the PDF could not be opened.", agent="worker", to="manager"))
    assert scan(run(stuck), Config()).first_stop is not None


def test_an_instruction_the_trace_did_not_record_is_not_a_repeat() -> None:
    events: Events = [{"kind": "user", "text": "Go"}]
    for _ in range(4):
        events.append({"kind": "model", "agent": "Orchestrator", "to": "WebSurfer"})
    report = scan(run(events), Config())
    assert not any(f.detector == "repeated_instruction" for f in report.findings)


# -- the same error, again ---------------------------------------------------------------
NOT_AVAILABLE = "Error: flight HAT030 not available on date 2024-05-13"


def test_re_sending_a_call_that_failed_is_told_at_the_third_same_error() -> None:
    events: Events = [{"kind": "user", "text": "Change my flights"}]
    tries = (["HAT030", "HAT002"], ["HAT030", "HAT004"], ["HAT030", "HAT002"], ["HAT030"])
    for flights in tries:
        events += tool("update_flights", {"flights": flights}, NOT_AVAILABLE)
    report = scan(run(events[:7]), Config())
    # the third failure (the first call, sent again) is told: three identical failures
    # after which an agent changes approach is a run about to recover
    assert (report.first_warn, report.first_stop) == (6, None)
    told = next(f for f in report.findings if f.step == 6)
    assert told.detector == "error_loop" and told.message.endswith("the run will be stopped.")
    report = scan(run(events), Config())
    assert report.first_stop == 8  # a fourth time, told: stopped
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert (stop.detector, stop.steps) == ("error_loop", (2, 4, 6, 8))


def test_a_warning_the_agent_has_not_read_yet_does_not_earn_a_stop() -> None:
    # the same failing command three times, then another approach that works: the third
    # call is warned, and its result (the same error a third time) comes back before the
    # model could read that warning, so it is a warning too, not a stop
    failing = tool("bash", {"command": "pytest tests/test_api.py"},
                   "ImportError: No module named 'requests'", error=True)  # fmt: skip
    events: Events = [{"kind": "user", "text": "Run the tests."}]
    for _ in range(3):
        events += failing
    recovered = [
        *events,
        *tool("bash", {"command": "pip install requests"}, "Successfully installed requests"),
        *tool("bash", {"command": "pytest tests/test_api.py"}, "5 passed in 0.30s"),
    ]
    report = scan(run(recovered), Config())
    assert (report.first_warn, report.first_stop) == (5, None)
    told = {(f.detector, f.step) for f in report.findings}
    assert told >= {("repeated_call", 5), ("error_loop", 6)}
    # the guard agrees: the third call is not run, the model reads why; nothing stops
    guard = Guard(Config())
    actions = [guard.observe("r", ev).action for ev in recovered]
    assert actions[5] == "skip" and "stop" not in actions
    # persisting after it is stopped: the fourth identical call, made once it was told
    persisted = scan(run(events + failing), Config())
    assert persisted.first_stop == 7
    stop = next(f for f in persisted.findings if f.severity.value == "stop")
    assert stop.step == 7 and "You were told at step 6." in stop.message


def test_different_calls_failing_the_same_way_are_exploring() -> None:
    events: Events = [{"kind": "user", "text": "Find the config"}]
    for path in ("a.toml", "b.toml", "c.toml"):
        events += tool("read", {"path": path}, "Error: file not found")
    report = scan(run(events), Config())
    assert report.first_stop is None
    assert [f.detector for f in report.findings] == ["error_loop"]  # a warning at the 3rd


def test_the_same_error_between_other_tools_successes_is_a_warning() -> None:
    def attempts(between: str) -> Events:
        events: Events = [{"kind": "user", "text": "Book it"}]
        for total in ("957", "1047", "957"):
            events += tool("book", {"paid": total}, "Error: payment does not add up, total 1002")
            events += tool(between, {"expression": f"{total} + 1"}, f"{total}.5")
        return events

    report = scan(run(attempts("calculate")), Config())
    assert report.first_stop is None
    warning = report.findings[-1]
    assert (warning.detector, warning.steps) == ("error_loop", (2, 6, 10))
    assert "although other calls worked in between" in warning.message
    # when the failing tool itself succeeds in between, the failure is not recurring
    assert scan(run(attempts("book")), Config()).verdict == "ok"


def test_a_test_run_failing_fewer_tests_after_each_edit_moves() -> None:
    def cycles(failing: list[int]) -> Events:
        events: Events = [{"kind": "user", "text": "Make the tests pass."}]
        for i, n in enumerate(failing):
            events += tool("bash", {"command": "pytest -q"}, f"{n} failed, {30 - n} passed",
                           error=True)  # fmt: skip
            events += tool("edit", {"path": "p.py", "new": f"fix {i}"}, "The file p.py was edited.")
        return events

    assert scan(run(cycles([6, 5, 4, 3, 2, 1])), Config()).findings == []
    # the same count each time: the edits do not touch it
    stuck = scan(run(cycles([6, 6, 6])), Config()).findings
    assert [(f.detector, f.severity.value) for f in stuck] == [("error_loop", "warn")]


# -- browsing ------------------------------------------------------------------------------
VIEWER = " ".join(f"figure{i} table{i} section{i}" for i in range(30))


def test_a_page_shown_a_third_time_is_a_warning() -> None:
    address = "https://journals.example.org/article/view/733/684"
    events: Events = [{"kind": "user", "text": "Find the volume in the paper"}]
    # three ways to the same viewer page, other pages in between
    for n, (name, args) in enumerate(
        [
            ("click", {"target": "PDF"}),
            ("visit_url", {"url": address}),
            ("click", {"target": "View"}),
        ]
    ):
        events += tool(name, args, screen(address, VIEWER.replace("figure1 ", f"fig{n} "), 100))
        other = f"https://search.example.com/?q=fish+bag+{n}"
        events += tool(
            "search", {"q": f"fish bag {n}"}, screen(other, f"hit{n} " * 40 + VIEWER[:50], 5)
        )
    report = scan(run(events), Config())
    revisits = [f for f in report.findings if f.detector == "revisited_page"]
    assert [(f.severity.value, f.steps) for f in revisits] == [("warn", (2, 6, 10))]
    assert report.first_stop is None  # a warning only, by default
    assert "The same page has come back 3 times" in revisits[0].message


def test_a_shell_command_printing_a_url_shows_no_page() -> None:
    svg = '<svg xmlns="http://www.w3.org/2000/svg">' + VIEWER + "</svg>"
    events: Events = [{"kind": "user", "text": "Check the diagram"}]
    for n in range(4):
        events += tool("bash", {"command": f"cat diagram.svg  # {n}"}, svg)
        events += tool("bash", {"command": f"sed -i 's/a{n}/b/' conf.py"}, "")
    assert not any(f.detector == "revisited_page" for f in scan(run(events), Config()).findings)


def test_a_new_request_from_the_user_makes_a_page_new_again() -> None:
    address = "https://weather.example.com/paris"
    events: Events = []
    for city_request in ("Weather in Paris, zip 75001?", "And for 75002?", "What about 75003?"):
        events.append({"kind": "user", "text": city_request})
        events += tool(
            "visit_url", {"url": address, "n": city_request}, screen(address, VIEWER, 40)
        )
    assert not any(f.detector == "revisited_page" for f in scan(run(events), Config()).findings)


def _shop_page(address: str, words: list[str]) -> str:
    return f"Page URL: {address}\nTitle: Shop\n" + " ".join(words)


_RESULTS = _shop_page(
    "https://shop.example/search?q=laptop",
    [f"Laptop model{i} price {900 + i * 37} rating {i % 5}" for i in range(40)],
)


def _item(i: int) -> str:
    return _shop_page(f"https://shop.example/item/{i}", [f"spec{i}x{j} d{j}" for j in range(60)])


def test_a_list_of_results_returned_to_between_its_items_is_no_revisit() -> None:
    """A browser agent reading items one by one from one list: results, item 1, back,
    item 2, back... The list comes back five times, each time after a new item."""
    events: Events = [{"kind": "user", "text": "Find the cheapest laptop with 16GB RAM"}]
    events += tool("browser_navigate", {"url": "https://shop.example/search?q=laptop"}, _RESULTS)
    for i in range(5):
        events += tool("browser_click", {"element": f"Laptop model{i}"}, _item(i))
        events.append(model(f"Model{i} has {8 if i % 2 else 16}GB RAM. Back to the results."))
        events += tool("browser_navigate_back", {}, _RESULTS)
    assert scan(run(events), Config()).verdict == "ok"


def test_two_pages_shown_in_turn_are_revisits() -> None:
    """The same item opened again and again from the list: the item and the list come
    back in turn, and neither brings anything new."""
    events: Events = [{"kind": "user", "text": "Find the cheapest laptop with 16GB RAM"}]
    events += tool("browser_navigate", {"url": "https://shop.example/search?q=laptop"}, _RESULTS)
    for _ in range(4):
        events += tool("browser_click", {"element": "Laptop model1"}, _item(1))
        events += tool("browser_navigate_back", {}, _RESULTS)
    report = scan(run(events), Config())
    assert any(f.detector == "revisited_page" for f in report.findings)
    # and a list shown again by the very call that showed something else before it
    # (the same click landing on a page that moves a little) is counted too
    events = [{"kind": "user", "text": "Open the photo"}]
    for i in range(6):
        events += tool("click", {"target": "Photo"}, _item(1) if i % 2 else _RESULTS)
    report = scan(run(events), Config(), detectors=[RevisitedPage()])
    assert report.findings and report.findings[0].steps == (2, 6, 10)  # 3 showings


def test_a_template_refusal_word_for_word_to_a_user_who_pleads_is_told_not_stopped() -> None:
    """A support bot answering each new plea with its one template refusal, word for
    word: told, never stopped (the user is the one going round). A user saying the
    very same thing each time makes it a loop of both, and it is stopped."""
    refusal = (
        "I'm sorry, but according to our policy, basic economy tickets are "
        "non-refundable for personal reasons. I can offer a travel credit instead."
    )
    pleas = [
        "I want a full refund for my flight.",
        "Please, I really need the refund, my trip was cancelled.",
        "Can you make an exception and refund me?",
        "I insist on a refund, this is unacceptable.",
        "Refund me now please.",
        "Is there really no way to get my money back?",
    ]
    events: Events = [{"kind": "user", "text": "Hi, I need help with reservation ABC123."}]
    for plea in pleas:
        events += [model(refusal, to="user"), {"kind": "user", "text": plea}]
    report = scan(run(events), Config())
    assert report.first_warn is not None and report.first_stop is None
    events = [{"kind": "user", "text": "Hi, I need help with reservation ABC123."}]
    for _ in pleas:
        events += [model(refusal, to="user"), {"kind": "user", "text": "Refund me now."}]
    assert scan(run(events), Config()).first_stop is not None
