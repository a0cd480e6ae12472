"""One engine, two doors: the offline scan equals a fresh guard fed the same events.

Also the two properties a shared store relies on: the state survives a JSON round
trip between any two steps without changing a single finding, and it stays bounded
however long the run.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
from conftest import load_scenarios
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_redact import CASES

from loopwatch import Config, Guard, read_runs, scan
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.hooks._dispatch import handle
from loopwatch.hooks._events import result_text
from loopwatch.scan import _breakdown, score_of
from loopwatch.state import RunState
from loopwatch.traces import InputError

PLAN = (
    "I will analyze the requirements, then consider the options, and choose the most "
    "appropriate solution for the parser module based on the constraints."
)
TEXTS = [
    "", "ok", "Let me look.", PLAN, PLAN.replace("then", "and then"), "done " * 60,
    "Please open the price list and find the cheapest item.",
    PLAN.replace("parser", "lexer"),  # a restatement that takes up a user's word
    # long messages: the same preamble, then a payload that differs (or not)
    PLAN * 12 + "x = 1\n" * 300, PLAN * 12 + "x = 2\n" * 300,
]  # fmt: skip
# Two screens of one address (a page re-read and a scrolled one), as browser tools echo them
_PAGE = "Here is a screenshot of [Shop](https://shop.example.com/list). " + " ".join(
    f"item{i} price{i * 3}" for i in range(40)
)
RESULTS: list[Any] = [
    "18C", "", "error: boom", "Error: no seats", "No results found.", "page 2", "ok",
    _PAGE, _PAGE.replace("item3 ", "itemthree "), _PAGE.replace("item", "entry"),
    "Already at the bottom of the page",  # a scroll's limit
]  # fmt: skip
# Results the trace holds no text of (their keys are random: equal to nothing, not even
# in a replay of the same run, so only verdicts are compared where they occur): a
# scroll's acknowledgement, a screenshot as content blocks and as their JSON.
UNKNOWN_RESULTS: list[Any] = [
    "Scrolled down the page by one page",
    [{"type": "image", "source": {"type": "base64"}}],
    '[{"type": "input_image"}]',
]
USER_TEXTS = [
    "I'll check later, thanks", "My booking is AB123", "Please try again", "",
    "And what about the lexers?",
]  # fmt: skip


@st.composite
def events(draw: Any, unknowns: bool = False) -> dict[str, Any]:
    kind = draw(st.sampled_from(["tool_call", "tool_result", "model", "span", "user", "other"]))
    ev: dict[str, Any] = {"kind": kind}
    if kind == "tool_call":
        # a scroll's short answer is an acknowledgement, read as unknown
        names = ["search", "fetch", "run", "think"] + (["scroll_down"] if unknowns else [])
        ev["name"] = draw(st.sampled_from(names))
        # the last three: another question, and two rewordings of one (futility)
        queries = ["paris", "Paris ", "lyon", "x", "lyon rain", "paris rain", "paris rain now"]
        ev["args"] = {"q": draw(st.sampled_from(queries))}
        if draw(st.booleans()):
            ev["args"]["description"] = draw(st.sampled_from(["look it up", "again"]))
        if draw(st.booleans()):
            ev["id"] = f"c{draw(st.integers(0, 5))}"
    elif kind == "tool_result":
        ev["name"] = draw(st.sampled_from(["search", "fetch", "run", "think", "scroll_down", None]))
        ev["text"] = draw(st.sampled_from(RESULTS + UNKNOWN_RESULTS if unknowns else RESULTS))
        flag = draw(st.sampled_from([True, False, None]))  # None: not recorded
        if flag is not None:
            ev["error"] = flag
        if draw(st.booleans()):
            ev["id"] = f"c{draw(st.integers(0, 5))}"
    elif kind == "model":
        ev["text"] = draw(st.sampled_from(TEXTS))
        if draw(st.booleans()):
            ev["tokens"] = 120  # spend: spend_velocity reads the run's outputs
        agent = draw(st.sampled_from([None, "writer", "manager"]))
        if agent:
            ev["agent"] = agent
        ev["to"] = draw(st.sampled_from([None, "user", "writer"]))
    elif kind == "user":
        ev["text"] = draw(st.sampled_from(USER_TEXTS))
    elif kind == "span":
        ev["id"] = f"s{draw(st.integers(0, 6))}"
        ev["name"] = draw(st.sampled_from(["planner", "researcher"]))
        ev["type"] = "agent"
        ev["text"] = draw(st.sampled_from(["plan", "find x"]))
        parent = draw(st.one_of(st.none(), st.integers(0, 6)))
        if parent is not None:
            ev["parent"] = f"s{parent}"
    return {k: v for k, v in ev.items() if v is not None}


runs = st.lists(events(), max_size=80)
runs_with_unknowns = st.lists(events(unknowns=True), max_size=80)
on_loops = st.sampled_from(["stop", "skip", "warn"])


_SEARCH = {"kind": "tool_call", "name": "search", "args": {"q": "paris"}}
_FETCH = {"kind": "tool_call", "name": "fetch", "args": {"q": "paris"}}
_FETCHED = {"kind": "tool_result", "name": "fetch", "text": "18C", "error": False}


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_events=runs_with_unknowns, on_loop=on_loops)
# a told skip (found by hypothesis): the warning, not the stop, in both
@example(run_events=[_SEARCH] * 4 + [_FETCH, _FETCH, _FETCHED, _FETCHED, _FETCH], on_loop="stop")
def test_scan_equals_guard_replay(run_events: list[dict[str, Any]], on_loop: str) -> None:
    config = Config.from_mapping({"on_loop": on_loop})
    report = scan({"run_id": "r", "events": run_events}, config)
    guard = Guard(config)
    findings = []
    first_warn = first_stop = None
    for step, ev in enumerate(run_events):
        verdict = guard.observe("r", ev)
        assert verdict.step == step
        findings.extend(verdict.findings)
        if verdict.action != "ok" and first_warn is None:
            first_warn = step
        # a skip blocks when a detector is sure; the skip that tells the agent first
        # (its findings all warnings) is the warning, in the scan as in the guard
        sure = any(f.severity.value == "stop" for f in verdict.findings)
        if first_stop is None and (verdict.action == "stop" or (verdict.action == "skip" and sure)):
            first_stop = step
    # The report lists each (detector, pattern, severity) once, at its first report,
    # with how many times the guard reported it and when last.
    merged: dict[tuple[str, str, str], list[Any]] = {}
    for f in findings:
        key = (f.detector, f.pattern, f.severity.value)
        if key in merged:
            merged[key][1] += 1
            merged[key][2] = f.step
        else:
            merged[key] = [f, 1, f.step]
    assert report.findings == [m[0] for m in merged.values()]
    assert report.occurrences == [(m[1], m[2]) for m in merged.values()]
    assert sum(count for count, _ in report.occurrences) == len(findings)
    # the score counts every reported stop, as before merging
    assert report.score == score_of(report.verdict, _breakdown(findings))
    assert (report.first_warn, report.first_stop) == (first_warn, first_stop)
    if report.first_stop is not None:
        assert report.first_warn is not None and report.first_warn <= report.first_stop


@settings(max_examples=150, deadline=None)
@given(run_events=runs)
@example(  # the user's words, read from a shipped state only as marks (stagnation)
    run_events=[
        {"kind": "model", "text": PLAN},
        {"kind": "user", "text": "And what about the lexers?"},
        {"kind": "model", "text": PLAN.replace("parser", "lexer")},
        {"kind": "user", "text": "Please try again"},
        {"kind": "model", "text": PLAN.replace("parser", "lexer")},
    ]
)
def test_state_survives_a_bytes_round_trip_between_steps(run_events: list[dict[str, Any]]) -> None:
    engine = Engine(Config().detectors())
    plain, shipped = new_state(), new_state()
    for ev in run_events:
        direct = engine.step(plain, Event.from_dict(ev))
        shipped = RunState.from_bytes(shipped.to_bytes())
        via_store = engine.step(shipped, Event.from_dict(ev))
        assert direct == via_store
    assert plain == shipped and plain.to_bytes() == shipped.to_bytes()


@settings(max_examples=30, deadline=None)
@given(run_events=st.lists(events(), min_size=200, max_size=400))
def test_state_stays_bounded(run_events: list[dict[str, Any]]) -> None:
    engine = Engine(Config().detectors())
    state = new_state()
    for _ in range(5):  # the same random material, five times over
        for ev in run_events:
            engine.step(state, Event.from_dict(ev))
    assert len(state.to_bytes()) < 64_000
    assert len(state.calls) <= 32


# -- redaction: the same message through every door, and never a different verdict -------
_SEVERITY = {"ok": 0, "warn": 1, "skip": 2, "stop": 3}


def _hook_message(stdout: str) -> str:
    """The message a Claude Code hook answer hands the agent ("" for none)."""
    if not stdout.strip():
        return ""
    out = orjson.loads(stdout)
    specific = out.get("hookSpecificOutput", {})
    return str(specific.get("permissionDecisionReason") or specific.get("additionalContext") or "")


def test_a_call_with_a_secret_reads_the_same_in_the_guard_the_hooks_and_the_scan(
    tmp_path: Path,
) -> None:
    """Each covered format in a looping shell command: the hooks (state in SQLite, as
    ``loopwatch install claude-code`` sets them up), a guard fed the events the hooks
    feed, and the scan of that run quote the call alike, and never its secret."""
    config = Config.from_mapping({"on_loop": "warn"})
    for n, (fmt, command, secret) in enumerate(CASES):
        store = f"sqlite://{tmp_path / f'state-{n}.db'}"
        guard = Guard(config)
        events: list[dict[str, Any]] = []
        for i in range(5):
            call = {"session_id": "s", "cwd": str(tmp_path), "tool_name": "Bash",
                    "tool_input": {"command": command}, "tool_use_id": f"u{i}"}  # fmt: skip
            result = {"stdout": "permission denied", "stderr": ""}
            for payload, fed in (
                (
                    {**call, "hook_event_name": "PreToolUse"},
                    [{"kind": "model", "unknown": ["text"]},
                     {"kind": "tool_call", "name": "Bash", "args": {"command": command},
                      "id": f"u{i}"}],
                ),
                (
                    {**call, "hook_event_name": "PostToolUse", "tool_response": result},
                    [{"kind": "tool_result", "name": "Bash", "id": f"u{i}",
                      "text": result_text(result)}],
                ),
            ):  # fmt: skip
                hook = handle("claude-code", payload, lambda p, url=store: Guard(config, store=url))
                verdicts = [guard.observe("r", ev) for ev in fed]
                events.extend(fed)
                worst = max(verdicts, key=lambda v: _SEVERITY[str(v.action)])
                expected = worst.message if worst.action != "ok" else ""
                assert _hook_message(hook.stdout) == (expected or ""), fmt
                assert secret not in hook.stdout, fmt
        report = scan({"run_id": "r", "events": events}, config)
        assert any("Bash(" in f.message for f in report.findings), fmt  # the call is quoted
        replayed = Guard(config)
        messages = {
            f.message for ev in events for f in replayed.observe("r", ev).findings
        }  # fmt: skip
        assert {f.message for f in report.findings} <= messages, fmt
        assert not any(secret in m for m in messages), fmt


def _verdicts(config: Config, runs: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    out = []
    for run in runs:
        report = scan(run, config)
        out.append(
            (
                report.verdict,
                report.score,
                report.first_warn,
                report.first_stop,
                [(f.detector, f.severity, f.step, f.steps, f.pattern) for f in report.findings],
            )
        )
    return out


def _replay_runs() -> list[dict[str, Any]]:
    """The conformance scenarios and, when it is here, the recorded corpus."""
    runs = (
        load_scenarios()
        + load_scenarios("intent.jsonl")
        + load_scenarios("semantic_scenarios.jsonl")
    )
    corpus = Path(__file__).resolve().parents[3] / "shared" / "corpus"
    if not corpus.is_dir():
        corpus = Path("/work/shared/corpus")
    paths = sorted(str(p) for p in corpus.glob("*.jsonl"))
    runs += [r.to_dict() for r in read_runs(paths) if not isinstance(r, InputError)]
    return runs


def test_redaction_never_changes_a_verdict_on_a_corpus_replay() -> None:
    """Redaction shapes only what is shown: a pattern that redacts every word of every
    preview and message leaves every verdict, score, first warning and stop, and every
    finding's detector, severity, steps and pattern as they were."""
    runs = _replay_runs()
    plain = Config.from_mapping({"on_loop": "warn"})
    everything = Config.from_mapping({"on_loop": "warn", "redact": {"patterns": [r"\w+"]}})
    assert _verdicts(plain, runs) == _verdicts(everything, runs)
    shown = [f.message for run in runs[:40] for f in scan(run, everything).findings]
    assert shown and not any(re.search(r"\w", m.replace("redacted", "")) for m in shown)


def test_fingerprints_read_the_original_values_not_the_redacted_preview() -> None:
    """Two calls that differ only by their secret look alike once redacted, and are
    still two different calls: the same command with a new token each time is not
    one call repeated, the same token each time is."""

    def run(tokens: list[str]) -> str:
        events = []
        for i, token in enumerate(tokens):
            events += [
                {"kind": "tool_call", "name": "Bash", "id": f"c{i}",
                 "args": {"command": f"curl -H 'Authorization: Bearer {token}' https://x"}},
                {"kind": "tool_result", "name": "Bash", "id": f"c{i}", "text": "401"},
            ]  # fmt: skip
        return scan({"run_id": "r", "events": events}).verdict

    fresh = [f"tok{i}x{'7' * 20}" for i in range(6)]
    assert run([fresh[0]] * 6) == "stop"
    assert run(fresh) != "stop"
