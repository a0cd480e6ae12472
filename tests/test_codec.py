"""The compact state encoding: every value comes back exactly, fingerprints and
repeated strings are packed small, and damaged bytes raise, never misread."""

from __future__ import annotations

import contextlib
import math
import struct
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwatch.codec import pack, unpack

hexes = st.text(alphabet="0123456789abcdef", min_size=15, max_size=17)
lookalikes = st.builds(lambda c, h: c + h, st.characters(max_codepoint=0x7F), hexes) | hexes
strings = st.text() | lookalikes | st.sampled_from(["", "E", "?", "0" * 16, "f" * 16, "F" * 16])
scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | strings
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(strings, inner, max_size=6),
    max_leaves=40,
)


def same(a: Any, b: Any) -> bool:
    """Equal, type for type (True is not 1), NaN equal to NaN."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (
            math.isnan(a) and math.isnan(b) and struct.pack("<d", a) == struct.pack("<d", b)
        )
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    return bool(a == b)


@given(values)
def test_every_value_comes_back_exactly(value: Any) -> None:
    data = pack(value)
    assert same(unpack(data), value)
    assert pack(unpack(data)) == data  # deterministic


@given(lookalikes)
def test_strings_that_look_like_fingerprints_are_not_changed(text: str) -> None:
    back = unpack(pack([text, text]))
    assert back == [text, text] and all(type(t) is str for t in back)


def test_lone_surrogates_come_back() -> None:
    assert unpack(pack({"\ud800": ["x\udfff"]})) == {"\ud800": ["x\udfff"]}


def test_fingerprints_are_eight_bytes_and_strings_are_packed_once() -> None:
    key = "0123456789abcdef"
    assert len(pack(key)) == 9
    assert len(pack("E" + key)) == 10
    assert len(pack("?" + key[1:])) == 10
    window = [[key, "web_search", 3], [key, "web_search", 4]]
    # list headers 2 bytes each; the key 9, the name 1 + 1 + 10, later uses 2 each
    assert len(pack(window)) == 2 + (2 + 9 + 12 + 1) + (2 + 2 + 2 + 1)
    assert len(pack(window)) < len(orjson.dumps(window)) / 2


def test_small_integers_take_one_byte() -> None:
    assert [len(pack(n)) for n in (0, 127, 128, -1)] == [1, 1, 3, 2]


@pytest.mark.parametrize("value", [b"bytes", (1, 2), {1: "int key"}, {"a": {2}}])
def test_values_outside_json_are_refused(value: Any) -> None:
    with pytest.raises(TypeError):
        pack(value)


@given(values, st.data())
def test_damaged_bytes_raise_or_read_a_value(value: Any, data: st.DataObject) -> None:
    blob = pack(value)
    cut = data.draw(st.integers(min_value=0, max_value=len(blob) - 1))
    with pytest.raises((ValueError, IndexError)):
        unpack(blob[:cut])  # truncated: always refused
    flipped = bytearray(blob)
    flipped[cut] ^= data.draw(st.integers(min_value=1, max_value=255))
    with contextlib.suppress(ValueError, IndexError, RecursionError):
        unpack(bytes(flipped))  # those are the only errors a damaged blob may raise
    with pytest.raises(ValueError, match="after the value"):
        unpack(blob + b"\x00")


def test_a_text_sketch_is_four_bytes_a_hash() -> None:
    sketch = sorted(range(2**32 - 64, 2**32))
    assert unpack(pack(sketch)) == sketch
    assert len(pack(sketch)) == 2 + 4 * 64
    # a bool or an out-of-range value keeps the list generic (and exact)
    for odd in ([True, *sketch[1:]], [-1, *sketch[1:]], [2**32, *sketch[1:]], [1.0] * 20):
        assert same(unpack(pack(odd)), odd)
