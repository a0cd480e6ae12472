"""A scripted Strands model for the tests and the example: a real ``strands.models.Model``
subclass that streams its turns as Strands' own mocked model provider does (message
start, content blocks with text deltas or tool-use input deltas, message stop, usage
metadata), and keeps every request it was sent as the model got it."""

from __future__ import annotations

import copy
import json
from collections.abc import AsyncGenerator, Callable
from typing import Any

from strands.models import Model

Turn = dict[str, Any]  # {"text": str} or {"tool": name, "args": {...}} (or both)


def _is_prompt(message: dict[str, Any]) -> bool:
    """A user message that is a prompt, not tool results."""
    return message.get("role") == "user" and not any(
        "toolResult" in block for block in message.get("content", [])
    )


def turn_of(messages: list[dict[str, Any]]) -> int:
    """How many responses the model already gave since the last prompt."""
    start = max((i for i, m in enumerate(messages) if _is_prompt(m)), default=0)
    return sum(m.get("role") == "assistant" for m in messages[start:])


class ScriptedModel(Model):
    """Answers each request with ``script(n, messages)``: a tool call, text, or both."""

    def __init__(self, script: Callable[[int, list[dict[str, Any]]], Turn]) -> None:
        self.script = script
        self.requests: list[list[dict[str, Any]]] = []
        self.config: dict[str, Any] = {"model_id": "scripted"}

    def update_config(self, **model_config: Any) -> None:
        self.config.update(model_config)

    def get_config(self) -> Any:
        return self.config

    async def structured_output(self, *args: Any, **kwargs: Any) -> AsyncGenerator[Any, None]:
        raise NotImplementedError
        yield  # pragma: no cover

    async def stream(
        self,
        messages: Any,
        tool_specs: Any = None,
        system_prompt: Any = None,
        *args: Any,
        **kwargs: Any,
    ) -> AsyncGenerator[Any, None]:
        sent = copy.deepcopy(list(messages))
        self.requests.append(sent)
        n = turn_of(sent)
        turn = self.script(n, sent)
        yield {"messageStart": {"role": "assistant"}}
        stop = "end_turn"
        if turn.get("text"):
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": turn["text"]}}}
            yield {"contentBlockStop": {}}
        if turn.get("tool"):
            stop = "tool_use"
            start = {"toolUse": {"name": turn["tool"], "toolUseId": f"call-{n}"}}
            yield {"contentBlockStart": {"start": start}}
            delta = {"toolUse": {"input": json.dumps(turn["args"])}}
            yield {"contentBlockDelta": {"delta": delta}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": stop}}
        yield {
            "metadata": {
                "usage": {"inputTokens": 10, "outputTokens": 5, "totalTokens": 15},
                "metrics": {"latencyMs": 1},
            }
        }


def stuck(tool: str = "web_search", args: Any = None) -> Callable[..., Turn]:
    """A model that calls the same tool with the same arguments forever."""
    return lambda n, messages: {"tool": tool, "args": args or {"q": "paris weather"}}


def calls_then_answer(
    turns: int,
    args: Callable[[int], Any] = lambda n: {"q": "paris weather"},
    answer: str = "It is 18C and cloudy.",
    tool: str = "search",
) -> Callable[..., Turn]:
    """The same search (or ``args(n)``) ``turns`` times, then an answer."""

    def script(n: int, messages: list[dict[str, Any]]) -> Turn:
        if n < turns:
            return {"tool": tool, "args": args(n)}
        return {"text": answer}

    return script
