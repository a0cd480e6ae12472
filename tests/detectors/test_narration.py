"""Computer-use agents: the narration after an action is its observation."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st
from runs import Events, run

from loopwatch import Config, Guard, NoEffect, scan
from loopwatch.detectors.narration import read
from loopwatch.hooks._events import tool_result


def click(x: int, y: int) -> dict[str, Any]:
    return {"kind": "tool_call", "name": "click", "args": {"x": x, "y": y}}


def said(text: str) -> dict[str, Any]:
    return {"kind": "model", "text": text}


TASK = {"kind": "user", "text": "Task: find the opening hours of the Springfield library."}


def banner(notes: list[str]) -> Events:
    events: Events = [
        TASK,
        {"kind": "tool_call", "name": "navigate", "args": {"url": "https://lib.example"}},
        said("I can see the library homepage with a cookie banner at the bottom."),
    ]
    for i, note in enumerate(notes):
        events += [click(973 + i % 2, 761), said(note)]
    return events


STUCK = [
    "Let me accept the cookies first.",
    "I see the cookie banner is still there. Let me click the Accept button directly.",
    "The cookie banner persists. Let me try clicking it once more, more precisely.",
    "It still did not close. Let me try again.",
]


def test_the_same_click_that_the_narration_says_did_nothing_is_told_then_stopped() -> None:
    report = scan(run(banner(STUCK)), Config())
    # clicks at 3, 5, 7, 9: the narration after the third shows no progress, with two
    # failure signals ("directly", "persists"; "still" alone is none): told; the fourth
    # click, told, is stopped
    assert (report.first_warn, report.first_stop) == (8, 9)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.detector == "no_effect" and "click at (973, 761)" in stop.message
    assert "You were told at step 8." in stop.message
    # two failure signals before the third try: told before it, stopped after it
    sure = ["The banner didn't close. Let me click it again.", *STUCK[1:]]
    report = scan(run(banner(sure)), Config())
    assert (report.first_warn, report.first_stop) == (7, 8)
    assert all("no new result" not in f.message for f in report.findings)


def test_a_narration_written_with_typographic_apostrophes_reads_the_same() -> None:
    # "didn\u2019t close", as many models and editors write it: the same reading and
    # the same verdicts as "didn't close"
    plain = ["The banner didn't close. Let me click it again.", *STUCK[1:]]
    typographic = [note.replace("'", "\u2019") for note in plain]
    assert "\u2019" in typographic[0]
    report = scan(run(banner(typographic)), Config())
    assert (report.first_warn, report.first_stop) == (7, 8)
    missing = ["I don\u2019t see the Accept button. Let me scroll to the Accept button."] * 4
    assert (
        scan(run(banner(missing)), Config()).to_dict()["findings"]
        == (
            scan(run(banner([m.replace("\u2019", "'") for m in missing])), Config()).to_dict()[
                "findings"
            ]
        )
    )


def test_identical_clicks_whose_narration_names_something_new_each_time_are_progress() -> None:
    skins = [
        "DYNASTY AHRI", "MIDNIGHT AHRI", "FOXFIRE AHRI", "POPSTAR AHRI", "ARCADE AHRI",
        "STAR GUARDIAN AHRI", "K/DA AHRI", "ELDERWOOD AHRI", "COVEN AHRI", "ARCANA AHRI",
    ]  # fmt: skip
    notes = [
        f"Now I see {s} appeared. The right arrow is still active. Let me continue." for s in skins
    ]
    assert scan(run(banner(notes)), Config()).verdict == "ok"
    counter = [f'It shows "{n}+" for baths now. Let me click "+" again.' for n in (1, 2, 3, 4)]
    assert scan(run(banner(counter)), Config()).verdict == "ok"


def test_paging_to_pages_that_still_lack_what_is_sought_is_progress() -> None:
    """The same "Next" click, and a narration with failure words each time, but each
    names a page not named before: the view moved. Naming the same page again is no
    progress."""
    paging = [
        f"Page {p} still doesn't mention the opening hours. Let me go on." for p in range(2, 8)
    ]
    assert scan(run(banner(paging)), Config()).verdict == "ok"
    stuck = ["Page 2 still doesn't mention the opening hours. Let me click Next again."] * 5
    assert scan(run(banner(stuck)), Config()).first_stop is not None


def test_a_retry_that_works_on_the_third_click_is_never_stopped() -> None:
    notes = [
        "The dropdown didn't open. Let me click more precisely on Sort.",
        "It still didn't open. Let me try once more.",
        "The dropdown is now open, showing Newest, Oldest and Nearest.",
        "Nearest is now selected and 40 results are listed.",
    ]
    assert scan(run(banner(notes)), Config()).first_stop is None


def test_scrolls_over_content_the_narration_does_not_describe_are_no_evidence() -> None:
    events: Events = [TASK]
    for _ in range(10):
        events += [{"kind": "tool_call", "name": "scroll", "args": {"delta_x": 0, "delta_y": 600}},
                   said("Let me continue scrolling.")]  # fmt: skip
    assert scan(run(events), Config()).verdict == "ok"


def test_a_failure_the_agent_says_keeps_recurring() -> None:
    events: Events = [TASK]
    for x, note in ((120, "The menu keeps collapsing. Let me expand it again."),
                    (180, "Now the list is visible."),
                    (260, "It keeps collapsing every time I pick an option.")):  # fmt: skip
        events += [click(x, 300), said(note)]
    report = scan(run(events), Config(), detectors=[NoEffect()])
    assert [f.severity.value for f in report.findings] == ["warn", "stop"]


def test_a_name_reported_missing_again_and_again() -> None:
    events: Events = [TASK]
    for i in range(5):
        events += [
            click(100 + 50 * i, 700),
            said(f'I scrolled to Job Type {i}. I don\'t see "Part-Time" there.'),
        ]
    report = scan(run(events), Config(), detectors=[NoEffect()])
    assert [f.severity.value for f in report.findings] == ["warn", "stop"]
    assert "'part-time' missing" in report.findings[-1].message.lower()


def test_actions_whose_results_the_trace_holds_are_left_to_the_result_detectors() -> None:
    page = "Page: cookie settings. A banner reads 'We use cookies' with Accept All, Reject."
    events: Events = [TASK]
    for note in STUCK:
        events += [click(973, 761), {"kind": "tool_result", "name": "click", "text": page},
                   said(note)]  # fmt: skip
    assert not any(f.detector == "no_effect" for f in scan(run(events), Config()).findings)


def test_a_result_that_only_acknowledges_the_action_is_no_result() -> None:
    """ "Clicked" says the click was made, not what the screen shows after it: the
    narration is the observation, as for a screenshot agent."""
    events: Events = [TASK]
    for note in STUCK:
        events += [click(973, 761), {"kind": "tool_result", "name": "click", "text": "Clicked"},
                   said(note)]  # fmt: skip
    report = scan(run(events), Config())
    assert [f.detector for f in report.findings][:2] == ["no_effect", "no_effect"]


def test_an_image_only_result_is_no_result() -> None:
    events: Events = [TASK]
    for note in STUCK:
        events += [click(973, 761), {"kind": "tool_result", "name": "click", "unknown": ["text"]},
                   said(note)]  # fmt: skip
    assert scan(run(events), Config()).first_stop is not None


SCREENSHOT = [{"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                          "data": "iVBORw0KGgo"}}]  # fmt: skip


def test_a_screenshot_recorded_as_the_result_is_no_result() -> None:
    # a computer-use tool whose result is content blocks holding only an image (Claude
    # Code's transcripts and hooks, computer-use loops): unknown text, never "the same
    # result", whatever the image blocks say (exporters often leave the pixels out)
    def scrolls(notes: list[str]) -> Events:
        events: Events = [TASK]
        for i, note in enumerate(notes):
            action = {"action": "scroll", "coordinate": [640, 400], "scroll_direction": "down"}
            events += [
                {"kind": "tool_call", "name": "computer", "args": action, "id": f"s{i}"},
                tool_result("computer", f"s{i}", SCREENSHOT, None),
                said(note),
            ]
        return events

    assert tool_result("computer", "s0", SCREENSHOT, None)["unknown"] == ["text"]
    reading = scan(run(scrolls(["I scroll down to see more of the page."] * 8)), Config())
    assert reading.findings == []
    # the same click the narration says did nothing is still caught, by the narration
    events: Events = [TASK]
    for note in STUCK:
        events += [click(973, 761), tool_result("click", None, SCREENSHOT, None), said(note)]
    report = scan(run(events), Config())
    assert report.first_stop is not None
    assert {f.detector for f in report.findings} == {"no_effect"}


def test_reading_a_narration() -> None:
    known: dict[int, None] = {}
    stuck = read("The banner is still there. Let me try clicking it again.", known)
    assert stuck.failed and not stuck.progress
    moved = read('I can see "Opening hours: 9-17" now. Let me note it.', known)
    assert moved.progress and moved.novel and not moved.failed
    worked = read("The filter is now applied. Let me sort the results.", known)
    assert worked.progress and not worked.novel
    recurs = read("It keeps redirecting me to the search page.", known)
    assert recurs.recurs and recurs.failed
    paged = read("Page 4 of 9 still doesn't show the hours. Let me click Next.", known)
    assert paged.progress and not paged.failed


@settings(max_examples=60, deadline=None)
@given(
    notes=st.lists(
        st.sampled_from([*STUCK, "Now I see Room 12 listed.", "Let me look."]), max_size=12
    )
)
def test_guard_and_scan_agree_step_for_step(notes: list[str]) -> None:
    events = banner(notes)
    report = scan(run(events), Config())
    guard = Guard(Config())
    actions = [str(guard.observe("n", ev).action) for ev in events]
    assert next((i for i, a in enumerate(actions) if a == "stop"), None) == report.first_stop
    assert next((i for i, a in enumerate(actions) if a != "ok"), None) == report.first_warn
