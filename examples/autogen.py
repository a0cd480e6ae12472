"""loopwatch stops an AutoGen AgentChat team whose agent keeps calling the same tool.

Runs offline: the model is autogen_ext's ReplayChatCompletionClient, replaying the
same search call again and again. Run it with ``python examples/autogen.py``.
"""

import asyncio
import sys
from pathlib import Path

# Run as a script, this file's folder comes first on sys.path, where the examples'
# file names shadow the packages they demonstrate: drop it.
_here = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]

from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallRequestEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, RequestUsage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient

from loopwatch.integrations.autogen import LoopwatchAutogen

calls = 0


def web_search(q: str) -> str:
    """Search the web."""
    global calls
    calls += 1
    return "Paris: 18C, cloudy."


def same_call(i: int) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=f"call-{i}", name="web_search", arguments='{"q": "paris"}')],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


model = ReplayChatCompletionClient(
    [same_call(i) for i in range(30)],
    model_info={
        "vision": False,
        "function_calling": True,
        "json_output": False,
        "family": "unknown",
        "structured_output": False,
    },
)
watch = LoopwatchAutogen()  # default settings: warn, then stop
agent = AssistantAgent(
    "researcher",
    model_client=watch.model_client(model, agent="researcher"),
    tools=watch.tools([FunctionTool(web_search, description="Search the web.")]),
)
team = RoundRobinGroupChat(
    [agent], termination_condition=watch.termination | MaxMessageTermination(100)
)
result = asyncio.run(team.run(task="What is the weather in Paris?"))
if result.stop_reason and result.stop_reason.startswith("[loopwatch]"):
    print(result.stop_reason)
    # the stopped call never ran (nor did a call loopwatch answered): count the asked
    asked = [m for m in result.messages if isinstance(m, ToolCallRequestEvent)]
    print(f"loopwatch: stopped at call {sum(len(m.content) for m in asked)}")
else:
    print("loopwatch: never stopped the agent")
