"""CrewAI with the real package and a scripted model (a ``BaseLLM`` subclass, as CrewAI
intends for custom models), through CrewAI's own tool-call and LLM-call hooks.

crewai pins pydantic below the dev environment's and pulls a vector-store stack, so
``make test`` runs this module in a virtualenv of its own (``.venv-crewai``); in the dev
environment it is skipped. No network: the model is local and telemetry is off.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytest.importorskip("crewai", reason="crewai runs in .venv-crewai (make test)")

from crewai import Agent, Crew, Task
from crewai.llms.base_llm import BaseLLM
from crewai.tools import tool
from frameworks_a import ROOT, assert_scans_like_the_live_run, run_example, run_snippet, scan_otlp
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, LoopDetected, scan
from loopwatch.integrations.crewai import LoopStopped, LoopwatchCrewAI

QUESTION = "What is the weather in Paris?"
ANSWER = "It is 18C and cloudy in Paris."
Script = Callable[[int, list[dict[str, Any]]], Any]


def call(turn: int, args: dict[str, Any] | None = None, name: str = "web_search") -> Any:
    """A native tool call (OpenAI's shape, which CrewAI executes)."""
    arguments = json.dumps(args if args is not None else {"q": "paris"})
    return [
        {
            "id": f"call-{turn}",
            "type": "function",
            "function": {"name": name, "arguments": arguments},
        }
    ]


class Scripted(BaseLLM):
    """A model that answers each request with ``script(turn, messages)`` and keeps a copy
    of every request it was sent."""

    def __init__(self, script: Script, react: bool = False) -> None:
        super().__init__(model="scripted")
        self._script = script
        self._react = react
        self.requests: list[list[dict[str, Any]]] = []

    def call(self, messages: Any, tools: Any = None, *args: Any, **kwargs: Any) -> Any:
        sent = (
            [dict(m) for m in messages]
            if isinstance(messages, list)
            else [{"role": "user", "content": messages}]
        )
        self.requests.append(sent)
        return self._script(len(self.requests), sent)

    def supports_function_calling(self) -> bool:
        return not self._react

    def get_context_window_size(self) -> int:
        return 100_000


def stuck(turn: int, messages: list[dict[str, Any]]) -> Any:
    return call(turn)


def notes(request: list[dict[str, Any]]) -> list[str]:
    return [str(m.get("content")) for m in request if "[loopwatch]" in str(m.get("content"))]


class Searches:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

        @tool("web_search")
        def web_search(q: str, page: int = 1) -> str:
            """Search the web."""
            self.ran.append({"q": q, "page": page})
            return "Paris: 18C, cloudy." if page == 1 else f"page {page}: more results"

        self.tool = web_search


def crew_of(model: Scripted, searches: Searches, role: str = "researcher") -> Crew:
    agent = Agent(
        role=role,
        goal="Answer",
        backstory="Careful.",
        llm=model,
        tools=[searches.tool],
        max_iter=25,
    )
    task = Task(description=QUESTION, expected_output="One sentence.", agent=agent)
    return Crew(agents=[agent], tasks=[task])


@pytest.fixture
def guard() -> Iterator[RecordingGuard]:
    yield RecordingGuard()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository
    # no telemetry, no tracing: nothing leaves the machine
    monkeypatch.setenv("CREWAI_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("CREWAI_TRACING_ENABLED", "false")


def test_a_stuck_crew_is_warned_once_then_stopped() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    model, searches = Scripted(stuck), Searches()
    crew = crew_of(model, searches)
    with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected) as stopped:
        crew.kickoff()
    assert isinstance(stopped.value, LoopStopped)
    message = stopped.value.verdict.message or ""
    assert message.startswith("[loopwatch] Run stopped: You called web_search(")
    # the stopped call did not run; the model was not called after it
    stop_at = guard.first("stop")
    assert stop_at is not None
    assert guard.events[stop_at]["kind"] == "tool_call"
    calls = sum(e["kind"] == "tool_call" for e in guard.events)
    assert len(searches.ran) == calls - 1 and len(model.requests) == calls
    # each warning reaches the model once, in the next request only, after the results
    warned = [i for i, request in enumerate(model.requests) if notes(request)]
    assert warned, "the model was warned before the stop"
    for i in warned:
        request = model.requests[i]
        assert request[-1]["role"] == "user" and "[loopwatch] Warning" in request[-1]["content"]
        assert request[-2]["role"] == "tool"  # the call's result stays right after it
        assert len(notes(request)) == 1
    shown = [note for request in model.requests for note in notes(request)]
    assert len(shown) == len(set(shown)), "a warning is shown once: never kept in the history"
    # the live stop is the stop the offline scan finds in the same events
    report = scan(guard.events, config=guard.config)
    assert report.first_stop == stop_at
    assert set(guard.run_ids) == {str(crew.id)}
    assert guard.events[0] == {"kind": "user", "text": QUESTION}
    assert {e.get("agent") for e in guard.events[1:]} == {"researcher"}


def test_on_the_defaults_the_3rd_call_is_answered_with_why_and_the_4th_stopped(
    guard: RecordingGuard,
) -> None:
    """A stop is earned: on a short result ("Paris: 18C, cloudy."), the 3rd identical call
    is told (``before_tool_call`` returns False: the tool does not run, the model gets
    why as the call's result), the 4th, the agent persisting, stops the crew."""
    model, searches = Scripted(stuck), Searches()
    crew = crew_of(model, searches)
    with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected) as stopped:
        crew.kickoff()
    assert str(stopped.value).startswith("[loopwatch] Run stopped: You called web_search(")
    assert len(searches.ran) == 2 and len(model.requests) == 4
    results = [m["content"] for m in model.requests[3] if m["role"] == "tool"]
    assert results[:2] == ["Paris: 18C, cloudy."] * 2
    assert results[2].startswith("[loopwatch] This call was not executed.")
    assert results[2].endswith("If you do it again, the run will be stopped.")
    report = scan(guard.events, config=guard.config)
    assert guard.first("skip") == report.first_warn
    assert stopped.value.verdict.step == report.first_stop == guard.first("stop")
    assert sum(e["kind"] == "tool_call" for e in guard.events) == 4


