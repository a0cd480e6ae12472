"""Ids are masked by their shape, whichever provider made them (issue 14, item 5).

OpenInference stores a tool span's output as the serialised LangChain
``ToolMessage``, which carries its call's ``tool_call_id``: identical results of
two calls differ only in that id. The id's shape depends on the provider (OpenAI
``call_...``, Anthropic ``toolu_01...``, Bedrock ``msg_bdrk_01...``, Mistral's
9-character tokens); masked for one and not another, the scan stopped one call
later than the guard (which sees only the content). The messages here are made
and serialised by langchain-core itself, as the instrumentation does.
"""

from __future__ import annotations

import json

import pytest

from loopwatch.events import TOOL_CALL, TOOL_RESULT, Event

pytest.importorskip("langchain_core")
from langchain_core.messages import ToolMessage

CONTENT = "Paris: 18C, cloudy, light wind from the west."

# (provider, two call ids as that provider makes them)
IDS = [
    ("openai", "call_9fQ2kLw8ZpX3mNc7RtY1vB0a", "call_Hj4sD2kF9qLm3Nx8Wc5Vb7Tz"),
    ("anthropic", "toolu_01A09q90qw90lq917835lq9", "toolu_01XyZ7Hk3Pq8Rt2Wm5Nv4Lc"),
    ("bedrock", "tooluse_Bx7kP2qR9sT4vW1yZ3aC5d", "tooluse_Qm8nL3kJ6hG2fD9sA4pW7e"),
    ("mistral", "D681PevKs", "Xk29LmQ7t"),
    ("uuid", "3f2b8c1e-9d4a-4f6b-8e2c-1a7d5b9c0e3f", "a1c4e7f0-2b5d-4e8a-9c1f-6d3b7a0e2c5d"),
]


def result(text: str) -> Event:
    return Event(TOOL_RESULT, name="weather", text=text)


def serialisations(call_id: str) -> list[str]:
    message = ToolMessage(content=CONTENT, tool_call_id=call_id, name="weather", id=None)
    return [
        json.dumps(message.model_dump()),  # json.dumps: spaces after ':' and ','
        message.model_dump_json(),  # pydantic: compact
    ]


@pytest.mark.parametrize(("provider", "first", "second"), IDS, ids=[p for p, _, _ in IDS])
def test_results_differing_only_in_their_call_id_have_the_same_result_key(
    provider: str, first: str, second: str
) -> None:
    for a, b in zip(serialisations(first), serialisations(second), strict=True):
        assert a != b
        assert result(a).result_key == result(b).result_key, (provider, a)


def test_results_with_different_content_still_differ() -> None:
    a = ToolMessage(content=CONTENT, tool_call_id="toolu_01A09q90qw90lq917835lq9")
    b = ToolMessage(content="Paris: 25C, sunny.", tool_call_id="toolu_01XyZ7Hk3Pq8Rt2Wm5Nv4Lc")
    assert result(a.model_dump_json()).result_key != result(b.model_dump_json()).result_key


def test_an_echoed_tool_use_id_does_not_make_two_calls_differ() -> None:
    a = Event(TOOL_CALL, name="weather", args={"q": "paris", "tool_use_id": "toolu_01ABCdef12"})
    b = Event(TOOL_CALL, name="weather", args={"q": "paris", "tool_use_id": "toolu_01XYZuvw34"})
    assert a.norm_key == b.norm_key


@pytest.mark.parametrize(
    "text",
    [
        "page_2 of the results",
        "snake_case_name and tool_call_id",
        "report_2024q3.pdf",
        '"Paris", "weather"',
        "call_center hours",
    ],
)
def test_ordinary_words_are_not_ids(text: str) -> None:
    other = text.replace("a", "o")
    assert result(text).result_key != result(other).result_key or text == other


def test_numbers_in_arguments_still_make_different_calls() -> None:
    a = Event(TOOL_CALL, name="search", args={"q": "paris", "page": 1})
    b = Event(TOOL_CALL, name="search", args={"q": "paris", "page": 2})
    assert a.norm_key != b.norm_key
