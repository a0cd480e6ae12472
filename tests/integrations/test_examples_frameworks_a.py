"""Each framework example runs offline as a user would and stops its looping agent
by call 8 with the default settings (its last line says at which call)."""

from __future__ import annotations

import pytest
from frameworks_a import run_example


@pytest.mark.parametrize("name", ["pydantic_ai", "strands", "claude_agent_sdk"])
def test_example_stops_the_loop_by_call_8(name: str) -> None:
    stopped_at, out = run_example(name)
    assert stopped_at <= 8, out
    assert "[loopwatch]" in out, "the stop says why"