def test_skip_answers_the_call_with_why() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})

    def script(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn) if turn <= 6 else ANSWER

    model, searches = Scripted(script), Searches()
    crew = crew_of(model, searches)
    with LoopwatchCrewAI(guard=guard):
        result = crew.kickoff()
    assert result.raw == ANSWER
    skipped = [v for v in guard.verdicts if v.action.value == "skip"]
    assert skipped and len(searches.ran) == 6 - len(skipped)
    results = [m for m in model.requests[-1] if m["role"] == "tool"]
    assert len(results) == 6  # every call has its result
    answered = [m["content"] for m in results if "[loopwatch]" in m["content"]]
    assert answered == [v.message for v in skipped]
    assert not any("blocked by hook" in m["content"] for m in results)


def test_a_healthy_run_is_never_warned(guard: RecordingGuard) -> None:
    def script(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn, {"q": "paris", "page": turn}) if turn <= 4 else ANSWER

    model, searches = Scripted(script), Searches()
    with LoopwatchCrewAI(guard=guard):
        result = crew_of(model, searches).kickoff()
    assert result.raw == ANSWER
    assert len(searches.ran) == 4
    assert {v.action.value for v in guard.verdicts} == {"ok"}
    assert not any(notes(r) for r in model.requests)
    kinds = [e["kind"] for e in guard.events]
    assert kinds == ["user"] + ["tool_call", "tool_result"] * 4 + ["model"]


def test_each_kickoff_is_a_user_turn_of_the_crews_run(guard: RecordingGuard) -> None:
    def script(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn) if turn % 2 else ANSWER

    model, searches = Scripted(script), Searches()
    crew = crew_of(model, searches)
    with LoopwatchCrewAI(guard=guard):
        crew.kickoff()
        crew.kickoff()
    assert [e["kind"] for e in guard.events].count("user") == 2
    assert set(guard.run_ids) == {str(crew.id)}


def test_a_stopped_crew_can_be_kicked_off_again(guard: RecordingGuard) -> None:
    model, searches = Scripted(stuck), Searches()
    crew = crew_of(model, searches)
    with LoopwatchCrewAI(guard=guard) as watch:
        with pytest.raises(LoopDetected):
            crew.kickoff()
        assert watch.stopped.get(str(crew.id)) is not None
        model._script = lambda turn, messages: ANSWER
        assert crew.kickoff().raw == ANSWER
    assert [e["kind"] for e in guard.events].count("user") == 2


def test_async_kickoffs_are_stopped(guard: RecordingGuard) -> None:
    for kickoff in ("kickoff_async", "akickoff"):
        model, searches = Scripted(stuck), Searches()
        crew = crew_of(model, searches)
        with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected) as stopped:
            asyncio.run(getattr(crew, kickoff)())
        assert "web_search" in str(stopped.value), kickoff
        assert len(searches.ran) <= 5, kickoff


