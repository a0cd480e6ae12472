"""LlamaIndex agent workflows with the real package and its own scripted LLM.

``scripted`` is LlamaIndex's ``MockFunctionCallingLLM`` (a real ``FunctionCallingLLM``)
driven by a response generator, as the framework's own tests drive it; it records
every request, so the tests assert what the model saw. The recording guard checks
the live stop against ``loopwatch.scan`` of the same events. No network.
"""

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from frameworks_a import assert_scans_like_the_live_run, openinference, scan_otlp
from llama_index.core.agent.workflow import (
    AgentWorkflow,
    FunctionAgent,
    ReActAgent,
    ToolCallResult,
)
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MockFunctionCallingLLM
from llama_index.core.tools import FunctionTool
from llama_index.core.workflow import Context
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, LoopDetected, scan
from loopwatch.integrations.llama_index import NOT_RUN, RUN_ID_KEY, LoopwatchLlamaIndex

Script = Callable[[int, list[ChatMessage]], ChatMessage]


class Scripted:
    """A response generator for ``MockFunctionCallingLLM`` that records each request."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[list[ChatMessage]] = []
        self.llm = MockFunctionCallingLLM(response_generator=self)

    def __call__(self, messages: Any, **kwargs: Any) -> ChatMessage:
        turn = len(self.requests)
        self.requests.append(list(messages))
        return self.script(turn, list(messages))


def calls(name: str, args: dict[str, Any], turn: int) -> ChatMessage:
    block = ToolCallBlock(tool_call_id=f"call-{turn}", tool_name=name, tool_kwargs=args)
    return ChatMessage(role="assistant", blocks=[block])


def answer(text: str) -> ChatMessage:
    return ChatMessage(role="assistant", content=text)


def loops_then_answers(times: int) -> Script:
    def script(turn: int, messages: list[ChatMessage]) -> ChatMessage:
        if turn < times:
            return calls("search", {"q": "paris weather"}, turn)
        return answer("It is 18C and cloudy.")

    return script


def make_search(ran: list[str], first_page: str = "18C cloudy") -> Callable[..., str]:
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        ran.append(q)
        return first_page if page == 1 else f"page {page}: more results"

    return search


def notes(request: list[ChatMessage]) -> list[str]:
    return [m.content or "" for m in request if "[loopwatch]" in (m.content or "")]


def run(start: Callable[[], Any]) -> Any:
    """``start()`` awaited in a new event loop (an agent run needs a running loop)."""

    async def main() -> Any:
        return await start()

    return asyncio.run(main())


@pytest.mark.parametrize("streaming", [False, True])
def test_stop_raises_at_the_event_scan_reports_and_the_tool_stops_running(streaming: bool) -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    model = Scripted(loops_then_answers(30))
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm, streaming=streaming)
    )

    with pytest.raises(LoopDetected) as caught:
        run(lambda: agent.run("Weather in Paris?"))

    verdict = caught.value.verdict
    assert verdict.action == "stop" and "search" in str(caught.value)
    assert str(caught.value).startswith("[loopwatch] Run stopped")
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, its result is why), the 4th, the agent
    # persisting, stopped before running
    assert len(ran) == 2 and len(model.requests) == 4, "the 3rd and 4th calls never ran"
    told = [m for m in model.requests[3] if m.role == "tool"][-1]
    assert (told.content or "").startswith(NOT_RUN) and "search" in (told.content or "")
    assert sum(NOT_RUN in str(m.content) for m in model.requests[3]) == 1, "told once"
    report = scan(guard.events, config=guard.config)
    assert guard.first("skip") == report.first_warn
    assert verdict.step == report.first_stop
    assert guard.events[verdict.step]["kind"] == "tool_call"
    assert guard.events[0] == {"kind": "user", "text": "Weather in Paris?"}
    assert guard.events[1] == {"kind": "model", "text": "", "agent": "Agent"}
    assert len(set(guard.run_ids)) == 1


def test_streamed_events_flow_until_the_stop() -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    model = Scripted(loops_then_answers(30))
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )
    seen: list[str] = []
    outputs: list[str] = []

    async def go() -> None:
        handler = agent.run("Weather in Paris?")
        async for event in handler.stream_events():
            seen.append(type(event).__name__)
            if isinstance(event, ToolCallResult):
                outputs.append(str(event.tool_output.content))
        await handler

    with pytest.raises(LoopDetected):
        run(go)
    # the defaults tell the 3rd identical call (skipped) and stop the 4th: the result
    # events of both still flow, with loopwatch's answer in place of the tool's
    assert seen.count("AgentStream") == 4 and seen.count("ToolCallResult") == 4
    assert outputs[:2] == ["18C cloudy"] * 2
    assert outputs[2].startswith(NOT_RUN)
    assert outputs[3].startswith("[loopwatch] Run stopped")
    assert len(ran) == 2


def test_warning_reaches_the_next_request_once_and_stays_out_of_the_memory() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    ran: list[str] = []
    model = Scripted(loops_then_answers(3))
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )

    async def go() -> tuple[str, list[ChatMessage]]:
        ctx = Context(agent)
        response = await agent.run("Weather in Paris?", ctx=ctx)
        memory = await ctx.store.get("memory")
        return str(response), await memory.aget_all()

    response, memory = run(go)

    assert response == "It is 18C and cloudy."
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    with_note = [i for i, request in enumerate(model.requests) if notes(request)]
    assert with_note == [3], "only the request after the warned step carries the note"
    last, before = model.requests[3][-1], model.requests[3][-2]
    assert last.role == "user" and last.content == warning, "a user message, last"
    assert before.role == "tool", "after the tool results: every call keeps its result"
    assert not notes(memory), "the memory keeps the true conversation"
    assert [m.role for m in memory[-2:]] == ["tool", "assistant"]


def test_skip_answers_the_model_without_running_the_tool() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    ran: list[str] = []
    model = Scripted(loops_then_answers(6))
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )

    assert str(run(lambda: agent.run("Weather in Paris?"))) == "It is 18C and cloudy."

    assert len(ran) == 4, "the 5th and 6th identical calls were skipped"
    results = [[m for m in r if m.role == "tool"] for r in model.requests]
    assert (results[5][-1].content or "").startswith(NOT_RUN)
    assert (results[6][-1].content or "").startswith(NOT_RUN)
    assert (results[4][-1].content or "") == "18C cloudy"
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


def test_a_healthy_run_is_never_warned() -> None:
    guard = RecordingGuard()
    ran: list[str] = []

    def paginates(turn: int, messages: list[ChatMessage]) -> ChatMessage:
        if turn < 3:
            return calls("search", {"q": "paris weather", "page": turn + 1}, turn)
        return answer("Paris: 18C, cloudy.")

    model = Scripted(paginates)
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )

    assert str(run(lambda: agent.run("Weather in Paris?"))) == "Paris: 18C, cloudy."
    assert len(ran) == 3
    assert {v.action for v in guard.verdicts} == {"ok"}
    assert not any(notes(r) for r in model.requests)
    assert scan(guard.events, config=guard.config).verdict == "ok"


def test_a_context_is_a_conversation_and_each_run_a_user_turn() -> None:
    guard = RecordingGuard()
    model = Scripted(lambda turn, messages: answer("Sunny."))
    agent = LoopwatchLlamaIndex(guard).attach(FunctionAgent(tools=[], llm=model.llm))

    async def go() -> None:
        ctx = Context(agent)
        await agent.run("Weather in Paris?", ctx=ctx)
        await agent.run("And in Rome?", ctx=ctx)
        await agent.run("Something else")  # no context: a new conversation
        mine = Context(agent)
        await mine.store.set(RUN_ID_KEY, "ticket-7")
        await agent.run("Mine", ctx=mine)

    run(go)
    pairs = zip(guard.run_ids, guard.events, strict=True)
    users = [(r, e["text"]) for r, e in pairs if e["kind"] == "user"]
    assert [t for _, t in users] == ["Weather in Paris?", "And in Rome?", "Something else", "Mine"]
    assert users[0][0] == users[1][0] != users[2][0]
    assert users[3][0] == "ticket-7"


def test_a_stop_is_raised_once_and_the_conversation_goes_on() -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    # the defaults tell the 3rd identical call and stop the 4th: the script's last call
    model = Scripted(loops_then_answers(4))
    agent = LoopwatchLlamaIndex(guard).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )

    async def go() -> str:
        ctx = Context(agent)
        with pytest.raises(LoopDetected):
            await agent.run("Weather in Paris?", ctx=ctx)
        return str(await agent.run("Thanks. And tomorrow?", ctx=ctx))

    assert run(go) == "It is 18C and cloudy."


def test_agent_workflow_handoffs_and_each_agent_named() -> None:
    guard = RecordingGuard()
    ran: list[str] = []

    def manager_script(turn: int, messages: list[ChatMessage]) -> ChatMessage:
        handoff = {"to_agent": "researcher", "reason": "Find the weather in Paris."}
        return calls("handoff", handoff, turn)

    manager = FunctionAgent(
        name="manager",
        description="Plans the work.",
        llm=Scripted(manager_script).llm,
        can_handoff_to=["researcher"],
    )
    researcher = FunctionAgent(
        name="researcher",
        description="Finds things on the web.",
        tools=[make_search(ran)],
        llm=Scripted(loops_then_answers(30)).llm,
    )
    workflow = LoopwatchLlamaIndex(guard).attach(
        AgentWorkflow(agents=[manager, researcher], root_agent="manager")
    )

    with pytest.raises(LoopDetected) as caught:
        run(lambda: workflow.run("Weather in Paris?"))

    assert "search" in str(caught.value)
    # the defaults tell the researcher's 3rd identical search and stop its 4th
    assert len(set(guard.run_ids)) == 1 and len(ran) == 2
    handoff = next(e for e in guard.events if e.get("to") == "researcher")
    assert handoff == {
        "kind": "model",
        "agent": "manager",
        "to": "researcher",
        "text": "Find the weather in Paris.",
    }
    assert {e["agent"] for e in guard.events if e["kind"] == "tool_call"} == {"researcher"}
    assert {e.get("agent") for e in guard.events if e["kind"] == "model"} == {
        "manager",
        "researcher",
    }
    assert caught.value.verdict.step == scan(guard.events, config=guard.config).first_stop


def test_react_agent_with_a_text_llm_is_watched_too() -> None:
    guard = RecordingGuard()
    ran: list[str] = []
    step = 'Thought: I need the weather.\nAction: search\nAction Input: {"q": "paris weather"}'
    model = Scripted(lambda turn, messages: answer(step))
    agent = LoopwatchLlamaIndex(guard).attach(
        ReActAgent(tools=[make_search(ran)], llm=model.llm, streaming=False)
    )

    with pytest.raises(LoopDetected):
        run(lambda: agent.run("Weather in Paris?"))
    assert len(ran) == 2, "the defaults tell the 3rd identical call and stop the 4th"
    first = next(e for e in guard.events if e["kind"] == "tool_call")
    assert first["args"] == {"q": "paris weather"}


def test_a_tool_that_takes_the_context_still_gets_it() -> None:
    seen: list[Any] = []

    # (no `from __future__ import annotations` in this file: LlamaIndex finds the
    # context parameter by its annotation object)
    async def remember(ctx: Context, note: str) -> str:
        """Remember a note."""
        seen.append(await ctx.store.get("num_iterations", default=None))
        return "ok"

    def script(turn: int, messages: list[ChatMessage]) -> ChatMessage:
        return calls("remember", {"note": "x"}, turn) if turn == 0 else answer("Done.")

    model = Scripted(script)
    tool = FunctionTool.from_defaults(async_fn=remember)
    agent = LoopwatchLlamaIndex(RecordingGuard()).attach(FunctionAgent(tools=[tool], llm=model.llm))
    assert str(run(lambda: agent.run("Note x."))) == "Done."
    assert seen == [1]


class Broken(Guard):
    async def aobserve(self, run_id: str, event: Any) -> Any:
        raise RuntimeError("loopwatch bug")


def test_a_loopwatch_bug_never_breaks_the_agent() -> None:
    ran: list[str] = []
    model = Scripted(loops_then_answers(2))
    agent = LoopwatchLlamaIndex(Broken()).attach(
        FunctionAgent(tools=[make_search(ran)], llm=model.llm)
    )
    assert str(run(lambda: agent.run("Weather in Paris?"))) == "It is 18C and cloudy."
    assert len(ran) == 2


def test_attach_refuses_what_is_not_an_agent() -> None:
    with pytest.raises(TypeError, match="LlamaIndex agent"):
        LoopwatchLlamaIndex().attach(object())


# -- the same run exported -------------------------------------------------------------------
# A detailed result (40 characters or more) returned twice is told at the 2nd call's result
# and stopped at the 3rd call; a short one ("18C cloudy") is told at the 3rd call and stopped
# at the 4th (it may be a hiccup).
DETAILED = "Paris: 18C, cloudy, wind 10 km/h from the north-west, humidity 71%."


@pytest.mark.parametrize(
    ("first_page", "told_at_call", "stopped_at_call"),
    [
        (DETAILED, 2, 3),
        ("18C cloudy", 3, 4),
    ],
    ids=["detailed", "short"],
)
def test_the_openinference_trace_scans_to_the_live_verdict(
    first_page: str, told_at_call: int, stopped_at_call: int
) -> None:
    """The looping run traced by OpenInference's LlamaIndex instrumentor, let go on
    (``on_loop="warn"``) so that the trace ends normally: the exported trace stops where
    the live guard did.

    What the reader has to get right here: each call is one call although two tool
    spans record it (the adapter's wrapper tool and the tool it wraps), its arguments
    are the bound ``acall(**kwargs)`` (``{"kwargs": {...}}``), and the LLM-kind span of
    the request's preparation (``_prepare_chat_with_tools``, whose output is the
    history about to be sent) is no model turn: read as one, the growing history looked
    like a model restating itself."""
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    guard = RecordingGuard(on_loop="warn")
    ran: list[str] = []
    with openinference(LlamaIndexInstrumentor()) as exporter:
        model = Scripted(loops_then_answers(6))
        agent = LoopwatchLlamaIndex(guard).attach(
            FunctionAgent(tools=[make_search(ran, first_page)], llm=model.llm)
        )
        assert str(run(lambda: agent.run("Weather in Paris?"))) == "It is 18C and cloudy."

    assert len(ran) == 6, "warn: the loop went on to the end"
    [exported] = scan_otlp(exporter.get_finished_spans(), config=Config())
    assert_scans_like_the_live_run(guard.events, exported, told_at_call, stopped_at_call)
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    assert [c["args"] for c in calls] == [{"q": "paris weather"}] * 6
    models = [e for e in exported.events if e["kind"] == "model"]
    assert [m["text"] for m in models] == [e["text"] for e in guard.events if e["kind"] == "model"]
