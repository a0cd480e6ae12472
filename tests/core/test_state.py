"""Typed run state: a bytes round trip keeps every detector's slot; other versions
and damaged bytes are refused with a clear error, never misread."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
import zstandard
from conftest import load_scenarios

from loopwatch import Config
from loopwatch.engine import Engine, new_state
from loopwatch.events import Event
from loopwatch.state import STATE_VERSION, CallRecord, DetectorState, RunState, StateError


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
    blob = replayed()[0].to_bytes()
    later = blob[:3] + bytes((STATE_VERSION + 1,)) + blob[4:]
    with pytest.raises(StateError, match=f"format {STATE_VERSION + 1}, this loopwatch reads"):
        RunState.from_bytes(later)
    # format 2, the JSON arrays the last version wrote: refused by its version
    with pytest.raises(StateError, match="format 2, this loopwatch reads"):
        RunState.from_bytes(orjson.dumps([2, 5, [], {}, {}, {}, 0, 0, 0, {}, 0, False, 0, -1, {}]))
    # the dict a loopwatch of the first round wrote
    with pytest.raises(StateError, match="format None"):
        RunState.from_bytes(orjson.dumps({"n": 3, "calls": [], "seen": {}}))


def test_damaged_bytes_are_refused() -> None:
    blob = replayed()[0].to_bytes()
    damaged = [b"", b"not json", b"[]", b"LWS", blob[:4], blob[:-1], blob[:20]]
    # the frame carries a checksum: any byte changed after the version is caught
    damaged += [blob[:i] + bytes((blob[i] ^ 0xFF,)) + blob[i + 1 :] for i in range(4, len(blob))]
    for data in damaged:
        with pytest.raises(StateError):
            RunState.from_bytes(data)


def test_seen_is_rebuilt_from_the_call_window() -> None:
    for state in replayed():
        again = RunState.from_bytes(state.to_bytes())
        assert again.seen == state.seen


def _fields(blob: bytes) -> list[Any]:
    """A state's fields, read back by hand: the magic, the version, a zstd frame of JSON."""
    assert blob[:3] == b"LWS" and blob[3] == STATE_VERSION
    fields: list[Any] = orjson.loads(zstandard.ZstdDecompressor().decompress(blob[4:]))
    return fields


def _blob(fields: list[Any]) -> bytes:
    return (
        b"LWS" + bytes((STATE_VERSION,)) + zstandard.ZstdCompressor().compress(orjson.dumps(fields))
    )


def test_the_state_is_compact_json_in_a_zstd_frame() -> None:
    for state in replayed():
        blob = state.to_bytes()
        assert RunState.from_bytes(_blob(_fields(blob))) == state  # any zstd level reads back
        assert len(blob) < len(orjson.dumps(_fields(blob)))


def test_unknown_slot_kind_is_refused() -> None:
    fields = _fields(replayed()[0].to_bytes())
    fields[-1][0][1] = "NoSuchState"
    with pytest.raises(StateError, match="unknown detector state"):
        RunState.from_bytes(_blob(fields))


def test_fields_of_the_wrong_shape_are_refused() -> None:
    fields = _fields(replayed()[0].to_bytes())
    for broken in (
        fields[:-1],
        [*fields[:2], [1, 2], *fields[3:]],
        [*fields[:1], [[1]], *fields[2:]],
    ):
        with pytest.raises(StateError):
            RunState.from_bytes(_blob(broken))


def test_a_slot_of_the_wrong_type_is_an_error() -> None:
    state = replayed()[0]
    name, slot = next(iter(state.slots.items()))
    other = next(c for c in DetectorState.registry.values() if c is not type(slot))
    with pytest.raises(StateError):
        state.slot(name, other)


def test_records_written_field_by_field_keep_the_slot_order() -> None:
    """CallRecord, Streak and Restatement write their fields out by hand (speed): the same list,
    in the same order, as the generic Record.dump reading each slot by name. A
    CallRecord's slots also hold what it never writes (the arguments, in memory only)
    and what it writes once read (``args``, ``asks``, its ``echo`` at rest)."""
    from loopwatch.state import _CALL_FIELDS, Written, _fields

    in_memory = {"said", "_raw", "_redact"}
    assert list(_CALL_FIELDS) == sorted(
        n.lstrip("_") for n in _fields(CallRecord) if n not in in_memory
    )
    checked = set()
    for state in replayed() + replayed("intent.jsonl"):
        records: list[Written] = list(state.calls)
        for slot in state.slots.values():
            records += list(getattr(slot, "by_key", {}).values())
        for rec in records:
            if isinstance(rec, CallRecord):
                generic = [
                    rec.echo_at_rest() if name == "echo" else getattr(rec, name)
                    for name in _CALL_FIELDS
                ]
            else:
                generic = [getattr(rec, name) for name in _fields(type(rec))]
            assert rec.dump() == generic
            assert type(rec).load(rec.dump()).dump() == generic
            checked.add(type(rec).__name__)
    assert {"CallRecord", "Streak", "Restatement"} <= checked
