"""Spend without progress (SpendVelocity) and the hard budget caps."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import load_scenarios, meets_expectation
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch import Config
from loopwatch.detectors import default_detectors
from loopwatch.detectors.spend import CostBudget, SpendVelocity, TimeBudget, TokenBudget
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.findings import Severity
from loopwatch.scan import Scanner
from loopwatch.state import RunState
from loopwatch.text import fingerprint

SCENARIOS = {r["run_id"]: r for r in load_scenarios("semantic_scenarios.jsonl")}
CORPUS = Path(__file__).resolve().parents[3] / "shared" / "corpus"


def scan_with(run: dict[str, Any], *detectors: Any) -> tuple[int | None, int | None]:
    report = Scanner(Config(), detectors=list(detectors)).scan(run)
    return report.first_warn, report.first_stop


def turn(i: int, tokens: float, command: str, result: str, text: str = "") -> list[dict[str, Any]]:
    return [
        {"kind": "model", "text": text or f"turn {i}", "tokens": tokens, "cost": tokens * 1e-6},
        {"kind": "tool_call", "name": "bash", "args": {"command": command}, "id": f"c{i}"},
        {"kind": "tool_result", "name": "bash", "id": f"c{i}", "text": result},
    ]


def test_spend_without_news_is_caught_by_spend_velocity_alone() -> None:
    run = SCENARIOS["S-spend-no-news"]
    first_warn, first_stop = scan_with(run, SpendVelocity())
    assert not meets_expectation(run["expect"], first_warn, first_stop), (first_warn, first_stop)


@pytest.mark.parametrize(
    "run_id", ["S-productive-coding", "S-focused-research", "S-manager-worker-progress"]
)
def test_expensive_runs_that_bring_news_are_not_flagged(run_id: str) -> None:
    assert scan_with(SCENARIOS[run_id], SpendVelocity()) == (None, None)


def test_same_loop_without_spend_data_is_not_flagged() -> None:
    events = []
    for ev in SCENARIOS["S-spend-no-news"]["events"]:
        ev = dict(ev)
        ev.pop("tokens", None)
        ev.pop("cost", None)
        events.append(ev)
    assert scan_with({"run_id": "x", "events": events}, SpendVelocity()) == (None, None)


def test_quiet_streak_counts_spending_turns_and_reports_the_spend() -> None:
    events = turn(0, 100, "cat a", "A")
    for i in range(1, 12):
        events += turn(i, 100, "cat a", "A", text="checking again")
    report = Scanner(Config(), detectors=[SpendVelocity(warn_after=3, stop_after=6)]).scan(
        {"run_id": "q", "events": events}
    )
    warn = next(f for f in report.findings if f.severity is Severity.WARN)
    stop = next(f for f in report.findings if f.severity is Severity.STOP)
    # turn 1 follows the novel first call; turns 2.. are quiet: the 3rd quiet is turn 4
    assert warn.step == 4 * 3
    assert stop.step == 7 * 3
    assert "300 tokens" in warn.message and "nothing new" in warn.message


def test_a_new_result_resets_the_streak() -> None:
    events = turn(0, 100, "cat a", "A")
    for i in range(1, 30):
        # the same command, but its output changes every third turn
        events += turn(i, 100, "cat a", f"A{i // 3}", text="checking again")
    assert scan_with({"run_id": "r", "events": events}, SpendVelocity()) == (None, None)


ROLE = (
    "[Acme is a software company of intelligent agents: a chief executive officer, a chief "
    "technology officer, programmers and reviewers, whose mission is changing the digital "
    "world through programming. You are the Programmer; we both work at Acme.] "
) * 2


def test_new_code_after_the_same_long_opening_is_news() -> None:
    # a role-play's programmer: every message opens with its role's preamble (all of
    # what is read of its words) and goes on with a new version of the code
    events = [{"kind": "user", "text": "Write a 2048 game."}]
    for i in range(12):
        code = f"def move(grid):\n    return shift(grid, {i})\n" * 40
        events.append({"kind": "model", "agent": "dev", "text": ROLE + code, "tokens": 900})
    assert scan_with({"run_id": "rounds", "events": events}, SpendVelocity()) == (None, None)
    # the same long message again and again is spend without news
    same = events[:2] + [dict(events[1]) for _ in range(11)]
    first_warn, first_stop = scan_with({"run_id": "again", "events": same}, SpendVelocity())
    assert first_warn is not None and first_stop is not None


def test_thresholds_are_validated() -> None:
    with pytest.raises(ValueError, match="warn_after"):
        SpendVelocity(warn_after=0)
    with pytest.raises(ValueError, match="stop_after"):
        SpendVelocity(warn_after=5, stop_after=3)


words = st.text(alphabet="abcdefghij ", min_size=0, max_size=40)
event_strategy = st.one_of(
    st.fixed_dictionaries(
        {"kind": st.just("model"), "text": words},
        optional={"tokens": st.integers(0, 5000), "cost": st.floats(0, 1)},
    ),
    st.fixed_dictionaries(
        {"kind": st.just("tool_call"), "name": st.sampled_from(["a", "b"]), "args": words}
    ),
    st.fixed_dictionaries({"kind": st.just("tool_result"), "text": words}),
    st.fixed_dictionaries({"kind": st.just("user"), "text": words}),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(event_strategy, max_size=60))
def test_state_stays_json_and_stop_needs_a_long_quiet_streak(events: list[dict[str, Any]]) -> None:
    det = SpendVelocity(warn_after=3, stop_after=5)
    engine = Engine([det])
    state = new_state()
    spending = 0
    for raw in events:
        ev = Event.from_dict(raw)
        for finding in engine.step(state, ev):
            # a finding rests on at least warn_after quiet spending steps
            assert len(finding.steps) >= 3
            if finding.severity is Severity.STOP:
                assert spending >= 6  # the first spending step can never be quiet
        spending += ev.tokens > 0 or ev.cost > 0
        assert RunState.from_bytes(state.to_bytes()) == state


def test_state_is_bounded_on_a_long_run() -> None:
    engine = Engine([SpendVelocity()])
    state = new_state()
    for i in range(3000):
        text = " ".join(f"word{i}x{j}" for j in range(20))
        for raw in turn(i, 50, f"cmd {i}", f"out {i}", text=text):
            engine.step(state, Event.from_dict(raw))
    assert len(orjson.dumps(state.slots["spend_velocity"].dump())) < 12_000


def test_token_budget_warns_once_then_stops_past_the_cap() -> None:
    events = [{"kind": "model", "text": "x", "tokens": 100} for _ in range(12)]
    report = Scanner(Config(), detectors=[TokenBudget(max_tokens=1000)]).scan(
        {"run_id": "t", "events": events}
    )
    warns = [f.step for f in report.findings if f.severity is Severity.WARN]
    stops = [
        (f.step, occurrences)
        for f, occurrences in zip(report.findings, report.occurrences, strict=True)
        if f.severity is Severity.STOP
    ]
    assert warns == [7]  # 800 tokens = 80% of the cap
    assert stops == [(10, (2, 11))]  # 1100 and 1200 tokens: one stop, reported twice


def test_cost_budget_counts_cost_anywhere() -> None:
    events = [{"kind": "tool_result", "text": "x", "cost": 0.5}] * 3
    first_warn, first_stop = scan_with({"run_id": "c", "events": events}, CostBudget(max_cost=1))
    assert (first_warn, first_stop) == (1, 2)  # 1.0 reaches 80% of the cap; 1.5 is past it


def test_time_budget_uses_event_timestamps_when_present() -> None:
    events = [
        {"kind": "model", "text": "a", "ts": "2025-01-01T00:00:00Z"},
        {"kind": "model", "text": "b", "ts": "2025-01-01T00:00:50Z"},
        {"kind": "model", "text": "c", "ts": 1735689661.0},  # 00:01:01
    ]
    first_warn, first_stop = scan_with({"run_id": "w", "events": events}, TimeBudget(60))
    assert (first_warn, first_stop) == (1, 2)


def test_time_budget_falls_back_to_the_clock() -> None:
    now = [1000.0]
    det = TimeBudget(max_seconds=10, clock=lambda: now[0])
    engine = Engine([det])
    state = new_state()
    assert engine.step(state, Event("model", text="a")) == []
    now[0] = 1011.0
    (finding,) = engine.step(state, Event("model", text="b"))
    assert finding.severity is Severity.STOP and "11 s" in finding.message
    assert RunState.from_bytes(state.to_bytes()) == state


@pytest.mark.parametrize("factory", [TokenBudget, CostBudget, TimeBudget])
def test_caps_need_a_limit(factory: Any) -> None:
    with pytest.raises(ValueError, match="needs a positive"):
        factory()


def test_default_configuration_still_passes_conformance() -> None:
    for run in load_scenarios():
        report = Scanner(Config()).scan(run)
        assert not meets_expectation(run["expect"], report.first_warn, report.first_stop), run[
            "run_id"
        ]


def test_conformance_holds_with_the_lexical_layers_on_by_default() -> None:
    """SpendVelocity and lexical PingPong are in the default set, which still meets
    every conformance expectation (and a detector cannot be added twice)."""
    dets = list(default_detectors())
    assert {"spend_velocity", "ping_pong"} <= {d.name for d in dets}
    for run in load_scenarios():
        report = Scanner(Config(), detectors=dets).scan(run)
        assert not meets_expectation(run["expect"], report.first_warn, report.first_stop), run[
            "run_id"
        ]
    with pytest.raises(ValueError, match="share the name"):
        Scanner(Config(), detectors=[*dets, SpendVelocity()])


def _solved(meta: dict[str, Any]) -> bool:
    return (
        meta.get("resolved") is True or meta.get("reward") == 1 or meta.get("task_solved") is True
    )


@pytest.mark.skipif(not (CORPUS / "mini_swe_agent.jsonl").is_file(), reason="corpus not found")
def test_no_warn_or_stop_on_solved_corpus_runs() -> None:
    """The corpus runs with spend data (mini_swe_agent): SpendVelocity never fires on
    a resolved run, so it can be on by default."""
    scanner = Scanner(Config(), detectors=[SpendVelocity()])
    solved = flagged = 0
    with open(CORPUS / "mini_swe_agent.jsonl", encoding="utf-8") as fh:
        for line in fh:
            run = json.loads(line)
            if not _solved(run.get("meta") or {}):
                continue
            solved += 1
            report = scanner.scan(run)
            if report.first_warn is not None:
                flagged += 1
    assert solved > 100
    assert flagged == 0


# -- the new-words test, against its definition -----------------------------------------
# What _output_is_new must do, written the slow and obvious way: every word of the
# output's start (lower-cased, ASCII punctuation to spaces, str.split), the distinct new
# ones added to the vocabulary in order of first appearance, the oldest dropped past
# 256, and the output new when enough of its distinct words were not known.
_PUNCT = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"


def _reference_is_new(vocab: dict[str, int], text: str, min_new: int, ratio: float) -> bool:
    # the state keeps a word of 16+ characters by its fingerprint (it may be a secret):
    # one key per word, so the counts below are those of the words themselves
    words = [
        w if len(w) < 16 else "#" + fingerprint(w)
        for w in "".join(" " if c in _PUNCT else c for c in text[:400].lower()).split()
    ]
    if not words:
        return False
    distinct = list(dict.fromkeys(words))
    fresh = [w for w in distinct if w not in vocab]
    for w in fresh:
        vocab[w] = 1
    while len(vocab) > 256:
        del vocab[next(iter(vocab))]
    return len(fresh) >= min_new and len(fresh) >= ratio * len(distinct)


# ASCII words and punctuation, the separators str.split counts as white space, and
# letters whose lower case is ASCII (KELVIN SIGN) or longer (İ).
_TEXT = st.lists(
    st.sampled_from(
        [
            "the",
            "The",
            "THE",
            "plan",
            "tests",
            "run",
            "a",
            "b",
            "c",
            "x1",
            "sk-proj-AbC123dEf456GhI789",
            "eyJhbGciOiJIUzI1NiIsInR5cCI6",
        ]
    )
    | st.sampled_from([" ", "  ", "\n", "\t", "\x1c", "\x1f", "\x85", "\xa0", ".", "-", "_"])
    | st.sampled_from(["\u212a", "İ", "é", "Ünïcode", "日本"])
    | st.text(max_size=6),
    max_size=120,
).map("".join)


@given(st.text() | st.text(alphabet=st.characters(max_codepoint=127)) | _TEXT)
def test_word_splitting_matches_its_definition(text: str) -> None:
    """The words the new-words test reads: lower-cased, ASCII punctuation to spaces,
    whichever path text._spaced takes (one bytes.translate for ASCII text, str
    methods otherwise)."""
    from loopwatch.text import _spaced, plain_words, split_words

    spaced = "".join(" " if c in _PUNCT else c for c in text.lower())
    assert _spaced(text) == spaced
    assert split_words(text) == spaced.split()
    assert plain_words(text) == set(spaced.split())


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(_TEXT, min_size=1, max_size=8),
    min_new=st.integers(0, 5),
    ratio=st.sampled_from([0.0, 0.2, 0.5, 1.0, 1.5, -0.5, float("inf"), float("nan")]),
)
def test_output_novelty_matches_its_definition(
    texts: list[str], min_new: int, ratio: float
) -> None:
    from loopwatch.detectors.spend import SpendState

    det = SpendVelocity(min_output_novelty=ratio, min_new_words=min_new)
    state = SpendState()
    state.vocab = {f"w{i}": 1 for i in range(250)}  # near full: the FIFO evicts
    vocab = dict(state.vocab)
    for text in texts:
        assert det._output_is_new(state, text) == _reference_is_new(vocab, text, min_new, ratio)
        assert list(state.vocab.items()) == list(vocab.items())
