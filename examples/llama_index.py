"""loopwatch stops a LlamaIndex agent that keeps calling the same tool.

Runs offline: the model is LlamaIndex's own ``MockFunctionCallingLLM`` with a script
that asks for the same search again and again. Run it with
``python examples/llama_index.py``.
"""

import asyncio
import sys
from pathlib import Path

# This file is named like the package it demonstrates: run as a script, its folder
# comes first on sys.path and `import llama_index` would import this file itself.
_here = str(Path(__file__).resolve().parent)
sys.path[:] = [p for p in sys.path if str(Path(p or ".").resolve()) != _here]

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MockFunctionCallingLLM

from loopwatch import LoopDetected
from loopwatch.integrations.llama_index import LoopwatchLlamaIndex

calls = 0


def web_search(q: str) -> str:
    """Search the web."""
    return "Paris: 18C, cloudy."


def stuck_model(messages, **kwargs):  # type: ignore[no-untyped-def]
    """Asks for the same search on every turn, whatever it is told."""
    global calls
    calls += 1
    call = ToolCallBlock(
        tool_call_id=f"call-{calls}", tool_name="web_search", tool_kwargs={"q": "paris weather"}
    )
    return ChatMessage(role="assistant", blocks=[call])


async def main() -> None:
    watch = LoopwatchLlamaIndex()  # default settings: warn, then stop
    agent = watch.attach(
        FunctionAgent(
            tools=[web_search], llm=MockFunctionCallingLLM(response_generator=stuck_model)
        )
    )
    try:
        await agent.run("What is the weather in Paris?", max_iterations=30)
        print("loopwatch: never stopped the agent")
    except LoopDetected as stop:
        print(stop.verdict.message)
        print(f"loopwatch: stopped at call {calls}")


asyncio.run(main())
