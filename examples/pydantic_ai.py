"""A Pydantic AI agent stuck in a loop, stopped by loopwatch.

Offline: the model is Pydantic AI's own ``FunctionModel``, scripted to call the same
tool with the same arguments forever. Run: ``python examples/pydantic_ai.py``.
"""

from __future__ import annotations

import os
import sys

# This file is named like the package it shows: keep its folder off the import path.
if sys.path and os.path.abspath(sys.path[0]) == os.path.dirname(os.path.abspath(__file__)):
    del sys.path[0]

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from loopwatch import LoopDetected
from loopwatch.integrations.pydantic_ai import LoopwatchCapability

calls = 0  # the searches that ran
asked = 0  # the searches the model asked for: a call loopwatch answered did not run


def stuck_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """A model that keeps asking for the same search."""
    global asked
    asked += 1
    return ModelResponse(parts=[ToolCallPart("web_search", {"q": "paris weather"})])


agent = Agent(FunctionModel(stuck_model), name="researcher", capabilities=[LoopwatchCapability()])


@agent.tool_plain
def web_search(q: str) -> str:
    """Search the web."""
    global calls
    calls += 1
    print(f"call {calls}: web_search({q!r})")
    return "18C, cloudy"


try:
    agent.run_sync("What is the weather in Paris?")
except LoopDetected as stop:
    print(stop.verdict.message)
    print(f"loopwatch: stopped at call {asked}")
