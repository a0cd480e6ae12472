"""A Strands agent stuck in a loop, stopped by loopwatch.

Offline: the model is a ``strands.models.Model`` subclass that streams the same tool
call every turn, the way Strands' own test models script a provider. Run:
``python examples/strands.py``.
"""

from __future__ import annotations

import os
import sys

# This file is named like the package it shows: keep its folder off the import path.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

import json
from collections.abc import AsyncGenerator
from typing import Any

from strands import Agent, tool
from strands.models import Model

from loopwatch import LoopDetected
from loopwatch.integrations.strands import LoopwatchHooks

calls = 0  # the searches that ran
asked = 0  # the searches the model asked for: a call loopwatch answered did not run


class StuckModel(Model):
    """A model that keeps asking for the same search."""

    def update_config(self, **model_config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {"model_id": "stuck"}

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield

    async def stream(self, messages: Any, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        global asked
        asked += 1
        call = {"toolUse": {"name": "web_search", "toolUseId": f"call-{len(messages)}"}}
        yield {"messageStart": {"role": "assistant"}}
        yield {"contentBlockStart": {"start": call}}
        yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps({"q": "paris"})}}}}
        yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


@tool
def web_search(q: str) -> str:
    """Search the web."""
    global calls
    calls += 1
    print(f"call {calls}: web_search({q!r})")
    return "18C, cloudy"


agent = Agent(
    model=StuckModel(),
    tools=[web_search],
    name="researcher",
    hooks=[LoopwatchHooks()],
    callback_handler=None,
)
try:
    agent("What is the weather in Paris?")
except LoopDetected as stop:
    print(stop.verdict.message)
    print(f"loopwatch: stopped at call {asked}")