def test_a_streamed_kickoff_is_stopped(guard: RecordingGuard) -> None:
    model, searches = Scripted(stuck), Searches()
    crew = crew_of(model, searches)
    crew.stream = True
    with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected):
        streaming = crew.kickoff()
        for _ in streaming:
            pass
        streaming.result  # noqa: B018 - raises the run's error
    assert guard.first("stop") is not None and len(searches.ran) <= 5


def test_a_react_agent_is_stopped_by_loopwatch(guard: RecordingGuard) -> None:
    """A model without native tool calls (CrewAI parses Action / Action Input text)."""

    def script(turn: int, messages: list[dict[str, Any]]) -> str:
        return 'Thought: search\nAction: web_search\nAction Input: {"q": "paris"}'

    model, searches = Scripted(script, react=True), Searches()
    with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected):
        crew_of(model, searches).kickoff()
    assert guard.first("stop") is not None
    assert {e["kind"] for e in guard.events} == {"user", "model", "tool_call", "tool_result"}


def test_a_multi_agent_crew_is_one_run_naming_each_agent(guard: RecordingGuard) -> None:
    searches = Searches()

    def worker(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn, {"q": "paris", "page": turn}) if turn == 1 else "Paris: 18C."

    boss_model, worker_model = Scripted(stuck), Scripted(worker)
    boss = Agent(role="boss", goal="g", backstory="b", llm=boss_model, tools=[searches.tool])
    helper = Agent(role="worker", goal="g", backstory="b", llm=worker_model, tools=[searches.tool])
    tasks = [
        Task(description="Find the weather.", expected_output="facts", agent=helper),
        Task(description="Write it up.", expected_output="a sentence", agent=boss),
    ]
    crew = Crew(agents=[helper, boss], tasks=tasks)
    with LoopwatchCrewAI(guard=guard), pytest.raises(LoopDetected):
        crew.kickoff()
    assert set(guard.run_ids) == {str(crew.id)}
    agents = [e.get("agent") for e in guard.events if e["kind"] != "user"]
    assert agents[0] == "worker" and agents[-1] == "boss"
    assert [e["kind"] for e in guard.events].count("user") == 1


def test_a_loopwatch_bug_does_not_break_the_crew() -> None:
    class Broken(Guard):
        def observe(self, run_id: str, event: Any) -> Any:
            raise ValueError("boom")

    def script(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn) if turn <= 4 else ANSWER  # (CrewAI itself ends the 5th)

    model, searches = Scripted(script), Searches()
    with LoopwatchCrewAI(guard=Broken()):
        assert crew_of(model, searches).kickoff().raw == ANSWER
    assert len(searches.ran) == 4


def test_unregister_takes_the_hooks_out(guard: RecordingGuard) -> None:
    from crewai.hooks import get_before_tool_call_hooks

    watch = LoopwatchCrewAI(guard=guard).register()
    watch.register()  # twice: still once
    assert get_before_tool_call_hooks().count(watch.before_tool_call) == 1
    watch.unregister()
    assert watch.before_tool_call not in get_before_tool_call_hooks()
    model, searches = Scripted(lambda turn, messages: ANSWER), Searches()
    crew_of(model, searches).kickoff()
    assert guard.events == []


def test_passing_guard_and_keywords_is_refused() -> None:
    with pytest.raises(TypeError):
        LoopwatchCrewAI(Guard(), on_loop="skip")


def test_example_stops_the_loop_by_call_8() -> None:
    stopped_at, out = run_example("crewai")
    assert stopped_at <= 8 and "[loopwatch] Run stopped" in out, out


def readme_snippet() -> str:
    section = (ROOT / "docs" / "integrations" / "crewai.md").read_text(encoding="utf-8")
    found = [
        code
        for code in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
        if "loopwatch.integrations.crewai import" in code
    ]
    assert len(found) == 1, found
    return found[0]


def test_the_readme_snippet_runs_and_stops_the_loop() -> None:
    searches = Searches()
    model = Scripted(stuck)
    names, printed = run_snippet(readme_snippet(), model=model, web_search=searches.tool)
    names["watch"].unregister()
    assert printed.strip().splitlines()[-1].startswith("[loopwatch] Run stopped: You called")
    assert len(searches.ran) == 2  # the 3rd identical call, after two same results, did not run


