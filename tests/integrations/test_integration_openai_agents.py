"""OpenAI Agents SDK with the real package and its scripted fake ``Model``.

``agents.testing.ScriptedModel`` records every model call, so the tests assert what
the model saw; the recording guard checks the live stop against ``loopwatch.scan``.
No network: tracing is disabled and no provider model is ever built.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from agents import Agent, RunConfig, Runner, function_tool, set_tracing_disabled
from agents.exceptions import ToolInputGuardrailTripwireTriggered
from agents.run_config import CallModelData, ModelInputData
from agents.testing import ScriptedModel, assistant_message, function_call
from test_integration_decorator import RecordingGuard

from loopwatch import Guard, LoopDetected, scan
from loopwatch.integrations.openai_agents import LoopTripwire, LoopwatchAgents, loop_verdict


@pytest.fixture(autouse=True, scope="module")
def _tracing_off() -> Any:
    """No trace export (no network) while these tests run; tracing is process-global,
    so it is switched back on afterwards for the trace-format tests that use it."""
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)


MODES = ["sync", "async"]
FORECAST = "Paris: 18C, cloudy, light wind from the west, no rain expected until Friday."


def same_call(turns: int, then: str | None = "It is 18C and cloudy.") -> list[Any]:
    steps: list[Any] = [
        [function_call("search", {"q": "paris weather"}, call_id=f"call-{i}")] for i in range(turns)
    ]
    if then is not None:
        steps.append([assistant_message(then)])
    return steps


def make_tools(ran: list[dict[str, Any]]) -> list[Any]:
    @function_tool
    def search(q: str, page: int = 1) -> str:
        """Search the web."""
        ran.append({"q": q, "page": page})
        return "18C cloudy" if page == 1 else f"page {page}: more results"

    @function_tool
    def forecast(q: str) -> str:
        """Weather forecast."""
        ran.append({"q": q})
        return FORECAST

    return [search, forecast]


def run(agent: Agent[Any], mode: str, **kwargs: Any) -> Any:
    if mode == "sync":
        return Runner.run_sync(agent, "What is the weather in Paris?", max_turns=30, **kwargs)
    return asyncio.run(Runner.run(agent, "What is the weather in Paris?", max_turns=30, **kwargs))


def user_notes(call_input: Any) -> list[dict[str, Any]]:
    if not isinstance(call_input, list):
        return []
    return [
        item
        for item in call_input
        if isinstance(item, dict)
        and item.get("role") == "user"
        and str(item.get("content", "")).startswith("[loopwatch]")
    ]


def setup(
    guard: Guard, steps: list[Any]
) -> tuple[LoopwatchAgents, ScriptedModel, Agent[Any], list[Any]]:
    watch = LoopwatchAgents(guard)
    model = ScriptedModel(steps)
    ran: list[Any] = []
    agent = Agent(name="researcher", model=model, tools=watch.protect(make_tools(ran)))
    return watch, model, agent, ran


@pytest.mark.parametrize("mode", MODES)
def test_stop_raises_at_the_event_scan_reports_and_the_tool_never_runs(mode: str) -> None:
    guard = RecordingGuard()
    watch, model, agent, ran = setup(guard, same_call(10))
    lw_run = watch.run("r-stop")

    with pytest.raises(ToolInputGuardrailTripwireTriggered) as caught:
        run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    verdict = loop_verdict(caught.value)
    assert verdict is not None and verdict.action == "stop"
    # the tripwire names the loop, not only the guardrail's class
    assert isinstance(caught.value, LoopTripwire) and verdict.message
    assert str(caught.value) == verdict.message  # "[loopwatch] Run stopped: You called ..."
    assert "search" in str(caught.value)
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[verdict.step]["kind"] == "tool_call"
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (rejected: the tool did not run, the model read why as its output), the 4th, the
    # agent persisting, stopped before running
    assert len(ran) == 2 and len(model.calls) == 4
    assert guard.first("skip") == report.first_warn
    outputs = {
        item["call_id"]: item["output"]
        for item in model.calls[3].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert outputs["call-0"] == outputs["call-1"] == "18C cloudy"
    assert str(outputs["call-2"]).startswith("[loopwatch] This call was not executed.")
    assert "search" in str(outputs["call-2"])
    assert set(guard.run_ids) == {"r-stop"}


@pytest.mark.parametrize("mode", MODES)
def test_warning_is_the_last_input_item_of_the_next_call_only(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    watch, model, agent, _ = setup(guard, same_call(3))
    lw_run = watch.run()

    result = run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    assert result.final_output == "It is 18C and cloudy."
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    with_note = [i for i, call in enumerate(model.calls) if user_notes(call.input)]
    assert with_note == [3], "only the request after the warned call carries the note"
    items = model.calls[3].input
    assert items[-1] == {"role": "user", "content": warning}
    assert items[-2]["type"] == "function_call_output" and items[-2]["call_id"] == "call-2"
    assert not user_notes(result.to_input_list()), "the note is not kept in the history"


@pytest.mark.parametrize("mode", MODES)
def test_skip_rejects_the_call_without_running_the_tool(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    watch, model, agent, ran = setup(guard, same_call(6))
    lw_run = watch.run()

    result = run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    assert len(ran) == 4, "the 5th and 6th identical calls were rejected"
    assert result.final_output == "It is 18C and cloudy."
    outputs = {
        item["call_id"]: item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    }
    assert outputs["call-3"] == "18C cloudy"
    for skipped in ("call-4", "call-5"):
        assert str(outputs[skipped]).startswith("[loopwatch] This call was not executed.")
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


@pytest.mark.parametrize("mode", MODES)
def test_a_clean_agent_runs_untouched(mode: str) -> None:
    def paginate() -> list[Any]:
        return [
            [function_call("search", {"q": "paris weather", "page": p}, call_id=f"call-{p}")]
            for p in (1, 2, 3)
        ] + [[assistant_message("Found it on page 3.")]]

    plain_model = ScriptedModel(paginate())
    plain = Agent(name="researcher", model=plain_model, tools=make_tools([]))
    baseline = run(plain, mode)

    guard = RecordingGuard()
    watch, model, agent, _ = setup(guard, paginate())
    lw_run = watch.run()
    result = run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    assert result.final_output == baseline.final_output == "Found it on page 3."
    assert all(v.action == "ok" for v in guard.verdicts)
    assert [e["kind"] for e in guard.events] == ["model", "tool_call", "tool_result"] * 3 + [
        "model"
    ]
    assert [c.input for c in model.calls] == [c.input for c in plain_model.calls]


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_on_model_output_raises_loop_detected(mode: str) -> None:
    guard = RecordingGuard(max_iterations=3, repeated_call={"enabled": False})
    watch, model, agent, ran = setup(guard, same_call(10))
    lw_run = watch.run()

    with pytest.raises(LoopDetected) as caught:
        run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    report = scan(guard.events, config=guard.config)
    assert caught.value.verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[-1]["kind"] == "model"
    assert len(ran) == len(model.calls) - 1, "the stopped turn's tool call never ran"


@pytest.mark.parametrize("mode", MODES)
def test_a_stop_on_a_tool_result_raises_before_the_next_model_call(mode: str) -> None:
    steps = [
        [function_call("forecast", {"q": f"paris weather variant {i}"}, call_id=f"call-{i}")]
        for i in range(10)
    ]
    guard = RecordingGuard(no_progress={"warn_at": 2, "stop_at": 3})
    watch, model, agent, ran = setup(guard, steps)
    lw_run = watch.run()

    with pytest.raises(LoopDetected) as caught:
        run(agent, mode, hooks=lw_run.hooks, run_config=lw_run.run_config)

    report = scan(guard.events, config=guard.config)
    assert caught.value.verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[-1]["kind"] == "tool_result"
    assert len(ran) == len(model.calls)
    assert loop_verdict(caught.value) is caught.value.verdict


def test_run_config_is_extended_not_replaced() -> None:
    seen: list[int] = []

    def mine(data: CallModelData[Any]) -> ModelInputData:
        seen.append(len(data.model_data.input))
        return data.model_data

    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    watch, model, agent, _ = setup(guard, same_call(3))
    base = RunConfig(
        workflow_name="mine", trace_metadata={"team": "x"}, call_model_input_filter=mine
    )
    lw_run = watch.run("conv-1", run_config=base)
    assert lw_run.run_config.workflow_name == "mine"
    assert lw_run.run_config.trace_metadata == {"team": "x", "loopwatch_run_id": "conv-1"}
    run(agent, "sync", hooks=lw_run.hooks, run_config=lw_run.run_config)
    assert len(seen) == len(model.calls), "the user's own filter still runs"
    assert user_notes(model.calls[3].input), "and the warning is added after it"
    assert base.call_model_input_filter is mine, "the user's config is not modified"


def test_protect_copies_tools_and_the_group_id_names_the_run() -> None:
    ran: list[Any] = []
    tools = make_tools(ran)
    watch = LoopwatchAgents(RecordingGuard())
    protected = watch.protect(tools)
    assert all(not t.tool_input_guardrails for t in tools), "the originals are unchanged"
    assert all(watch.tool_guardrail in t.tool_input_guardrails for t in protected)
    assert watch.protect(protected)[0].tool_input_guardrails == protected[0].tool_input_guardrails

    guard = RecordingGuard()
    watch2 = LoopwatchAgents(guard)
    agent = Agent(name="a", model=ScriptedModel(same_call(1)), tools=watch2.protect(tools))
    run(agent, "sync", run_config=RunConfig(group_id="conversation-9"))
    assert set(guard.run_ids) == {"conversation-9"}
