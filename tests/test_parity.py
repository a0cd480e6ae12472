"""One engine, two doors: the offline scan equals a fresh guard fed the same events.

Also the two properties a shared store relies on: the state survives a JSON round
trip between any two steps without changing a single finding, and it stays bounded
however long the run.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from loopwatch import Config, Guard, scan
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.scan import _breakdown, score_of
from loopwatch.state import RunState

PLAN = (
    "I will analyze the requirements, then consider the options, and choose the most "
    "appropriate solution for the parser module based on the constraints."
)
TEXTS = ["", "ok", "Let me look.", PLAN, PLAN.replace("then", "and then"), "done " * 60]


@st.composite
def events(draw: Any) -> dict[str, Any]:
    kind = draw(st.sampled_from(["tool_call", "tool_result", "model", "span", "user", "other"]))
    ev: dict[str, Any] = {"kind": kind}
    if kind == "tool_call":
        ev["name"] = draw(st.sampled_from(["search", "fetch", "run"]))
        ev["args"] = {"q": draw(st.sampled_from(["paris", "Paris ", "lyon", "x"]))}
        if draw(st.booleans()):
            ev["id"] = f"c{draw(st.integers(0, 5))}"
    elif kind == "tool_result":
        ev["name"] = draw(st.sampled_from(["search", "fetch", "run", None]))
        ev["text"] = draw(st.sampled_from(["18C", "", "error: boom", "page 2", "ok"]))
        ev["error"] = draw(st.booleans())
        if draw(st.booleans()):
            ev["id"] = f"c{draw(st.integers(0, 5))}"
    elif kind == "model":
        ev["text"] = draw(st.sampled_from(TEXTS))
        agent = draw(st.sampled_from([None, "writer", "manager"]))
        if agent:
            ev["agent"] = agent
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
on_loops = st.sampled_from(["stop", "skip", "warn"])


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run_events=runs, on_loop=on_loops)
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
        if verdict.action in ("stop", "skip") and first_stop is None:
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
