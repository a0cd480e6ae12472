"""Futility: repeated intent caught by its outcome, and the look-alikes that are progress."""

from __future__ import annotations

import re
from typing import Any

from hypothesis import given
from hypothesis import strategies as st
from runs import Events, model, run, tool

from loopwatch import Config, Futility, Report, scan
from loopwatch.events import Event
from loopwatch.fingerprints import is_noop_command, outcome_signature, shell_command


def only(events: Events, **kw: int) -> Report:
    return scan(run(events), Config(), detectors=[Futility(**kw)])


def firsts(report: Report) -> tuple[int | None, int | None]:
    return report.first_warn, report.first_stop


# -- what counts as the same outcome --------------------------------------------------
def test_an_error_in_new_words_has_one_signature() -> None:
    a = "psql: connection refused (took 31 ms, pid 4410) at /tmp/tmpab3k29/sock"
    b = "psql: connection refused (took 38 ms, pid 4423) at /tmp/tmpzz3k11/sock"
    assert outcome_signature(a, error=True) == outcome_signature(b, error=True)
    echo_a = "bash: syntax error near unexpected token `:) done'"
    echo_b = "bash: syntax error near unexpected token `:) doing so'"
    assert outcome_signature(echo_a, error=True) == outcome_signature(echo_b, error=True)


def test_a_clipped_last_word_does_not_make_two_copies_differ() -> None:
    a = "String to replace not found in file.\nString: def parse(s):\n    re"
    b = "String to replace not found in file.\nString: def parse(s):\n     r"
    assert outcome_signature(a, True) == outcome_signature(b, True)


def test_outcomes_that_differ_stay_different() -> None:
    assert outcome_signature("3 failed, 9 passed") != outcome_signature("1 failed, 4 passed")
    # in a successful output, large numbers can be the progress itself
    assert outcome_signature("processed 1200 rows") != outcome_signature("processed 2400 rows")
    assert outcome_signature("x", error=True) != outcome_signature("x", error=False)
    # timings are masked everywhere
    assert outcome_signature("1 failed in 0.41s") == outcome_signature("1 failed in 0.38s")


def test_errors_share_their_signature_as_result_key() -> None:
    a = Event("tool_result", "sh", text="boom (pid 4410)", error=True)
    b = Event("tool_result", "sh", text="boom (pid 4423)", error=True)
    assert a.result_key == b.result_key and a.result_key.startswith("E")
    ok = Event("tool_result", "sh", text="boom (pid 4410)")
    assert not ok.result_key.startswith("E")


def test_shell_no_ops() -> None:
    for cmd in (":", ": 'checking'", "true", "true # wait", "   ", ": a; true", "# note"):
        assert is_noop_command(cmd), cmd
    # a first word starting with ':' names no program: the shell runs nothing
    for cmd in (":ls -la", ":) done", ":4precision"):
        assert is_noop_command(cmd), cmd
    for cmd in ("ls", "true && make", ": ok; make", "echo :)", "x:y"):
        assert not is_noop_command(cmd), cmd
    assert shell_command({"command": ":"}) == ":"
    assert shell_command('{"cmd": "ls"}') == "ls"
    assert shell_command({"q": "x"}) is None and shell_command(None) is None


@given(st.text(max_size=300), st.booleans())
def test_signature_is_stable_and_never_raises(text: str, error: bool) -> None:
    assert outcome_signature(text, error) == outcome_signature(text, error)


# -- the detector ----------------------------------------------------------------------
def test_no_op_commands_warn_at_the_second_and_stop_at_the_third() -> None:
    events: Events = tool("Read", {"file_path": "/a"}, "the spec: build a parser")
    for cmd in (":", ": 'checking'", "true", ":"):
        events += tool("Bash", {"command": cmd}, "")
    report = only(events)
    assert firsts(report) == (5, 7)
    stop = next(f for f in report.findings if f.severity.value == "stop")
    assert stop.steps == (3, 5, 7)
    assert "':'" in stop.message and "does nothing" in stop.message


