"""Strands Agents with the real package and a scripted model.

The model is a real ``strands.models.Model`` subclass (tests/helpers/strands_script.py) that
streams its turns as Strands' own mocked provider does and keeps every request exactly
as Strands sent it, so the tests assert what the model saw. No network.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from frameworks_a import readme_snippet, run_snippet
from strands import Agent, tool
from strands_script import ScriptedModel, calls_then_answer, stuck
from test_integration_decorator import RecordingGuard

from loopwatch import Guard, LoopDetected, scan
from loopwatch.integrations.strands import LoopwatchHooks

MODES = ["sync", "async", "stream"]
QUESTION = "What is the weather in Paris?"
SKIPPED = "[loopwatch] This call was not executed."


def make_agent(
    guard: Guard, model: ScriptedModel, ran: list[dict[str, Any]], **kwargs: Any
) -> Agent:
    @tool
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        ran.append({"q": q, "page": page})
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    kwargs.setdefault("hooks", [LoopwatchHooks(guard)])
    return Agent(model=model, tools=[search], name="researcher", callback_handler=None, **kwargs)


def run(agent: Agent, mode: str, prompt: str = QUESTION) -> str:
    if mode == "sync":
        return str(agent(prompt)).strip()

    async def streamed() -> str:
        result = None
        async for event in agent.stream_async(prompt):
            if "result" in event:
                result = event["result"]
        return str(result).strip()

    if mode == "stream":
        return asyncio.run(streamed())
    return str(asyncio.run(agent.invoke_async(prompt))).strip()


def last_texts(request: list[dict[str, Any]]) -> list[str]:
    """The text blocks of a request's last message."""
    return [b["text"] for b in request[-1]["content"] if "text" in b]


def tool_results(messages: list[dict[str, Any]]) -> dict[str, tuple[str, str]]:
    """Every tool result of a conversation: id -> (status, text)."""
    return {
        b["toolResult"]["toolUseId"]: (
            b["toolResult"]["status"],
            " ".join(c.get("text", "") for c in b["toolResult"]["content"]),
        )
        for m in messages
        for b in m["content"]
        if "toolResult" in b
    }


def roles_alternate(messages: list[dict[str, Any]]) -> bool:
    """Each tool use answered in the next message, and user/assistant alternating."""
    roles = [m["role"] for m in messages]
    if any(a == b for a, b in itertools.pairwise(roles)):
        return False
    for i, m in enumerate(messages):
        uses = {b["toolUse"]["toolUseId"] for b in m["content"] if "toolUse" in b}
        if uses and (i + 1 >= len(messages) or set(tool_results([messages[i + 1]])) != uses):
            return False
    return True


@pytest.mark.parametrize("mode", MODES)
def test_stop_raises_loop_detected_at_the_event_scan_reports(mode: str) -> None:
    guard = RecordingGuard()
    ran: list[dict[str, Any]] = []
    model = ScriptedModel(stuck("search"))
    agent = make_agent(guard, model, ran)

    with pytest.raises(LoopDetected) as caught:
        run(agent, mode)

    verdict = caught.value.verdict
    assert verdict.action == "stop" and "search" in str(caught.value)
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[0] == {"kind": "user", "text": QUESTION}
    assert guard.events[verdict.step]["kind"] == "tool_call"
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, the model read why as its result), the 4th, the
    # agent persisting, stopped before running
    assert len(ran) == 2 and len(model.requests) == 4, "the 3rd and 4th calls never ran"
    assert guard.first("skip") == report.first_warn
    told = tool_results(model.requests[3])["call-2"]
    assert told[0] == "error" and told[1].startswith(SKIPPED) and "search" in told[1]
    assert set(guard.run_ids) == {agent.session_id}
    assert all(e.get("agent") == "researcher" for e in guard.events[1:])
    # Strands' own stop: the call is answered, the turn ends with the message, and the
    # conversation stays valid for the next turn.
    assert tool_results(agent.messages)["call-2"] == told
    assert tool_results(agent.messages)["call-3"] == ("error", verdict.message)
    assert agent.messages[-1]["role"] == "assistant"
    assert agent.messages[-1]["content"] == [{"text": verdict.message}]
    assert roles_alternate(agent.messages)
    model.script = calls_then_answer(0, answer="Sorry, 18C and cloudy.")
    assert run(agent, mode, "Thanks. So?") == "Sorry, 18C and cloudy."
    assert roles_alternate(model.requests[-1])


