"""AutoGen AgentChat with the real packages and autogen_ext's ReplayChatCompletionClient.

The replay client answers from a list; the subclass here only records each request,
so the tests assert what the model saw. The recording guard checks the live stop
against ``loopwatch.scan`` of the same events. No network.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import ToolCallExecutionEvent
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, LLMMessage, RequestUsage, UserMessage
from autogen_core.tools import FunctionTool
from autogen_ext.models.replay import ReplayChatCompletionClient
from frameworks_a import Scanned, assert_scans_like_the_live_run, scan_otlp
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, LoopDetected, scan
from loopwatch.integrations.autogen import NOT_RUN, LoopwatchAutogen

INFO: Any = {
    "vision": False,
    "function_calling": True,
    "json_output": False,
    "family": "unknown",
    "structured_output": False,
}


class Recording(ReplayChatCompletionClient):
    """The replay client, keeping every request it got."""

    def __init__(self, completions: Sequence[str | CreateResult]) -> None:
        super().__init__(completions, model_info=INFO)
        self.requests: list[list[LLMMessage]] = []

    async def create(self, messages: Sequence[LLMMessage], **kwargs: Any) -> CreateResult:
        self.requests.append(list(messages))
        return await super().create(messages, **kwargs)

    def create_stream(self, messages: Sequence[LLMMessage], **kwargs: Any) -> Any:
        self.requests.append(list(messages))
        return super().create_stream(messages, **kwargs)


def call(i: int, q: str = "paris weather", page: int = 1, name: str = "search") -> CreateResult:
    args = f'{{"q": "{q}", "page": {page}}}' if name == "search" else f'{{"q": "{q}"}}'
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=f"call-{i}", name=name, arguments=args)],
        usage=RequestUsage(prompt_tokens=20, completion_tokens=5),
        cached=False,
    )


def make_search(ran: list[str]) -> FunctionTool:
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        ran.append(q)
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    return FunctionTool(search, description="Search the web.")


def team_for(
    watch: LoopwatchAutogen, client: Recording, ran: list[str], **agent_kw: Any
) -> RoundRobinGroupChat:
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(client, agent="researcher"),
        tools=watch.tools([make_search(ran)]),
        **agent_kw,
    )
    return RoundRobinGroupChat(
        [agent], termination_condition=watch.termination | MaxMessageTermination(60)
    )


def notes(request: list[LLMMessage]) -> list[Any]:
    return [m for m in request if isinstance(m, UserMessage) and m.source == "loopwatch"]


@pytest.mark.parametrize("stream", [False, True])
def test_stop_ends_the_team_with_a_stop_reason_that_names_the_loop(stream: bool) -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    watch = LoopwatchAutogen(guard, run_id="conv-1")
    client = Recording([call(i) for i in range(20)])
    team = team_for(watch, client, ran, model_client_stream=stream)

    if stream:

        async def consume() -> Any:
            last = None
            async for item in team.run_stream(task="Weather in Paris?"):
                last = item
            return last

        result = asyncio.run(consume())
    else:
        result = asyncio.run(team.run(task="Weather in Paris?"))

    assert result.stop_reason.startswith("[loopwatch] Run stopped: You called search(")
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, the model read why as its result), the 4th, the
    # agent persisting, stopped before running
    assert len(ran) == 2, "the 3rd and 4th identical calls never ran"
    executions = [m for m in result.messages if isinstance(m, ToolCallExecutionEvent)]
    outputs = [e.content[0].content for e in executions]
    assert outputs[:2] == ["18C cloudy"] * 2 and len(outputs) == 4
    assert outputs[2].startswith(NOT_RUN) and "search" in outputs[2]
    told_once = [sum(NOT_RUN in str(m.content) for m in r) for r in client.requests]
    assert told_once[-1] == 1, "the model read why once, as the call's result"
    assert outputs[3] == result.stop_reason, "the stopped call got its result"
    report = scan(guard.events, config=guard.config)
    assert guard.first("skip") == report.first_warn
    stop = next(v for v in guard.verdicts if v.action == "stop")
    assert stop.step == report.first_stop
    assert guard.events[stop.step]["kind"] == "tool_call"
    assert guard.events[0] == {"kind": "user", "text": "Weather in Paris?"}
    assert set(guard.run_ids) == {"conv-1"}
    assert {e.get("agent") for e in guard.events if e["kind"] != "user"} == {"researcher"}


def test_warning_is_the_last_message_of_the_next_request_only() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    watch = LoopwatchAutogen(guard)
    client = Recording([*(call(i) for i in range(3)), "It is 18C and cloudy."])
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(client, agent="researcher"),
        tools=watch.tools([make_search([])]),
        max_tool_iterations=10,
    )

    result = asyncio.run(agent.run(task="Weather in Paris?"))

    assert result.messages[-1].to_text() == "It is 18C and cloudy."
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    assert [i for i, r in enumerate(client.requests) if notes(r)] == [3]
    assert client.requests[3][-1].content == warning
    assert type(client.requests[3][-2]).__name__ == "FunctionExecutionResultMessage"
    history = asyncio.run(agent.model_context.get_messages())
    assert not notes(history), "the warning is not kept in the agent's history"


def test_skip_answers_the_call_without_running_the_tool() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    ran: list[str] = []
    watch = LoopwatchAutogen(guard)
    client = Recording([*(call(i) for i in range(6)), "It is 18C and cloudy."])
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(client, agent="researcher"),
        tools=watch.tools([make_search(ran)]),
        max_tool_iterations=10,
    )

    result = asyncio.run(agent.run(task="Weather in Paris?"))

    assert len(ran) == 4 and result.messages[-1].to_text() == "It is 18C and cloudy."
    outputs = [
        r.content
        for m in result.messages
        if isinstance(m, ToolCallExecutionEvent)
        for r in m.content
    ]
    assert outputs[3] == "18C cloudy" and outputs[4].startswith(NOT_RUN)
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


def test_a_lone_agent_is_stopped_with_loop_detected() -> None:
    watch = LoopwatchAutogen()
    ran: list[str] = []
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(Recording([call(i) for i in range(20)])),
        tools=watch.tools([make_search(ran)]),
        max_tool_iterations=20,
    )
    with pytest.raises(LoopDetected, match=r"search\("):
        asyncio.run(agent.run(task="Weather in Paris?"))
    assert len(ran) == 2, "the defaults tell the 3rd identical call and stop the 4th"
    assert watch.stopped is None, "raised once: the conversation's next turn may go on"


def test_a_healthy_run_is_never_warned() -> None:
    guard = RecordingGuard()
    watch = LoopwatchAutogen(guard)
    client = Recording([*(call(i, page=i + 1) for i in range(3)), "Paris: 18C, cloudy."])
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(client, agent="researcher"),
        tools=watch.tools([make_search([])]),
        max_tool_iterations=10,
    )
    team = RoundRobinGroupChat(
        [agent], termination_condition=watch.termination | MaxMessageTermination(2)
    )
    result = asyncio.run(team.run(task="Weather in Paris?"))
    assert result.messages[-1].to_text() == "Paris: 18C, cloudy."
    assert {v.action for v in guard.verdicts} == {"ok"}
    assert not any(notes(r) for r in client.requests)


def test_each_task_is_a_user_turn_of_the_same_conversation() -> None:
    guard = RecordingGuard()
    watch = LoopwatchAutogen(guard, run_id="conv-2")
    client = Recording(["Sunny.", "Warm."])
    agent = AssistantAgent("researcher", model_client=watch.model_client(client))
    team = RoundRobinGroupChat(
        [agent], termination_condition=watch.termination | MaxMessageTermination(2)
    )

    async def two_turns() -> None:
        await team.run(task="Weather in Paris?")
        await team.run(task="And in Rome?")

    asyncio.run(two_turns())
    users = [e["text"] for e in guard.events if e["kind"] == "user"]
    assert users == ["Weather in Paris?", "And in Rome?"]
    assert set(guard.run_ids) == {"conv-2"}


def test_agents_of_a_team_name_themselves() -> None:
    guard = RecordingGuard()
    watch = LoopwatchAutogen(guard)
    ran: list[str] = []
    agents = [
        AssistantAgent(
            name,
            model_client=watch.model_client(Recording([call(i) for i in range(20)]), agent=name),
            tools=watch.tools([make_search(ran)]),
        )
        for name in ("planner", "researcher")
    ]
    team = RoundRobinGroupChat(
        agents, termination_condition=watch.termination | MaxMessageTermination(60)
    )
    result = asyncio.run(team.run(task="Weather in Paris?"))
    assert result.stop_reason and result.stop_reason.startswith("[loopwatch]")
    calls = [e for e in guard.events if e["kind"] == "tool_call"]
    assert [e["agent"] for e in calls[:2]] == ["planner", "researcher"]


class Broken(Guard):
    async def aobserve(self, run_id: str, event: Any) -> Any:
        raise RuntimeError("loopwatch bug")


def test_a_loopwatch_bug_never_breaks_the_agent() -> None:
    watch = LoopwatchAutogen(Broken())
    ran: list[str] = []
    agent = AssistantAgent(
        "researcher",
        model_client=watch.model_client(Recording([call(0), call(1), "Done."])),
        tools=watch.tools([make_search(ran)]),
        max_tool_iterations=10,
    )
    result = asyncio.run(agent.run(task="Weather in Paris?"))
    assert result.messages[-1].to_text() == "Done." and len(ran) == 2


# -- the same run exported -------------------------------------------------------------------
def exported_run(
    monkeypatch: pytest.MonkeyPatch, openinference_on: bool, builtin_on: bool
) -> tuple[RecordingGuard, list[str], list[Scanned]]:
    """The looping run (six identical searches, then the answer) with AutoGen's own
    tracing (``builtin_on``: autogen-core's GenAI spans, which go to the global tracer
    provider, here redirected to the test's) and OpenInference's AgentChat instrumentor
    (``openinference_on``), let go on (``on_loop="warn"``) so that the trace ends
    normally: the guard, the calls the tool ran, and the exported runs scanned.

    The model client is autogen_ext's ``OpenAIChatCompletionClient`` on a scripted
    transport, not the replay client: the instrumentor records the model calls of the
    OpenAI clients only, which is what users run."""
    import httpx
    from autogen_ext.models.openai import OpenAIChatCompletionClient
    from openinference.instrumentation.autogen_agentchat import AutogenAgentChatInstrumentor
    from opentelemetry import trace
    from traces_convert import _otel_collector, openai_transport

    turns: list[Any] = [[("search", {"q": "paris weather", "page": 1})]] * 6
    client = OpenAIChatCompletionClient(
        model="gpt-test",
        model_info=INFO,
        api_key="test",
        base_url="http://127.0.0.1:9/v1",
        http_client=httpx.AsyncClient(transport=openai_transport([*turns, "It is 18C."])),
        max_retries=0,
    )
    guard = RecordingGuard(on_loop="warn")
    ran: list[str] = []
    watch = LoopwatchAutogen(guard, run_id="conv-1")
    provider, exporter = _otel_collector()
    if builtin_on:
        default = trace.get_tracer

        def get_tracer(name: str, version: Any = None, tracer_provider: Any = None,
                       *args: Any, **kwargs: Any) -> Any:  # fmt: skip
            return default(name, version, tracer_provider or provider, *args, **kwargs)

        monkeypatch.setattr(trace, "get_tracer", get_tracer)
    with contextlib.ExitStack() as stack:
        if openinference_on:
            instrumentor = AutogenAgentChatInstrumentor()
            instrumentor.instrument(tracer_provider=provider)
            stack.callback(instrumentor.uninstrument)
        agent = AssistantAgent(
            "researcher",
            model_client=watch.model_client(client, agent="researcher"),
            tools=watch.tools([make_search(ran)]),
            max_tool_iterations=10,
        )
        team = RoundRobinGroupChat(
            [agent], termination_condition=watch.termination | MaxMessageTermination(2)
        )
        result = asyncio.run(team.run(task="Weather in Paris?"))
    assert result.messages[-1].to_text() == "It is 18C."
    if openinference_on:
        assert not instrumentor.is_instrumented_by_opentelemetry
    return guard, ran, scan_otlp(exporter.get_finished_spans(), config=Config())


def with_calls(runs: list[Scanned]) -> Scanned:
    """The one exported run with tool calls (autogen-core traces an agent's creation
    apart, in a trace of its own)."""
    [found] = [r for r in runs if any(e["kind"] == "tool_call" for e in r.events)]
    return found


@pytest.mark.parametrize("builtin_on", [False, True], ids=["openinference", "both"])
def test_the_openinference_trace_scans_to_the_live_verdict(
    monkeypatch: pytest.MonkeyPatch, builtin_on: bool
) -> None:
    """The exported trace stops where the live guard did. ``both``: with a global tracer
    provider, autogen-core's own ``execute_tool`` span sits inside OpenInference's tool
    span: one call, with OpenInference's arguments and result and AutoGen's call id."""
    guard, ran, runs = exported_run(monkeypatch, openinference_on=True, builtin_on=builtin_on)

    assert len(ran) == 6, "warn: the loop went on to the end"
    exported = with_calls(runs)
    assert_scans_like_the_live_run(guard.events, exported)
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    live = [e for e in guard.events if e["kind"] == "tool_call"]
    assert [c["args"] for c in calls] == [c["args"] for c in live]
    if builtin_on:
        assert [c["id"] for c in calls] == [c["id"] for c in live]


def test_autogens_own_tracing_carries_no_arguments_so_its_export_never_stops(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """autogen-core 0.7's own tracing (``trace_tool_span``) records each tool call's name
    and id, but neither its arguments nor its result, and no model call: the same call
    cannot be told from another, so the scan reads them unknown and does not stop the
    loop the live guard stopped. The OpenInference instrumentor (above) carries them."""
    guard, _, runs = exported_run(monkeypatch, openinference_on=False, builtin_on=True)

    assert scan(guard.events, config=Config()).verdict == "stop"
    exported = with_calls(runs)
    assert exported.verdict == "ok"
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    live = [e for e in guard.events if e["kind"] == "tool_call"]
    assert [c["id"] for c in calls] == [c["id"] for c in live]
    assert all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert not any(e["kind"] == "model" for e in exported.events)