def test_an_agent_kicked_off_on_its_own_is_its_own_run(guard: RecordingGuard) -> None:
    model, searches = Scripted(stuck), Searches()
    agent = Agent(role="solo", goal="g", backstory="b", llm=model, tools=[searches.tool])
    with LoopwatchCrewAI(guard=guard):
        with pytest.raises(LoopDetected):
            agent.kickoff(QUESTION)
        model._script = lambda turn, messages: ANSWER
        assert agent.kickoff("And in Rome?").raw == ANSWER
    assert set(guard.run_ids) == {str(agent.id)}
    users = [e["text"] for e in guard.events if e["kind"] == "user"]
    assert len(users) == 2 and QUESTION in users[0] and "Rome" in users[1]
    assert len(searches.ran) == 2  # the 3rd identical call, after two same results, was stopped


def test_a_model_call_outside_an_agents_loop_is_not_a_step(guard: RecordingGuard) -> None:
    from crewai.hooks import LLMCallHookContext

    model = Scripted(lambda turn, messages: ANSWER)
    agent = Agent(role="solo", goal="g", backstory="b", llm=model)
    direct = LLMCallHookContext(messages=[{"role": "user", "content": "hi"}], agent=agent)
    direct.response = ANSWER
    watch = LoopwatchCrewAI(guard=guard)
    assert watch.before_llm_call(direct) is None and watch.after_llm_call(direct) is None
    assert guard.events == []


# -- the same run, exported as a trace and scanned ------------------------------------------------
@contextlib.contextmanager
def openinference_trace(config: Any = None) -> Iterator[Any]:
    """CrewAI traced by OpenInference's instrumentor into an in-memory exporter (CrewAI's
    own telemetry goes to CrewAI, not to a user's trace); uninstrumented afterwards."""
    from openinference.instrumentation.crewai import CrewAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = CrewAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider, **({"config": config} if config else {}))
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
        provider.shutdown()


def test_the_openinference_trace_of_a_crew_scans_to_the_live_verdict() -> None:
    """The same looping crew (native tool calls), traced by OpenInference's CrewAI
    instrumentor and scanned afterwards: the scan stops at the call where the live hooks
    would have, with the same findings.

    With ``on_loop="warn"`` the run goes on, but not past CrewAI's own repeated-call guard:
    the 5th identical call with the same result raises ``ToolExecutionFailedError`` after
    the tool ran (in native and ReAct mode alike), so the trace ends there, its spans
    closed, rather than with an answer. loopwatch's defaults tell the 3rd (a short
    result) and stop the 4th.
    """
    from crewai.tools.tool_failure import ToolExecutionFailedError

    guard = RecordingGuard(on_loop="warn")
    model, searches = Scripted(stuck), Searches()
    with openinference_trace() as exporter:
        with LoopwatchCrewAI(guard=guard), pytest.raises(ToolExecutionFailedError):
            crew_of(model, searches).kickoff()
        spans = exporter.get_finished_spans()
    assert len(searches.ran) == 5

    [exported] = scan_otlp(spans, config=Config())
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    assert [c.get("args") for c in calls] == [{"q": "paris"}] * 5
    # both scanned with the default configuration, where the 3rd identical call (a short
    # result) is told and the 4th stopped
    assert_scans_like_the_live_run(guard.events, exported)


def test_a_trace_with_hidden_inputs_and_outputs_stops_no_healthy_crew() -> None:
    """``OPENINFERENCE_HIDE_INPUTS`` / ``_OUTPUTS`` (``TraceConfig(hide_inputs=True,
    hide_outputs=True)``) write ``__REDACTED__`` for every tool's input and output. Read
    as values, six different searches were one call with one result, six times, and a
    healthy crew was stopped; they are unknown, like a value the trace does not carry."""
    from openinference.instrumentation import TraceConfig

    def script(turn: int, messages: list[dict[str, Any]]) -> Any:
        return call(turn, {"q": "paris", "page": turn}) if turn <= 6 else ANSWER

    guard = RecordingGuard(on_loop="warn")
    model, searches = Scripted(script), Searches()
    with openinference_trace(TraceConfig(hide_inputs=True, hide_outputs=True)) as exporter:
        with LoopwatchCrewAI(guard=guard):
            assert crew_of(model, searches).kickoff().raw == ANSWER
        spans = exporter.get_finished_spans()

    [exported] = scan_otlp(spans, config=Config())
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    results = [e for e in exported.events if e["kind"] == "tool_result"]
    assert len(calls) == len(results) == 6
    assert all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert all("text" not in r and r["unknown"] == ["text"] for r in results)
    assert exported.meta["unknown"]["tool_args"] == 6
    assert exported.verdict == scan(guard.events, config=Config()).verdict == "ok"
