"""Typed run state: a bytes round trip keeps every detector's slot; other versions
and damaged bytes are refused with a clear error, never misread."""

from __future__ import annotations

import orjson
import pytest
from conftest import load_scenarios

from loopwatch import Config
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.state import STATE_VERSION, DetectorState, RunState, StateError


def replayed(name: str = "conformance.jsonl") -> list[RunState]:
    engine = Engine(Config().detectors())
    states = []
    for run in load_scenarios(name):
        state = new_state()
        for ev in run["events"]:
            engine.step(state, Event.from_dict(ev))
        states.append(state)
    return states


def test_round_trip_keeps_everything() -> None:
    for state in replayed() + replayed("intent.jsonl"):
        again = RunState.from_bytes(state.to_bytes())
        assert again == state
        assert again.to_bytes() == state.to_bytes()
        assert {type(s) for s in again.slots.values()} == {type(s) for s in state.slots.values()}


def test_every_default_detector_slot_is_registered() -> None:
    kinds = {type(s).__name__ for st in replayed() for s in st.slots.values()}
    assert kinds and kinds <= set(DetectorState.registry)


def test_another_version_is_refused() -> None:
    raw = orjson.loads(replayed()[0].to_bytes())
    raw[0] = STATE_VERSION + 1
    with pytest.raises(StateError, match="format"):
        RunState.from_bytes(orjson.dumps(raw))
    # the dict a loopwatch of the first round wrote
    with pytest.raises(StateError):
        RunState.from_bytes(orjson.dumps({"n": 3, "calls": [], "seen": {}}))


@pytest.mark.parametrize(
    "blob", [b"", b"not json", b"[]", b"[2, 1]", orjson.dumps([STATE_VERSION] + [0] * 12)]
)
def test_damaged_bytes_are_refused(blob: bytes) -> None:
    with pytest.raises(StateError):
        RunState.from_bytes(blob)


def test_unknown_slot_kind_is_refused() -> None:
    raw = orjson.loads(replayed()[0].to_bytes())
    raw[-1]["repeated_call"][0] = "NoSuchState"
    with pytest.raises(StateError, match="unknown detector state"):
        RunState.from_bytes(orjson.dumps(raw))


def test_a_slot_of_the_wrong_type_is_an_error() -> None:
    state = replayed()[0]
    name, slot = next(iter(state.slots.items()))
    other = next(c for c in DetectorState.registry.values() if c is not type(slot))
    with pytest.raises(StateError):
        state.slot(name, other)
