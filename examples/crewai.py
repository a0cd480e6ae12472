"""loopwatch stops a CrewAI crew whose agent keeps calling the same tool.

Runs offline: the model is a scripted ``BaseLLM`` (CrewAI's base class for custom models)
that asks for the same search on every turn. Run it with ``python examples/crewai.py``.
"""

import os
import sys
from pathlib import Path

# This file is named like the package it demonstrates: run as a script, its folder
# comes first on sys.path and `import crewai` would import this file itself.
_here = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]
os.environ.setdefault("CREWAI_DISABLE_TELEMETRY", "true")
os.environ.setdefault("OTEL_SDK_DISABLED", "true")
os.environ.setdefault("CREWAI_TRACING_ENABLED", "false")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool

from loopwatch import LoopDetected
from loopwatch.integrations.crewai import LoopwatchCrewAI

calls = 0


@tool("web_search")
def web_search(q: str) -> str:
    """Search the web."""
    return "Paris: 18C, cloudy."


class StuckModel(BaseLLM):
    """Asks for the same search on every turn, whatever it is told."""

    def call(self, messages, tools=None, *args, **kwargs):  # type: ignore[no-untyped-def]
        global calls
        calls += 1
        arguments = '{"q": "paris weather"}'
        function = {"name": "web_search", "arguments": arguments}
        return [{"id": f"call-{calls}", "type": "function", "function": function}]

    def supports_function_calling(self) -> bool:
        return True


watch = LoopwatchCrewAI().register()  # default settings: warn, then stop
researcher = Agent(
    role="researcher",
    goal="Answer weather questions",
    backstory="You look things up.",
    llm=StuckModel(model="stuck"),
    tools=[web_search],
    max_iter=30,
)
task = Task(description="What is the weather in Paris?", expected_output="One sentence.")
task.agent = researcher
try:
    Crew(agents=[researcher], tasks=[task]).kickoff()
    print("loopwatch: never stopped the crew")
except LoopDetected as stop:
    print(stop.verdict.message)
    print(f"loopwatch: stopped at call {calls}")