@pytest.mark.parametrize("mode", MODES)
def test_warning_reaches_the_next_request_only_after_the_tool_results(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    model = ScriptedModel(calls_then_answer(3))
    agent = make_agent(guard, model, [])

    assert run(agent, mode) == "It is 18C and cloudy."

    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    carrying = [i for i, r in enumerate(model.requests) if any(warning in str(m) for m in r)]
    assert carrying == [3], "only the request after the warned call shows it"
    last = model.requests[3][-1]
    assert last["role"] == "user" and "toolResult" in last["content"][0]
    assert last_texts(model.requests[3]) == [warning], "after the tool result, same message"
    assert roles_alternate(model.requests[3])
    assert not any(warning in str(m) for m in agent.messages), "never in the history"


@pytest.mark.parametrize("mode", MODES)
def test_skip_answers_the_call_without_running_the_tool(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    ran: list[dict[str, Any]] = []
    model = ScriptedModel(calls_then_answer(6))
    agent = make_agent(guard, model, ran)

    assert run(agent, mode) == "It is 18C and cloudy."

    assert len(ran) == 4, "the 5th and 6th identical calls were answered, not run"
    results = tool_results(model.requests[-1])
    assert results["call-3"] == ("success", "18C cloudy")
    for skipped in ("call-4", "call-5"):
        status, text = results[skipped]
        assert status == "error" and text.startswith(SKIPPED)
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


@pytest.mark.parametrize("mode", MODES)
def test_a_healthy_run_is_never_warned_and_sees_the_same_requests(mode: str) -> None:
    def pages() -> ScriptedModel:
        args = lambda n: {"q": "paris weather", "page": n + 1}  # noqa: E731
        return ScriptedModel(calls_then_answer(3, args=args, answer="Page 3."))

    plain_model = pages()
    plain = make_agent(Guard(), plain_model, [], hooks=[])
    baseline = run(plain, mode)
    guard = RecordingGuard()
    model = pages()
    agent = make_agent(guard, model, [])

    assert run(agent, mode) == baseline == "Page 3."
    assert all(v.action == "ok" for v in guard.verdicts)
    assert [e["kind"] for e in guard.events] == ["user"] + [
        "model",
        "tool_call",
        "tool_result",
    ] * 3 + ["model"]
    assert model.requests == plain_model.requests


def test_a_stop_on_a_model_response_cancels_its_calls_and_ends_the_turn() -> None:
    """The iteration cap stops the run on a model response: none of its calls run, each
    is answered with the message, and the turn ends without another model request."""
    guard = RecordingGuard(max_iterations=3)
    ran: list[dict[str, Any]] = []
    model = ScriptedModel(calls_then_answer(10, args=lambda n: {"q": "paris", "page": n + 1}))
    agent = make_agent(guard, model, ran)

    with pytest.raises(LoopDetected) as caught:
        agent(QUESTION)

    verdict = caught.value.verdict
    assert guard.events[verdict.step]["kind"] == "model"
    assert verdict.step == scan(guard.events, config=guard.config).first_stop
    assert len(model.requests) == 4 and len(ran) == 3
    assert tool_results(agent.messages)["call-3"] == ("error", verdict.message)
    assert agent.messages[-1]["content"] == [{"text": verdict.message}]
    assert roles_alternate(agent.messages)


def test_the_session_is_the_run_and_each_prompt_a_user_turn(tmp_path: Any) -> None:
    """deer-flow's report: the user asks for the weather once per turn; the lookup
    repeated across eight turns of one session is never stopped."""
    from strands.session import FileSessionManager

    guard = RecordingGuard()
    sessions = FileSessionManager(session_id="ticket-42", storage_dir=str(tmp_path))
    agent = make_agent(guard, ScriptedModel(calls_then_answer(1)), [], session_manager=sessions)
    for turn in range(8):
        agent(f"Weather in Paris, turn {turn}?")
    assert set(guard.run_ids) == {"ticket-42"}
    assert [e["kind"] for e in guard.events].count("user") == 8
    assert all(v.action == "ok" for v in guard.verdicts)


def test_a_tool_error_is_observed_and_still_reaches_the_model() -> None:
    guard = RecordingGuard()
    model = ScriptedModel(calls_then_answer(1, answer="The search is down."))

    @tool
    def search(q: str) -> str:
        """Search the web."""
        raise RuntimeError("backend down")

    agent = Agent(model=model, tools=[search], hooks=[LoopwatchHooks(guard)], callback_handler=None)
    assert str(agent(QUESTION)).strip() == "The search is down."
    result = next(e for e in guard.events if e["kind"] == "tool_result")
    assert result["error"] is True and "backend down" in result["text"]
    assert tool_results(model.requests[-1])["call-0"][0] == "error"


def test_an_agent_used_as_a_tool_joins_the_run_and_its_loop_stops_the_caller() -> None:
    """A worker agent exposed to a boss with ``as_tool()``: one loopwatch run (the
    boss's session), the worker's prompt a span and not a user turn, events named by
    agent; the worker stuck on one search is stopped, and so is the boss's run."""
    guard = RecordingGuard()
    watch = LoopwatchHooks(guard)
    ran: list[dict[str, Any]] = []
    worker = make_agent(guard, ScriptedModel(stuck("search")), ran, hooks=[watch])
    worker.name = "worker"
    boss_model = ScriptedModel(
        lambda n, messages: (
            {"tool": "worker", "args": {"input": "Find the weather in Paris."}}
            if n == 0
            else {"text": "Done."}
        )
    )
    boss = Agent(
        model=boss_model,
        name="boss",
        tools=[worker.as_tool(name="worker", description="Researches things.")],
        hooks=[watch],
        callback_handler=None,
    )

    with pytest.raises(LoopDetected) as caught:
        boss(QUESTION)

    assert set(guard.run_ids) == {boss.session_id}
    kinds = [e["kind"] for e in guard.events]
    assert kinds.count("user") == 1 and kinds.count("span") == 1
    span = next(e for e in guard.events if e["kind"] == "span")
    assert span == {
        "kind": "span",
        "type": "agent",
        "name": "worker",
        "text": "Find the weather in Paris.",
    }
    assert {e.get("agent") for e in guard.events if e["kind"] == "model"} == {"boss", "worker"}
    assert len(ran) == 2, "the worker's 3rd identical search was stopped (the defaults)"
    assert caught.value.verdict.step == scan(guard.events, config=guard.config).first_stop
    assert len(boss_model.requests) == 1, "the boss's run ended with the worker's stop"
    assert roles_alternate(boss.messages)


def test_a_swarm_is_one_run_whose_events_name_their_agent() -> None:
    from strands.multiagent import Swarm

    guard = RecordingGuard()
    watch = LoopwatchHooks(guard)
    ran: list[dict[str, Any]] = []

    def handing_off(n: int, messages: list[dict[str, Any]]) -> dict[str, Any]:
        if n == 0:
            handoff = {"agent_name": "researcher", "message": "Find the weather."}
            return {"tool": "handoff_to_agent", "args": handoff}
        return {"text": "Handed off."}

    planner = Agent(
        model=ScriptedModel(handing_off), name="planner", hooks=[watch], callback_handler=None
    )
    researcher = make_agent(guard, ScriptedModel(stuck("search")), ran, hooks=[watch])
    swarm = Swarm([planner, researcher], hooks=[watch], id="swarm-7")

    with pytest.raises(LoopDetected):
        swarm(QUESTION)

    assert set(guard.run_ids) == {"swarm-7"}
    kinds = [e["kind"] for e in guard.events]
    assert kinds[0] == "user" and kinds.count("user") == 1
    assert [e["name"] for e in guard.events if e["kind"] == "span"] == ["researcher"]
    assert {e.get("agent") for e in guard.events if e["kind"] == "model"} == {
        "planner",
        "researcher",
    }
    assert len(ran) == 2, "the researcher's 3rd identical search was stopped (the defaults)"


def test_passing_guard_and_keywords_is_refused() -> None:
    with pytest.raises(TypeError):
        LoopwatchHooks(Guard(), on_loop="skip")


def test_the_readme_snippet_runs_and_stops_the_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository

    @tool
    def web_search(q: str) -> str:
        """Search the web."""
        return "18C, cloudy"

    _, out = run_snippet(
        readme_snippet("strands"), model=ScriptedModel(stuck()), web_search=web_search
    )
    last = out.strip().splitlines()[-1]  # after Strands' own printing of each tool call
    assert last.startswith("[loopwatch] Run stopped") and "web_search" in last


# Strands traces through the global tracer provider, which a process sets once: the
# export runs in a fresh interpreter, which prints its scan and the live one.
_EXPORT = """
import json, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)

from frameworks_a import scan_otlp
from strands import Agent, tool
from strands_script import ScriptedModel, calls_then_answer
from test_integration_decorator import RecordingGuard

from loopwatch import Config, scan
from loopwatch.integrations.strands import LoopwatchHooks


@tool
def search(q: str) -> str:
    '''Search the web.'''
    return "18C cloudy"


guard = RecordingGuard(on_loop="warn")  # let the run go on: the trace ends normally
hooks = [LoopwatchHooks(guard)]
model = ScriptedModel(calls_then_answer(6))
Agent(model=model, tools=[search], hooks=hooks, callback_handler=None)("Weather in Paris?")
live = scan(guard.events, config=Config())
[exported] = scan_otlp(exporter.get_finished_spans(), config=Config())


def calls_through(events, step):
    return None if step is None else sum(e["kind"] == "tool_call" for e in events[: step + 1])


print(json.dumps({
    "live": [live.verdict, calls_through(guard.events, live.first_warn),
             calls_through(guard.events, live.first_stop), [f.detector for f in live.findings]],
    "exported": [exported.verdict, calls_through(exported.events, exported.report.first_warn),
                 exported.tool_calls_before_stop, [f.detector for f in exported.report.findings]],
}))
"""


@pytest.mark.parametrize("conventions", ["default", "gen_ai_latest_experimental"])
def test_the_otel_trace_strands_exports_scans_to_the_live_verdict(conventions: str) -> None:
    """The same looping run, traced by Strands' own OpenTelemetry spans (its default
    conventions, and the latest GenAI ones), scanned afterwards: the scan tells and stops
    where the live hooks did, with the same findings."""
    import json
    import os
    import subprocess
    import sys

    from frameworks_a import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith(("LOOPWATCH_", "OTEL_"))}
    tests = [str(ROOT / "tests" / "helpers"), str(ROOT / "tests" / "integrations")]
    env["PYTHONPATH"] = os.pathsep.join([*tests, str(ROOT / "src")])
    if conventions != "default":
        env["OTEL_SEMCONV_STABILITY_OPT_IN"] = conventions
    done = subprocess.run(
        [sys.executable, "-c", _EXPORT], capture_output=True, text=True, env=env, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["exported"] == found["live"]
    # the defaults, on a short result: the 3rd identical call told, the 4th stopped
    assert found["live"][:3] == ["stop", 3, 4]
