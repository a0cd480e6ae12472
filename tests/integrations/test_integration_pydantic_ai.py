"""Pydantic AI with the real package and its scripted ``FunctionModel``.

The model function sees every request exactly as Pydantic AI prepared it for a
provider (request-scoped system prompts rendered, history as sent), so the tests
assert what the model saw. No network: no provider model is ever built.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from frameworks_a import assert_scans_like_the_live_run, readme_snippet, run_snippet, scan_otlp
from pydantic_ai import Agent, RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, LoopDetected, scan
from loopwatch.integrations.pydantic_ai import LoopwatchCapability

MODES = ["sync", "async", "stream"]
QUESTION = "What is the weather in Paris?"


def turn_of(messages: list[ModelMessage]) -> int:
    """How many responses the model already gave in this run."""
    start = max(i for i, m in enumerate(messages) if _has_user_prompt(m))
    return sum(isinstance(m, ModelResponse) for m in messages[start:])


def _has_user_prompt(message: ModelMessage) -> bool:
    return isinstance(message, ModelRequest) and any(
        isinstance(p, UserPromptPart) and not str(p.content).startswith("<system>")
        for p in message.parts
    )


class Script:
    """A scripted model: the same search ``turns`` times, then an answer; it keeps
    every request it was sent."""

    def __init__(
        self,
        turns: int,
        args: Any = None,
        answer: str = "It is 18C and cloudy.",
        tool: str = "search",
    ):
        self.turns = turns
        self.tool = tool
        self.args = args or (lambda n: {"q": "paris weather"})
        self.answer = answer
        self.requests: list[list[ModelMessage]] = []

    def step(self, messages: list[ModelMessage]) -> tuple[int, Any]:
        self.requests.append(list(messages))
        n = turn_of(messages)
        return n, (self.args(n) if n < self.turns else None)

    def __call__(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n, args = self.step(messages)
        if args is None:
            return ModelResponse(parts=[TextPart(self.answer)])
        return ModelResponse(parts=[ToolCallPart(self.tool, args, tool_call_id=f"call-{n}")])

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> Any:
        n, args = self.step(messages)
        if args is None:
            yield self.answer
        else:
            yield {
                0: DeltaToolCall(name=self.tool, json_args=_json(args), tool_call_id=f"call-{n}")
            }

    def model(self) -> FunctionModel:
        return FunctionModel(self, stream_function=self.stream)


def _json(args: Any) -> str:
    import json

    return json.dumps(args)


def make_agent(
    guard: Guard, script: Script, ran: list[dict[str, Any]], *more: Any
) -> Agent[None, str]:
    agent = Agent(
        script.model(), name="researcher", capabilities=[LoopwatchCapability(guard), *more]
    )

    @agent.tool_plain
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        ran.append({"q": q, "page": page})
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    return agent


def run(agent: Agent[None, str], mode: str, prompt: str = QUESTION, **kwargs: Any) -> Any:
    if mode == "sync":
        return agent.run_sync(prompt, **kwargs).output

    async def streamed() -> Any:
        async with agent.run_stream(prompt, **kwargs) as response:
            return await response.get_output()

    if mode == "stream":
        return asyncio.run(streamed())
    return asyncio.run(agent.run(prompt, **kwargs)).output


def shape(request: list[ModelMessage]) -> list[list[tuple[str, str]]]:
    """What a request says, without timestamps and ids of the run."""
    return [
        [(p.part_kind, str(getattr(p, "content", "") or getattr(p, "args", ""))) for p in m.parts]
        for m in request
    ]


def sent_texts(request: list[ModelMessage]) -> list[tuple[str, str]]:
    """The last request message's parts as the model got them: (kind, text)."""
    last = request[-1]
    return [(p.part_kind, str(getattr(p, "content", ""))) for p in last.parts]


