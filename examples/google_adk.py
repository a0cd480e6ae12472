"""A Google ADK agent stuck in a loop, stopped by loopwatch.

Offline: the model is ADK's own scripted ``MockModel``, answering every request with
the same tool call. Run: ``python examples/google_adk.py``.
"""

from __future__ import annotations

from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.cli.agent_test_runner import MockModel
from google.adk.runners import InMemoryRunner
from google.genai import types

from loopwatch.integrations.google_adk import STOP_KEY, LoopwatchPlugin

calls = 0


def web_search(q: str) -> str:
    """Search the web."""
    global calls
    calls += 1
    print(f"call {calls}: web_search({q!r})")
    return "18C, cloudy"


same_call = types.Content(
    role="model",
    parts=[types.Part(function_call=types.FunctionCall(name="web_search", args={"q": "paris"}))],
)
model = MockModel.create([same_call] * 50)  # a model that keeps asking for the same search
agent = LlmAgent(name="researcher", model=model, tools=[web_search])
runner = InMemoryRunner(app=App(name="weather", root_agent=agent, plugins=[LoopwatchPlugin()]))
session = runner.session_service.create_session_sync(app_name="weather", user_id="me")
question = types.Content(role="user", parts=[types.Part(text="What is the weather in Paris?")])
for _ in runner.run(user_id="me", session_id=session.id, new_message=question):
    pass

state = runner.session_service.get_session_sync(
    app_name="weather", user_id="me", session_id=session.id
)
stopped = state.state.get(STOP_KEY) if state else None
if stopped and state:
    print(stopped)
    # the stopped call never ran (nor did a call loopwatch answered): count the asked
    parts = [p for e in state.events if e.content and e.content.parts for p in e.content.parts]
    print(f"loopwatch: stopped at call {sum(p.function_call is not None for p in parts)}")
