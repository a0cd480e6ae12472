"""A result that is only pictures (a screenshot) holds no text: unknown, not a value."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from loopwatch.content import MEDIA_TYPES, media_only
from loopwatch.events import Event

media_block = st.builds(
    lambda kind, data: {"type": kind, "source": {"data": data}},
    st.sampled_from(sorted(MEDIA_TYPES)),
    st.text(max_size=20),
)
text_block = st.builds(lambda text: {"type": "text", "text": text}, st.text(max_size=20))


@given(st.lists(media_block, min_size=1, max_size=4))
def test_pictures_alone_are_unknown_as_blocks_one_block_or_json(blocks: list[Any]) -> None:
    assert media_only(blocks)
    assert media_only(blocks[0])
    assert media_only(json.dumps(blocks))
    event = Event.from_dict({"kind": "tool_result", "name": "computer", "text": blocks})
    assert not event.text_known
    assert not Event.from_dict({"kind": "tool_result", "text": json.dumps(blocks)}).text_known


@given(st.lists(media_block, max_size=3), text_block, st.lists(media_block, max_size=3))
def test_a_result_with_any_text_keeps_it(before: list[Any], text: Any, after: list[Any]) -> None:
    assert not media_only([*before, text, *after])


@given(st.text())
def test_a_plain_text_result_is_itself(text: str) -> None:
    assert not media_only(text)
    event = Event.from_dict({"kind": "tool_result", "text": text})
    assert event.text_known and event.text == text


def test_empty_or_unlike_blocks_are_not_pictures() -> None:
    assert not media_only([])
    assert not media_only({"type": "object", "properties": {}})
    assert not media_only('{"type": "object"}')
    assert not media_only('[{"type": "image"')  # a text that only starts like blocks
    # a model output or a user message with blocks is not a tool's screen
    assert Event.from_dict({"kind": "model", "text": [{"type": "image"}]}).text_known
