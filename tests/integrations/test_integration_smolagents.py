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
from frameworks_a import Scanned, assert_scans_like_the_live_run, openinference, scan_otlp
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

from loopwatch import Config, Guard, LoopDetected, scan
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
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, the model read why as its observation), the 4th,
    # the agent persisting, stopped before running
    assert len(ran) == 2 and len(model.requests) == 4, "the 3rd and 4th calls never ran"
    told = model.requests[3][-1]
    assert told.role == MessageRole.TOOL_RESPONSE and NOT_RUN in text_of(told)
    assert "If you do it again, the run will be stopped." in text_of(told)
    told_once = sum(text_of(m).count(NOT_RUN) for m in model.requests[3])
    assert told_once == 1, "the model read why once, as the call's observation"
    report = scan(guard.events, config=guard.config)
    assert guard.first("skip") == report.first_warn
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
    assert len(ran) == 2, "the defaults tell the 3rd identical call and stop the 4th"
    first = next(e for e in guard.events if e["kind"] == "tool_call")
    assert first["args"] == {"q": "paris weather"}


def test_warning_reaches_the_next_request_once_and_leaves_the_memory() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
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
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
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
    assert len(ran) == 2, "the defaults tell the researcher's 3rd identical search, stop its 4th"


class Broken(Guard):
    def observe(self, run_id: str, event: Any) -> Any:
        raise RuntimeError("loopwatch bug")


def test_a_loopwatch_bug_never_breaks_the_agent() -> None:
    ran: list[str] = []
    agent = agent_for(LoopwatchSmolagents(Broken()), Scripted(loops_then_answers(2)), ran)
    assert agent.run("Weather in Paris?") == "It is 18C and cloudy."
    assert len(ran) == 2


# -- the same run exported -------------------------------------------------------------------
SEARCHES = [[("search", {"q": "paris weather"})]] * 6
FINAL = [[("final_answer", {"answer": "It is 18C and cloudy."})]]


def exported_run(**options: Any) -> tuple[RecordingGuard, list[str], list[Scanned]]:
    """The looping run (six identical searches, then the answer) traced by OpenInference's
    smolagents instrumentor, and let go on (``on_loop="warn"``) so that the trace ends
    normally: the guard, the calls the tool ran, and the exported runs scanned.

    The model is smolagents' own ``OpenAIModel`` on a scripted transport, not
    ``Scripted``: the instrumentor wraps the model classes smolagents exports, so a
    ``Model`` subclass of the test's own would leave no LLM span, where a user's model
    leaves one per turn."""
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIModel
    from traces_convert import fake_openai

    guard = RecordingGuard(on_loop="warn")
    ran: list[str] = []
    with openinference(SmolagentsInstrumentor(), **options) as exporter:
        model = OpenAIModel("gpt-test", client=fake_openai([*SEARCHES, *FINAL]))
        agent = agent_for(LoopwatchSmolagents(guard), model, ran)
        assert agent.run("Weather in Paris?") == "It is 18C and cloudy."
    return guard, ran, scan_otlp(exporter.get_finished_spans(), config=Config())


def test_the_openinference_trace_scans_to_the_live_verdict() -> None:
    """The exported trace stops where the live guard did. Each call is one call in it,
    although two tool spans record it (the adapter's wrapper tool and the tool it wraps:
    the instrumentor wraps every ``Tool.__call__``)."""
    guard, ran, [exported] = exported_run()

    assert len(ran) == 6, "warn: the loop went on to the end"
    assert_scans_like_the_live_run(guard.events, exported)
    calls = [e["name"] for e in exported.events if e["kind"] == "tool_call"]
    assert calls == [e["name"] for e in guard.events if e["kind"] == "tool_call"]
    assert calls == ["search"] * 6 + ["final_answer"]


def test_with_inputs_and_outputs_hidden_the_export_reads_unknown_and_never_stops() -> None:
    """``TraceConfig(hide_inputs=True, hide_outputs=True)`` exports no arguments and no
    results (``__REDACTED__`` in their place): the scan cannot tell the same call from
    another, so it does not stop on the loop the live guard stopped; it says what it
    lacked instead."""
    from openinference.instrumentation import TraceConfig

    config = TraceConfig(hide_inputs=True, hide_outputs=True)
    guard, _, [exported] = exported_run(config=config)

    assert scan(guard.events, config=Config()).verdict == "stop"
    assert exported.verdict == "ok"
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    assert len(calls) == 7 and all(c["unknown"] == ["args"] for c in calls)
    results = [e for e in exported.events if e["kind"] == "tool_result"]
    assert all("text" not in r and r["unknown"] == ["text"] for r in results)