def test_the_same_failure_from_varied_commands_stops() -> None:
    events: Events = []
    for i, cmd in enumerate(["pytest t.py", "pytest -x t.py", "python -m pytest t.py"] * 2):
        events += [model("Running the tests.")]
        events += tool("Bash", {"command": cmd}, f"FAILED t.py::x\n1 failed in 0.{i}1s", True)
    # the first failure is news; the 2nd..6th are the same outcome
    report = only(events)
    assert firsts(report) == (11, 17)


def test_a_real_change_between_attempts_resets_the_count() -> None:
    events: Events = []
    for i in range(8):
        events += tool("Bash", {"command": "make"}, "error: undefined reference", True)
        events += tool("Edit", {"file_path": "/app/m.c", "new_string": f"v{i}"}, "ok")
    assert firsts(only(events)) == (None, None)


def test_re_applying_the_same_edit_is_not_progress() -> None:
    events: Events = []
    for _ in range(6):
        events += tool("Bash", {"command": "make"}, "error: undefined reference", True)
        events += tool("Edit", {"file_path": "/app/m.c", "new_string": "v1"}, "ok")
    first_warn, first_stop = firsts(only(events))
    assert first_warn is not None and first_stop is not None


def compare_by_reverting(events: Events) -> Events:
    """Fix, test (passes), revert the fix (the test fails again), re-apply it (passes):
    what an agent does to check that its fix is what makes the test pass."""
    fix = {"file_path": "/app/m.py", "old_string": "a", "new_string": "b"}
    revert = {"file_path": "/app/m.py", "old_string": "b", "new_string": "a"}
    for edit in (fix, revert, fix):
        events += tool("Edit", edit, "ok")
        passed = edit is fix
        events += tool("Read", {"file_path": "/app/m.py"}, "b = 1" if passed else "a = 1")
        events += tool("Bash", {"command": "pytest t.py"}, "1 passed" if passed else "1 failed")
    return events


def test_a_fix_reverted_and_re_applied_to_compare_is_not_futile() -> None:
    start: Events = tool("Bash", {"command": "pytest t.py"}, "1 failed")
    # the re-applied fix, the file read again, the test passing again: each an outcome
    # seen before, but each moved since the same call's last result
    assert firsts(only(compare_by_reverting(start))) == (None, None)


def test_a_toggle_flipping_back_and_forth_is_still_futile() -> None:
    """The same call back to back whose result flips: no work in between moved it."""
    events: Events = []
    for i in range(10):
        events += tool("toggle", {"room": "kitchen"}, "on" if i % 2 == 0 else "off")
    first_warn, first_stop = firsts(only(events))
    assert first_warn is not None and first_stop is not None


def test_flip_flopping_between_two_fixes_is_still_futile() -> None:
    """Each return of the test's outcome is excused, but the re-applied edits are the
    same calls with the same "ok": no new change, again and again."""
    events: Events = tool("Bash", {"command": "pytest t.py"}, "1 failed")
    for _ in range(4):
        events = compare_by_reverting(events)
    first_warn, first_stop = firsts(only(events))
    assert first_warn is not None and first_stop is not None


def reproduce(events: Events, migrate_says: str) -> Events:
    """A reproduction: clean up, write the models, migrate, change them, migrate."""
    events += tool("Bash", {"command": "rm -f db.sqlite3"}, "")
    events += tool("Write", {"file_path": "models.py", "content": "class A: x = 1"}, "ok")
    events += tool("Bash", {"command": "python manage.py migrate"}, "Applied 0001_initial")
    events += tool("Write", {"file_path": "models.py", "content": "class A: pass"}, "ok")
    events += tool("Bash", {"command": "python manage.py migrate"}, migrate_says)
    return events


def test_a_reproduction_re_run_after_a_fix_is_not_futile() -> None:
    """Its cleanup and file writes are the very calls of the first time: each "ok" is
    news again, since the fix in between may change what they lead to."""
    events = reproduce([], "FieldError: clash on field x")
    events += tool("Edit", {"file_path": "autodetector.py", "new_string": "fix"}, "ok")
    events = reproduce(events, "Applied 0002_auto")
    assert firsts(only(events)) == (None, None)


