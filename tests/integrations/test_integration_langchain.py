"""LangChain v1 create_agent and LangGraph with the real packages and a scripted model.

The scripted chat model records every request it receives, so the tests assert what
the model saw; a recording guard keeps the events the middleware observed, so the
tests check the live stop against ``loopwatch.scan`` of the same events.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from pydantic import Field
from test_integration_decorator import RecordingGuard

from loopwatch import ConfigError, Guard, LoopDetected, scan
from loopwatch.integrations.langchain import LoopwatchCallbackHandler, LoopwatchMiddleware

Script = Callable[[int, list[BaseMessage]], AIMessage]


class ScriptedChatModel(BaseChatModel):
    """A chat model that answers from a script and records each request it gets.

    ``script(turn, messages)`` returns the reply for the 0-based ``turn``.
    ``bind_tools`` returns the model itself: the script decides the tool calls.
    """

    script: Any
    requests: list[list[BaseMessage]] = Field(default_factory=list)

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:  # type: ignore[override]
        return self

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        turn = len(self.requests)
        self.requests.append(list(messages))
        reply = self.script(turn, list(messages))
        return ChatResult(generations=[ChatGeneration(message=reply)])


def calls(name: str, args: dict[str, Any], turn: int, text: str = "") -> AIMessage:
    return AIMessage(content=text, tool_calls=[{"name": name, "args": args, "id": f"call-{turn}"}])


def relentless(turn: int, messages: list[BaseMessage]) -> AIMessage:
    """Calls the same tool with the same arguments for ever."""
    return calls("search", {"q": "paris weather"}, turn)


def loops_then_answers(times: int) -> Script:
    def script(turn: int, messages: list[BaseMessage]) -> AIMessage:
        if turn < times:
            return calls("search", {"q": "paris weather"}, turn)
        return AIMessage(content="It is 18C and cloudy in Paris.")

    return script


def paginates(turn: int, messages: list[BaseMessage]) -> AIMessage:
    """A clean agent: reads pages 1..3 (different calls, different results), answers."""
    if turn < 3:
        return calls("search", {"q": "paris weather", "page": turn + 1}, turn)
    return AIMessage(content="Found it on page 3: 18C and cloudy.")


class Counter:
    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []


def make_search(counter: Counter) -> Any:
    @tool
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        counter.calls.append({"q": q, "page": page})
        if page > 1:
            return f"page {page}: {'18C and cloudy' if page == 3 else 'nothing yet'}"
        return "18C cloudy"

    return search


def run_agent(agent: Any, mode: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    payload = {"messages": [{"role": "user", "content": "What is the weather in Paris?"}]}
    cfg = {"recursion_limit": 80, **(config or {})}
    if mode == "sync":
        return agent.invoke(payload, cfg)  # type: ignore[no-any-return]
    return asyncio.run(agent.ainvoke(payload, cfg))  # type: ignore[no-any-return]


def loopwatch_notes(request: list[BaseMessage]) -> list[BaseMessage]:
    return [m for m in request if isinstance(m, HumanMessage) and m.name == "loopwatch"]


MODES = ["sync", "async"]


@pytest.mark.parametrize("mode", MODES)
def test_stop_ends_the_run_where_scan_says_and_the_tool_never_runs(mode: str) -> None:
    guard = RecordingGuard()
    model = ScriptedChatModel(script=relentless)
    counter = Counter()
    agent = create_agent(
        model, tools=[make_search(counter)], middleware=[LoopwatchMiddleware(guard)]
    )

    result = run_agent(agent, mode)

    report = scan(guard.events, config=guard.config)
    assert report.first_stop is not None
    assert guard.first("stop") == report.first_stop == len(guard.events) - 1
    assert guard.events[report.first_stop]["kind"] == "tool_call"
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: an error tool message instead of running the tool, which the model
    # read), the 4th, the agent persisting, stopped before running
    assert len(counter.calls) == 2
    assert len(model.requests) == 4
    assert guard.first("skip") == report.first_warn
    told = model.requests[3][-1]
    assert isinstance(told, ToolMessage) and told.status == "error"
    assert told.tool_call_id == "call-2"
    assert told.content.startswith("[loopwatch] This call was not executed.")
    assert told.content.endswith("If you do it again, the run will be stopped.")
    messages = result["messages"]
    stopped = messages[-2]
    assert isinstance(stopped, ToolMessage) and stopped.status == "error"
    assert stopped.tool_call_id == "call-3"
    assert stopped.content.startswith("[loopwatch] Run stopped:")
    assert isinstance(messages[-1], AIMessage) and messages[-1].content == stopped.content
    assert not messages[-1].tool_calls


@pytest.mark.parametrize("mode", MODES)
def test_warning_goes_into_the_next_request_only_after_the_tool_results(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    model = ScriptedChatModel(script=relentless)
    agent = create_agent(
        model, tools=[make_search(Counter())], middleware=[LoopwatchMiddleware(guard)]
    )

    result = run_agent(agent, mode)

    warn_at = guard.first("warn")
    assert warn_at is not None
    assert scan(guard.events, config=guard.config).first_warn == warn_at
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and warning.startswith("[loopwatch] Warning:")
    with_note = [
        i
        for i, req in enumerate(model.requests)
        if any(note.content == warning for note in loopwatch_notes(req))
    ]
    assert len(with_note) == 1, "the warning is shown in one request only"
    request = model.requests[with_note[0]]
    assert request[-1].content == warning and request[-1] is loopwatch_notes(request)[0]
    assert isinstance(request[-2], ToolMessage), "the warning comes after the tool results"
    # the warn fired on the 3rd call, which then ran: the note follows its result
    assert request[-2].tool_call_id == "call-2"
    # never persisted: the final state has no loopwatch note
    assert not loopwatch_notes(result["messages"])


@pytest.mark.parametrize("mode", MODES)
def test_skip_returns_an_error_tool_message_instead_of_running_the_tool(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    model = ScriptedChatModel(script=loops_then_answers(6))
    counter = Counter()
    agent = create_agent(
        model, tools=[make_search(counter)], middleware=[LoopwatchMiddleware(guard)]
    )

    result = run_agent(agent, mode)

    assert len(counter.calls) == 4, "the 5th and 6th identical calls were skipped"
    skipped = [m for m in result["messages"] if isinstance(m, ToolMessage) and m.status == "error"]
    assert [m.tool_call_id for m in skipped] == ["call-4", "call-5"]
    assert all(m.content.startswith("[loopwatch] This call was not executed.") for m in skipped)
    # the model saw the skip message as the tool's result, and the run went on to answer
    assert any(
        isinstance(m, ToolMessage) and m.tool_call_id == "call-4" and m.status == "error"
        for m in model.requests[5]
    )
    assert result["messages"][-1].content == "It is 18C and cloudy in Paris."
    report = scan(guard.events, config=guard.config)
    assert guard.first("skip") == report.first_stop


@pytest.mark.parametrize("mode", MODES)
def test_a_clean_agent_runs_untouched(mode: str) -> None:
    counter = Counter()
    plain = ScriptedChatModel(script=paginates)
    baseline = run_agent(create_agent(plain, tools=[make_search(counter)]), mode)

    guard = RecordingGuard()
    watched = ScriptedChatModel(script=paginates)
    result = run_agent(
        create_agent(
            watched, tools=[make_search(counter)], middleware=[LoopwatchMiddleware(guard)]
        ),
        mode,
    )

    assert all(v.action == "ok" for v in guard.verdicts)
    # the invocation's input is its user turn, then three lookups and the answer
    assert [e["kind"] for e in guard.events] == ["user"] + [
        "model",
        "tool_call",
        "tool_result",
    ] * 3 + ["model"]
    assert scan(guard.events, config=guard.config).verdict == "ok"

    def shape(messages: list[BaseMessage]) -> list[tuple[str, Any]]:
        return [(type(m).__name__, m.content) for m in messages]

    assert shape(result["messages"]) == shape(baseline["messages"])
    assert [shape(r) for r in watched.requests] == [shape(r) for r in plain.requests]


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_on_model_output_answers_the_pending_tool_calls(mode: str) -> None:
    """Keyword configuration overrides the defaults: an iteration cap of 3 model turns,
    repeated_call off, so the stop comes from a model event with a tool call pending."""
    guard = RecordingGuard(max_iterations=3, repeated_call={"enabled": False})
    model = ScriptedChatModel(script=relentless)
    counter = Counter()
    agent = create_agent(
        model, tools=[make_search(counter)], middleware=[LoopwatchMiddleware(guard)]
    )

    result = run_agent(agent, mode)

    report = scan(guard.events, config=guard.config)
    stop = guard.first("stop")
    assert stop == report.first_stop == len(guard.events) - 1
    assert guard.events[stop]["kind"] == "model"
    assert report.findings[-1].detector == "iteration_cap"
    assert len(model.requests) == report.metrics["iteration_count"]
    assert len(counter.calls) == len(model.requests) - 1, "the last turn's call never ran"
    last_call = f"call-{len(model.requests) - 1}"
    answered = [
        m for m in result["messages"] if isinstance(m, ToolMessage) and m.tool_call_id == last_call
    ]
    assert len(answered) == 1 and answered[0].status == "error"
    assert isinstance(result["messages"][-1], AIMessage)
    assert result["messages"][-1].content.startswith("[loopwatch] Run stopped:")


def test_middleware_keywords_build_the_guard_and_are_validated() -> None:
    middleware = LoopwatchMiddleware(on_loop="warn", repeated_call={"stop_at": 8})
    assert middleware.guard.config.on_loop == "warn"
    assert middleware.guard.config.to_dict()["repeated_call"]["stop_at"] == 8
    with pytest.raises(ConfigError, match="unknown configuration key 'on_lop'"):
        LoopwatchMiddleware(on_loop="warn", on_lop="stop")
    with pytest.raises(ConfigError, match="unknown key 'stop'"):
        LoopwatchMiddleware(repeated_call={"stop": 8})
    with pytest.raises(TypeError, match="not both"):
        LoopwatchMiddleware(Guard(), on_loop="skip")


def test_middleware_reads_loopwatch_toml_from_the_working_directory(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "loopwatch.toml").write_text('on_loop = "skip"\n[repeated_call]\nstop_at = 4\n')
    sub = tmp_path / "app"
    sub.mkdir()
    monkeypatch.chdir(sub)
    middleware = LoopwatchMiddleware()
    assert middleware.guard.config.on_loop == "skip"
    counter = Counter()
    model = ScriptedChatModel(script=loops_then_answers(5))
    run_agent(create_agent(model, tools=[make_search(counter)], middleware=[middleware]), "sync")
    assert len(counter.calls) == 3, "stop_at=4 from the file: the 4th and 5th calls skipped"
    # keywords override the file
    assert LoopwatchMiddleware(on_loop="stop").guard.config.on_loop == "stop"


def test_run_id_is_the_thread_id_and_otherwise_one_per_invocation() -> None:
    guard = RecordingGuard()
    agent = create_agent(
        ScriptedChatModel(script=loops_then_answers(1)),
        tools=[make_search(Counter())],
        middleware=[LoopwatchMiddleware(guard)],
        checkpointer=InMemorySaver(),
    )
    run_agent(agent, "sync", {"configurable": {"thread_id": "thread-7"}})
    assert set(guard.run_ids) == {"thread-7"}
    assert guard.state("thread-7") is not None

    guard2 = RecordingGuard()
    agent2 = create_agent(
        ScriptedChatModel(script=loops_then_answers(1)),
        tools=[make_search(Counter())],
        middleware=[LoopwatchMiddleware(guard2)],
    )
    run_agent(agent2, "sync")
    first = set(guard2.run_ids)
    run_agent(agent2, "async")
    second = set(guard2.run_ids) - first
    assert len(first) == 1 and len(second) == 1 and first != second
    assert next(iter(first)).startswith("lc-")


def test_a_thread_continues_after_a_stop_with_a_valid_history() -> None:
    """After a stop the history is valid: every tool call is answered, so the next
    user turn on the same thread reaches the model."""
    guard = RecordingGuard()
    # the defaults tell the 3rd of these identical calls and stop the 4th: the script has
    # no call left after
    replies = iter([*(calls("search", {"q": "paris weather"}, i) for i in range(4))])

    def script(turn: int, messages: list[BaseMessage]) -> AIMessage:
        return next(replies, AIMessage(content="Sorry, here is what I have: 18C."))

    model = ScriptedChatModel(script=script)
    agent = create_agent(
        model,
        tools=[make_search(Counter())],
        middleware=[LoopwatchMiddleware(guard)],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "t"}}
    run_agent(agent, "sync", cfg)
    assert guard.first("stop") is not None
    answer = agent.invoke({"messages": [{"role": "user", "content": "and now?"}]}, cfg)
    assert answer["messages"][-1].content == "Sorry, here is what I have: 18C."
    ai_calls = {
        c["id"] for m in answer["messages"] if isinstance(m, AIMessage) for c in m.tool_calls
    }
    answered = {m.tool_call_id for m in answer["messages"] if isinstance(m, ToolMessage)}
    assert ai_calls <= answered


@pytest.mark.parametrize("mode", MODES)
def test_callback_handler_raises_before_the_tool_runs(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    handler = LoopwatchCallbackHandler(guard)
    counter = Counter()
    agent = create_agent(ScriptedChatModel(script=relentless), tools=[make_search(counter)])

    with pytest.raises(LoopDetected) as caught:
        run_agent(agent, mode, {"callbacks": [handler]})

    report = scan(guard.events, config=guard.config)
    assert caught.value.verdict.step == report.first_stop == len(guard.events) - 1
    assert caught.value.verdict.findings[0].detector == "repeated_call"
    assert len(counter.calls) == 4
    assert len(set(guard.run_ids)) == 1, "all events of one invocation share a run id"
    assert handler.warnings and all(w.action == "warn" for w in handler.warnings)


def test_callback_handler_uses_the_thread_id() -> None:
    guard = RecordingGuard()
    agent = create_agent(
        ScriptedChatModel(script=loops_then_answers(2)),
        tools=[make_search(Counter())],
        checkpointer=InMemorySaver(),
    )
    run_agent(
        agent,
        "sync",
        {"callbacks": [LoopwatchCallbackHandler(guard)], "configurable": {"thread_id": "th-1"}},
    )
    assert set(guard.run_ids) == {"th-1"}
    assert [e["kind"] for e in guard.events] == ["model", "tool_call", "tool_result"] * 2 + [
        "model"
    ]


FORECAST = "Paris: 18C, cloudy, light wind from the west, no rain expected until Friday."


def rewords(turn: int, messages: list[BaseMessage]) -> AIMessage:
    """Different queries every turn, all answered with the same result: no progress."""
    return calls("forecast", {"q": f"paris weather variant {turn}"}, turn)


def make_forecast(counter: Counter) -> Any:
    @tool
    def forecast(q: str) -> str:
        """Weather forecast."""
        counter.calls.append({"q": q})
        return FORECAST

    return forecast


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_on_a_tool_result_ends_the_run_before_the_next_model_call(mode: str) -> None:
    guard = RecordingGuard(no_progress={"warn_at": 2, "stop_at": 3})
    model = ScriptedChatModel(script=rewords)
    counter = Counter()
    agent = create_agent(
        model, tools=[make_forecast(counter)], middleware=[LoopwatchMiddleware(guard)]
    )

    result = run_agent(agent, mode)

    report = scan(guard.events, config=guard.config)
    stop = guard.first("stop")
    assert stop == report.first_stop == len(guard.events) - 1
    assert guard.events[stop]["kind"] == "tool_result"
    assert "no_progress" in {f.detector for f in report.findings if f.step == stop}
    # the tool ran (its result is kept, marked), and the model was not called again
    assert len(counter.calls) == len(model.requests)
    kept = result["messages"][-2]
    assert isinstance(kept, ToolMessage) and kept.content == FORECAST
    assert kept.response_metadata["loopwatch"]["action"] == "stop"
    assert result["messages"][-1].content.startswith("[loopwatch] Run stopped:")


@pytest.mark.parametrize("mode", MODES)
def test_a_thread_that_looks_the_weather_up_once_per_turn_is_never_stopped(mode: str) -> None:
    """deer-flow's report: every user turn calls web_search("paris weather") once; the
    5th turn was stopped, and every later turn on the thread too."""
    guard = RecordingGuard()
    counter = Counter()

    def script(turn: int, messages: list[BaseMessage]) -> AIMessage:
        if isinstance(messages[-1], HumanMessage):
            return calls("search", {"q": "paris weather"}, turn)
        return AIMessage(content=f"It is 18C and cloudy ({turn}).")

    agent = create_agent(
        ScriptedChatModel(script=script),
        tools=[make_search(counter)],
        middleware=[LoopwatchMiddleware(guard)],
        checkpointer=InMemorySaver(),
    )
    cfg = {"configurable": {"thread_id": "chat-1"}}
    questions = ["Weather in Paris?", "Umbrella tonight?", "And tomorrow?", "A walk later?"]
    for question in questions * 2:
        payload = {"messages": [{"role": "user", "content": question}]}
        if mode == "sync":
            agent.invoke(payload, cfg)
        else:
            asyncio.run(agent.ainvoke(payload, cfg))
    assert len(counter.calls) == 8, "every turn's lookup ran"
    assert guard.first("stop") is None and guard.first("warn") is None
    assert [e["kind"] for e in guard.events].count("user") == 8
    assert scan(guard.events, config=guard.config).verdict == "ok"
