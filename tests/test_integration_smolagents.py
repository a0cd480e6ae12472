"""smolagents with the real package and a scripted ``Model`` subclass.

``Scripted`` is a smolagents ``Model`` as the framework intends one to be written
(``generate`` returns a ``ChatMessage``); it records every request, so the tests
assert what the model saw. The recording guard checks the live stop against
``loopwatch.scan`` of the same events. No network.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from smolagents import CodeAgent, ToolCallingAgent, tool
from smolagents.models import (
    ChatMessage,
    ChatMessageToolCall,
    ChatMessageToolCallFunction,
    MessageRole,
    Model,
)
from smolagents.monitoring import LogLevel, TokenUsage
from test_integration_decorator import RecordingGuard

from loopwatch import Guard, LoopDetected, scan
from loopwatch.integrations.smolagents import NOT_RUN, LoopwatchSmolagents

Script = Callable[[int, list[Any]], ChatMessage]


class Scripted(Model):  # type: ignore[misc]
    """A smolagents model that answers from a script and records each request."""

    def __init__(self, script: Script) -> None:
        super().__init__(model_id="scripted")
        self.script = script
        self.requests: list[list[Any]] = []

    def generate(self, messages: list[Any], **kwargs: Any) -> ChatMessage:
        turn = len(self.requests)
        self.requests.append(list(messages))
        return self.script(turn, list(messages))


def calls(name: str, args: dict[str, Any], turn: int) -> ChatMessage:
    function = ChatMessageToolCallFunction(name=name, arguments=args)
    return ChatMessage(
        role=MessageRole.ASSISTANT,
        content="",
        tool_calls=[ChatMessageToolCall(id=f"call-{turn}", type="function", function=function)],
        token_usage=TokenUsage(input_tokens=20, output_tokens=5),
    )


def answer(text: str, turn: int) -> ChatMessage:
    return calls("final_answer", {"answer": text}, turn)


def loops_then_answers(times: int) -> Script:
    def script(turn: int, messages: list[Any]) -> ChatMessage:
        if turn < times:
            return calls("search", {"q": "paris weather"}, turn)
        return answer("It is 18C and cloudy.", turn)

    return script


def make_search(ran: list[str]) -> Any:
    @tool
    def search(q: str, page: int = 1) -> str:
        """Search the web.

        Args:
            q: the query
            page: the result page
        """
        ran.append(q)
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    return search


def agent_for(watch: LoopwatchSmolagents, model: Model, ran: list[str], **kw: Any) -> Any:
    agent = ToolCallingAgent(
        tools=[make_search(ran)], model=model, verbosity_level=LogLevel.OFF, max_steps=20, **kw
    )
    return watch.attach(agent)


def text_of(message: Any) -> str:
    content = message.content
    if isinstance(content, list):
        return "\n".join(str(block.get("text", "")) for block in content)
    return str(content or "")


def notes(request: list[Any]) -> list[str]:
    return [text_of(m) for m in request if "[loopwatch]" in text_of(m)]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_raises_at_the_event_scan_reports_and_the_tool_stops_running(stream: bool) -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    model = Scripted(loops_then_answers(30))
    agent = agent_for(LoopwatchSmolagents(guard), model, ran)

    with pytest.raises(LoopDetected) as caught:
        if stream:
            list(agent.run("Weather in Paris?", stream=True))
        else:
            agent.run("Weather in Paris?")

    verdict = caught.value.verdict
    assert verdict.action == "stop" and "search" in str(caught.value)
    assert str(caught.value).startswith("[loopwatch] Run stopped")
    assert len(ran) == 4 and len(model.requests) == 5, "the 5th identical call never ran"
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop
    assert guard.events[verdict.step]["kind"] == "tool_call"
    assert guard.events[0] == {"kind": "user", "text": "Weather in Paris?"}
    assert len(set(guard.run_ids)) == 1


def test_code_agent_tools_are_watched_too() -> None:
    guard = RecordingGuard()
    ran: list[str] = []

    def script(turn: int, messages: list[Any]) -> ChatMessage:
        code = 'result = search(q="paris weather")\nprint(result)'
        return ChatMessage(
            role=MessageRole.ASSISTANT, content=f"Searching.\n<code>\n{code}\n</code>"
        )

    agent = CodeAgent(
        tools=[make_search(ran)], model=Scripted(script), verbosity_level=LogLevel.OFF, max_steps=20
    )
    LoopwatchSmolagents(guard).attach(agent)

    with pytest.raises(LoopDetected):
        agent.run("Weather in Paris?")
    assert len(ran) == 4
    first = next(e for e in guard.events if e["kind"] == "tool_call")
    assert first["args"] == {"q": "paris weather"}


def test_warning_reaches_the_next_request_once_and_leaves_the_memory() -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    model = Scripted(loops_then_answers(3))
    agent = agent_for(LoopwatchSmolagents(guard), model, ran)

    assert agent.run("Weather in Paris?") == "It is 18C and cloudy."

    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    with_note = [i for i, request in enumerate(model.requests) if notes(request)]
    assert with_note == [3], "only the request after the warned step carries the note"
    last = model.requests[3][-1]
    assert last.role == MessageRole.TOOL_RESPONSE, "after the tool output, in its message"
    assert text_of(last).startswith("Observation:\n18C cloudy") and warning in text_of(last)
    assert not any("[loopwatch]" in str(s.observations) for s in agent.memory.steps[1:])


def test_skip_answers_the_model_without_running_the_tool() -> None:
    guard = RecordingGuard(on_loop="skip")
    ran: list[str] = []
    model = Scripted(loops_then_answers(6))
    agent = agent_for(LoopwatchSmolagents(guard), model, ran)

    assert agent.run("Weather in Paris?") == "It is 18C and cloudy."

    assert len(ran) == 4, "the 5th and 6th identical calls were skipped"
    observations = [str(s.observations) for s in agent.memory.steps[1:]]
    assert observations[4].startswith(NOT_RUN) and observations[5].startswith(NOT_RUN)
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


def test_a_healthy_run_is_never_warned() -> None:
    guard = RecordingGuard()
    ran: list[str] = []

    def paginates(turn: int, messages: list[Any]) -> ChatMessage:
        if turn < 3:
            return calls("search", {"q": "paris weather", "page": turn + 1}, turn)
        return answer("Paris: 18C, cloudy.", turn)

    model = Scripted(paginates)
    agent = agent_for(LoopwatchSmolagents(guard), model, ran)

    assert agent.run("Weather in Paris?") == "Paris: 18C, cloudy."
    assert {v.action for v in guard.verdicts} == {"ok"}
    assert not any(notes(r) for r in model.requests)
    assert scan(guard.events, config=guard.config).verdict == "ok"


def test_each_run_is_a_user_turn_and_reset_starts_a_new_conversation() -> None:
    guard = RecordingGuard()
    model = Scripted(lambda turn, messages: answer("Sunny.", turn))
    agent = agent_for(LoopwatchSmolagents(guard), model, [])

    agent.run("Weather in Paris?")
    agent.run("And in Rome?", reset=False)
    agent.run("Something else", reset=True)

    pairs = zip(guard.run_ids, guard.events, strict=True)
    users = [(r, e["text"]) for r, e in pairs if e["kind"] == "user"]
    assert [text for _, text in users] == ["Weather in Paris?", "And in Rome?", "Something else"]
    assert users[0][0] == users[1][0] != users[2][0]


def test_a_fixed_run_id_spans_runs() -> None:
    guard = RecordingGuard()
    model = Scripted(lambda turn, messages: answer("Sunny.", turn))
    agent = ToolCallingAgent(tools=[], model=model, verbosity_level=LogLevel.OFF)
    LoopwatchSmolagents(guard).attach(agent, run_id="ticket-7")
    agent.run("a")
    agent.run("b")
    assert set(guard.run_ids) == {"ticket-7"}


def test_managed_agents_share_the_run_and_name_themselves() -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    member = ToolCallingAgent(
        tools=[make_search(ran)],
        model=Scripted(loops_then_answers(30)),
        name="researcher",
        description="Finds things on the web.",
        verbosity_level=LogLevel.OFF,
        max_steps=20,
    )

    def manager_script(turn: int, messages: list[Any]) -> ChatMessage:
        return calls("researcher", {"task": "Find the weather in Paris."}, turn)

    manager = ToolCallingAgent(
        tools=[],
        model=Scripted(manager_script),
        managed_agents=[member],
        name="manager",
        verbosity_level=LogLevel.OFF,
        max_steps=5,
    )
    LoopwatchSmolagents(guard).attach(manager)

    with pytest.raises(LoopDetected) as caught:
        manager.run("Weather in Paris?")

    assert "search" in str(caught.value)
    assert len(set(guard.run_ids)) == 1
    handoff = next(e for e in guard.events if e.get("to") == "researcher")
    assert handoff == {
        "kind": "model",
        "agent": "manager",
        "to": "researcher",
        "text": "Find the weather in Paris.",
    }
    assert {e["agent"] for e in guard.events if e["kind"] == "tool_call"} == {"researcher"}
    assert len(ran) == 4


class Broken(Guard):
    def observe(self, run_id: str, event: Any) -> Any:
        raise RuntimeError("loopwatch bug")


def test_a_loopwatch_bug_never_breaks_the_agent() -> None:
    ran: list[str] = []
    agent = agent_for(LoopwatchSmolagents(Broken()), Scripted(loops_then_answers(2)), ran)
    assert agent.run("Weather in Paris?") == "It is 18C and cloudy."
    assert len(ran) == 2