def test_a_reproduction_re_run_a_third_time_unchanged_is_futile() -> None:
    events = reproduce([], "FieldError: clash on field x")
    for i in range(3):
        events += tool("Edit", {"file_path": "autodetector.py", "new_string": f"fix {i}"}, "ok")
        events = reproduce(events, "FieldError: clash on field x")
    assert firsts(only(events))[0] is not None


def asked(name: str, queries: list[str], answer: str) -> Events:
    """Each query asked after reading the answer to the one before it."""
    events: Events = []
    for q in queries:
        events += [model(f"I need to search {q!r} instead.")]
        events += tool(name, {"query": q}, answer.format(q=q))
    return events


def test_a_question_reworded_and_answered_the_same_each_time_stops() -> None:
    """The agent reads the answer, changes a word or two, and the tool says the same
    thing again: each rewording weighs as a no-op, so the 3rd answer warns and the 4th
    (after the warning) stops. Counted as plain repeats it would only warn at the 4th."""
    queries = [
        "famous songs by Arun Date",
        "famous songs by Arun Date in India",
        "famous Marathi songs by Arun Date",
        "famous Marathi songs by singer Arun Date",
    ]
    events = asked("search", queries, "Could not find [{q}]. Similar: ['Indian folk music']")
    assert firsts(only(events)) == (8, 11)


def test_other_questions_answered_with_the_same_page_are_not_rewordings() -> None:
    """A plan moving on (temples, then Arashiyama, then Gion) whose searches land on
    the same generic page: the words differ, so each repeat weighs one, not two."""
    queries = ["kyoto temples", "arashiyama bamboo grove", "gion restaurants", "kyoto hotels"]
    page = "1. Kyoto travel guide - kyoto.travel\n2. Top 10 things to do in Kyoto"
    assert only(asked("web_search", queries, page)).first_stop is None


def test_shell_commands_printing_the_same_line_are_not_rewordings() -> None:
    """Reproduction scripts varied to test a hypothesis print the same line: that
    confirms a finding, it does not re-ask a question."""
    events: Events = []
    for case in ("a", "b", "c", "d"):
        events += tool("Bash", {"command": f"python repro.py --case {case} --verbose"}, "ok: 3")
    assert only(events).first_stop is None


def test_a_reworded_call_made_before_the_answer_came_is_no_rewording() -> None:
    """Calls sent together in one turn did not read each other's answers."""
    events: Events = [model("Searching several phrasings at once.")]
    ids = [f"c{i}" for i in range(4)]
    queries = ["arun date songs", "arun date songs list", "arun date song list", "arun date hits"]
    for cid, q in zip(ids, queries, strict=True):
        events.append({"kind": "tool_call", "name": "search", "args": {"query": q}, "call_id": cid})
    for cid in ids:
        events.append({"kind": "tool_result", "name": "search", "text": "No page.", "call_id": cid})
    assert only(events).first_stop is None


def test_new_results_are_progress_even_from_one_command() -> None:
    events: Events = []
    for i in range(12):
        events += tool("status", {"job": "j"}, f"running, {i * 8}% done")
    assert firsts(only(events)) == (None, None)


def test_new_errors_are_neither_futile_nor_progress() -> None:
    events: Events = []
    for i in range(8):
        events += tool("Bash", {"command": f"try {i}"}, f"error {i}: {'xyz' * i}", True)
    assert firsts(only(events)) == (None, None)
    # ...but they do not hide the no-ops around them
    noops: Events = []
    for i in range(3):
        noops += tool("Bash", {"command": ":"}, "")
        noops += tool("Bash", {"command": f"try {i}"}, f"error {i}: {'xyz' * i}", True)
    assert firsts(only(noops))[1] is not None


