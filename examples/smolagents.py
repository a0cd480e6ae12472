"""loopwatch stops a smolagents agent that keeps calling the same tool.

Runs offline: the model is a scripted smolagents ``Model`` that asks for the same
search again and again. Run it with ``python examples/smolagents.py``.
"""

import sys
from pathlib import Path

# This file is named like the package it demonstrates: run as a script, its folder
# comes first on sys.path and `import smolagents` would import this file itself.
_here = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]

from smolagents import ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from smolagents.monitoring import LogLevel

from loopwatch import LoopDetected
from loopwatch.integrations.smolagents import LoopwatchSmolagents

calls = 0


@tool
def web_search(q: str) -> str:
    """Search the web.

    Args:
        q: the query
    """
    return "Paris: 18C, cloudy."


class StuckModel(Model):
    """Asks for the same search on every turn, whatever it is told."""

    def generate(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        global calls
        calls += 1
        function = ChatMessageToolCallFunction(name="web_search", arguments={"q": "paris weather"})
        call = ChatMessageToolCall(id=f"call-{calls}", type="function", function=function)
        return ChatMessage(role=MessageRole.ASSISTANT, content="", tool_calls=[call])


watch = LoopwatchSmolagents()  # default settings: warn, then stop
agent = watch.attach(
    ToolCallingAgent(
        tools=[web_search],
        model=StuckModel(model_id="stuck"),
        max_steps=30,
        verbosity_level=LogLevel.OFF,
    )
)
try:
    agent.run("What is the weather in Paris?")
    print("loopwatch: never stopped the agent")
except LoopDetected as stop:
    print(stop.verdict.message)
    print(f"loopwatch: stopped at call {calls}")