@pytest.mark.parametrize("mode", MODES)
def test_stop_raises_loop_detected_at_the_event_scan_reports(mode: str) -> None:
    guard = RecordingGuard()
    ran: list[dict[str, Any]] = []
    script = Script(10)
    agent = make_agent(guard, script, ran)

    with pytest.raises(LoopDetected) as caught:
        run(agent, mode, conversation_id="r-stop")

    verdict = caught.value.verdict
    assert verdict.action == "stop" and "search" in str(caught.value)
    assert str(caught.value) == verdict.message
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[0] == {"kind": "user", "text": QUESTION}
    assert guard.events[verdict.step]["kind"] == "tool_call"
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, the model read why as its return), the 4th, the
    # agent persisting, stopped before running
    assert len(ran) == 2 and len(script.requests) == 4, "the 3rd and 4th calls never ran"
    assert guard.first("skip") == report.first_warn
    returns = {
        p.tool_call_id: str(p.content)
        for m in script.requests[3]
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert returns["call-0"] == returns["call-1"] == "18C cloudy"
    assert returns["call-2"].startswith("[loopwatch] This call was not executed.")
    assert "search" in returns["call-2"]
    assert set(guard.run_ids) == {"r-stop"}
    assert all(e.get("agent") == "researcher" for e in guard.events[1:])


@pytest.mark.parametrize("mode", MODES)
def test_warning_reaches_the_next_request_only_after_the_tool_return(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    script = Script(3)
    agent = make_agent(guard, script, [])

    assert run(agent, mode) == "It is 18C and cloudy."

    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    carrying = [
        i
        for i, request in enumerate(script.requests)
        if any(warning in str(getattr(p, "content", "")) for m in request for p in m.parts)
        and any(warning in text for _, text in sent_texts(request))
    ]
    assert carrying == [3], "only the request after the warned call shows it"
    kinds = [kind for kind, _ in sent_texts(script.requests[3])]
    assert kinds[0] == "tool-return", "the tool return stays paired with its call"
    later = [text for request in script.requests[4:] for _, text in sent_texts(request)]
    assert not any(warning in text for text in later)


@pytest.mark.parametrize("mode", MODES)
def test_skip_answers_the_call_without_running_the_tool(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    ran: list[dict[str, Any]] = []
    script = Script(6)
    agent = make_agent(guard, script, ran)

    assert run(agent, mode) == "It is 18C and cloudy."

    assert len(ran) == 4, "the 5th and 6th identical calls were answered, not run"
    returns = {
        p.tool_call_id: str(p.content)
        for m in script.requests[-1]
        for p in m.parts
        if isinstance(p, ToolReturnPart)
    }
    assert returns["call-3"] == "18C cloudy"
    for skipped in ("call-4", "call-5"):
        assert returns[skipped].startswith("[loopwatch] This call was not executed.")
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


@pytest.mark.parametrize("mode", MODES)
def test_a_healthy_run_is_never_warned_and_sees_the_same_requests(mode: str) -> None:
    def pages() -> Script:
        return Script(3, args=lambda n: {"q": "paris weather", "page": n + 1}, answer="Page 3.")

    plain_script = pages()
    plain = Agent(plain_script.model(), name="researcher")

    @plain.tool_plain
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    baseline = run(plain, mode)
    guard = RecordingGuard()
    script = pages()
    agent = make_agent(guard, script, [])

    assert run(agent, mode) == baseline == "Page 3."
    assert all(v.action == "ok" for v in guard.verdicts)
    assert [e["kind"] for e in guard.events] == ["user"] + [
        "model",
        "tool_call",
        "tool_result",
    ] * 3 + ["model"]
    assert [shape(r) for r in script.requests] == [shape(r) for r in plain_script.requests]


def test_conversation_id_is_the_run_and_each_prompt_a_user_turn() -> None:
    """deer-flow's report: the user asks for the weather once per turn; the lookup
    repeated across eight turns of one conversation is never stopped."""
    guard = RecordingGuard()
    script = Script(1)
    agent = make_agent(guard, script, [])
    history: list[ModelMessage] = []
    for turn in range(8):
        result = agent.run_sync(
            f"Weather in Paris, turn {turn}?", message_history=history, conversation_id="c-1"
        )
        history = result.all_messages()
    assert set(guard.run_ids) == {"c-1"}
    assert [e["kind"] for e in guard.events].count("user") == 8
    assert all(v.action == "ok" for v in guard.verdicts)


def test_a_tool_error_is_observed_and_still_reaches_the_agent() -> None:
    guard = RecordingGuard()
    agent = Agent(Script(1).model(), capabilities=[LoopwatchCapability(guard)])

    @agent.tool_plain
    def search(q: str) -> str:
        """Search the web."""
        raise RuntimeError("backend down")

    with pytest.raises(RuntimeError, match="backend down"):
        agent.run_sync(QUESTION)
    assert guard.events[-1]["kind"] == "tool_result" and guard.events[-1]["error"] is True
    assert "backend down" in guard.events[-1]["text"]


def test_delegation_joins_the_outer_run_with_each_agents_name() -> None:
    """An agent that delegates to another from a tool: one loopwatch run, events named
    by agent, the delegate's prompt a span (not a new user turn), so the ping-pong of
    the two agents restating the same request is stopped."""
    guard = RecordingGuard()
    lw = LoopwatchCapability(guard)

    def worker_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[TextPart("Could you clarify which report you need?")])

    worker = Agent(FunctionModel(worker_model), name="worker", capabilities=[lw])

    def boss_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        n = sum(isinstance(m, ModelResponse) for m in messages)
        text = "Please clarify which report you need me to write."
        call = ToolCallPart("delegate", {"task": "write the report"}, tool_call_id=f"d{n}")
        return ModelResponse(parts=[TextPart(text), call])

    boss = Agent(FunctionModel(boss_model), name="boss", capabilities=[lw])

    @boss.tool
    async def delegate(ctx: RunContext[None], task: str) -> str:
        """Hand the task to the worker."""
        return (await worker.run(task, usage=ctx.usage)).output

    with pytest.raises(LoopDetected):
        boss.run_sync(QUESTION, conversation_id="team-1")

    assert set(guard.run_ids) == {"team-1"}
    kinds = [e["kind"] for e in guard.events]
    assert kinds.count("user") == 1 and "span" in kinds
    spans = [e for e in guard.events if e["kind"] == "span"]
    assert all(s["name"] == "worker" and s["type"] == "agent" for s in spans)
    assert {e.get("agent") for e in guard.events if e["kind"] == "model"} == {"boss", "worker"}
    report = scan(guard.events, config=guard.config)
    assert report.verdict == "stop"
    assert "ping_pong" in {f.detector for f in report.findings}, "the exchange is seen"


def test_passing_guard_and_keywords_is_refused() -> None:
    with pytest.raises(TypeError):
        LoopwatchCapability(Guard(), on_loop="skip")


def test_the_otel_trace_pydantic_ai_exports_scans_to_the_live_verdict() -> None:
    """The same looping run, instrumented with Pydantic AI's own OpenTelemetry
    instrumentation (in-memory exporter), scanned afterwards: the scan stops where
    the live capability did."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from pydantic_ai.capabilities import Instrumentation
    from pydantic_ai.models.instrumented import InstrumentationSettings

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = InstrumentationSettings(tracer_provider=provider, include_content=True)

    guard = RecordingGuard(on_loop="warn")  # let the run go on: the trace ends normally
    ran: list[dict[str, Any]] = []
    agent = make_agent(guard, Script(6), ran, Instrumentation(settings=settings))
    agent.run_sync(QUESTION, conversation_id="otel-1")

    # both scanned with the default configuration, where the 3rd identical call (a short
    # result) is told and the 4th stopped
    [exported] = scan_otlp(exporter.get_finished_spans(), config=Config())
    assert_scans_like_the_live_run(guard.events, exported)


def test_the_readme_snippet_runs_and_stops_the_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository

    def web_search(q: str) -> str:
        """Search the web."""
        return "18C, cloudy"

    _, out = run_snippet(
        readme_snippet("pydantic_ai"),
        model=Script(10, tool="web_search").model(),
        web_search=web_search,
    )
    assert out.startswith("[loopwatch] Run stopped") and "web_search" in out