def test_a_parallel_batch_of_failures_is_one_attempt() -> None:
    events: Events = [model("Searching the repo in six ways at once.")]
    for pattern in ("*.py", "*.yml", "*.json", "*.env", "*.toml", "*.cfg"):
        events += tool("Glob", {"pattern": pattern}, "spawn rg EACCES", True)
    assert firsts(only(events)) == (None, None)
    # the same failures from six separate turns are six attempts
    turns: Events = []
    for pattern in ("*.py", "*.yml", "*.json", "*.env", "*.toml", "*.cfg"):
        turns += [model("Trying another pattern.")]
        turns += tool("Glob", {"pattern": pattern}, "spawn rg EACCES", True)
    assert firsts(only(turns))[1] is not None


def test_the_user_repeating_an_answer() -> None:
    events: Events = []
    asks = ("Your order number?", "I need the order number.", "Order number, please?")
    for ask in (*asks, "What is the order number?", "Send the order number."):
        events += [model(ask), {"kind": "user", "text": "I told you: #W2378156."}]
    report = only(events)
    # the 2nd answer (step 3) is the first repeat; each repeat weighs 1.5
    assert firsts(report) == (5, 9)
    assert "user" in report.findings[0].message
    # new input from the user is progress
    events[-1] = {"kind": "user", "text": "Fine: it is W2378156, booked on May 3."}
    assert firsts(only(events)) == (5, None)


def test_unknown_arguments_are_never_a_no_op() -> None:
    events: Events = []
    for i in range(6):
        events += [{"kind": "tool_call", "name": "Bash"}]
        events += [{"kind": "tool_result", "name": "Bash", "text": f"output {i}"}]
    assert firsts(only(events)) == (None, None)


def test_state_stays_bounded() -> None:
    events: Events = []
    for i in range(2000):
        events += tool("Bash", {"command": ":" if i % 3 else f"cat f{i}"}, f"r{i % 500}")
    from loopwatch.engine import Engine, new_state

    engine = Engine([Futility()])
    state = new_state()
    for data in events:
        engine.step(state, Event.from_dict(data))
    slot = state.slots["futility"]
    assert len(slot.steps) <= 8 and len(slot.noops) <= 8


def test_identical_calls_in_one_turn_still_count() -> None:
    events: Events = [model("Trying again.")]
    for _ in range(6):
        events += tool("Bash", {"command": ", "}, "bash: ,: command not found", True)
    assert firsts(only(events))[1] is not None


def test_timing_fields_do_not_make_results_new() -> None:
    a = Event("tool_result", "Glob", text='No files found {"durationMs": 5, "numFiles": 0}')
    b = Event("tool_result", "Glob", text='No files found {"durationMs": 4, "numFiles": 0}')
    c = Event("tool_result", "Glob", text='No files found {"durationMs": 4, "numFiles": 1}')
    assert a.result_key == b.result_key != c.result_key


def test_the_environment_repeating_itself_with_nothing_else_changing() -> None:
    # ten context-window trims in a row: input from the environment, as user events
    events: Events = []
    for i in range(10):
        events += [{"kind": "user", "text": "[system] context window trimmed"}]
        events += [model(f"Continuing ({i}).")]
    report = only(events)
    assert report.first_stop is not None and report.first_warn is not None


def test_one_futile_step_of_a_kind_is_said_in_the_singular() -> None:
    """ "1 commands that do nothing" read badly in the message a model gets."""
    from loopwatch import Config, scan

    def bash(n: int, command: str, result: str, error: bool = False) -> list[dict[str, Any]]:
        call = {"kind": "tool_call", "name": "Bash", "args": {"command": command}, "id": f"c{n}"}
        out = {"kind": "tool_result", "name": "Bash", "text": result, "id": f"c{n}"}
        return [call, {**out, "error": error}]

    events = [
        *bash(1, "ls", "a b"),
        *bash(2, "make", "error: x failed", error=True),
        *bash(3, "make test", "error: x failed", error=True),  # the same outcome
        *bash(4, ":", ""),  # a command that does nothing
    ]
    report = scan({"run_id": "r", "events": events}, Config())
    messages = [f.message for f in report.findings if f.detector == "futility"]
    assert messages, report.findings
    assert any("1 command that does nothing" in m for m in messages), messages
    assert not any(re.search(r"\b1 (commands|outcomes|answers)\b", m) for m in messages)
