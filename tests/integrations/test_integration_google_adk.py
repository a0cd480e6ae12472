"""Google ADK with the real package and ADK's own scripted ``MockModel``.

google-adk pins OpenTelemetry below what the dev environment's langfuse needs, so
``make test`` runs this module in a virtualenv of its own (``.venv-adk``); in the dev
environment it is skipped. ``MockModel`` keeps every request, so the tests assert
what the model saw. No network: no provider model is ever built.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

pytest.importorskip("google.adk", reason="google-adk runs in .venv-adk (make test)")

from frameworks_a import (
    ROOT,
    assert_scans_like_the_live_run,
    readme_snippet,
    run_example,
    run_snippet,
    scan_otlp_json,
)
from google.adk.agents import LlmAgent
from google.adk.agents.run_config import RunConfig, StreamingMode
from google.adk.apps import App
from google.adk.cli.agent_test_runner import MockModel
from google.adk.runners import InMemoryRunner
from google.genai import types
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, scan
from loopwatch.integrations.google_adk import STOP_KEY, LoopwatchPlugin

MODES = ["sync", "async", "stream"]
QUESTION = "What is the weather in Paris?"
ANSWER = "It is 18C and cloudy."


def call(i: int, args: dict[str, Any] | None = None, name: str = "search") -> types.Content:
    fc = types.FunctionCall(name=name, args=args or {"q": "paris weather"}, id=f"call-{i}")
    return types.Content(role="model", parts=[types.Part(function_call=fc)])


def text(value: str) -> types.Content:
    return types.Content(role="model", parts=[types.Part(text=value)])


def script(calls: int, answer: str = ANSWER) -> MockModel:
    return MockModel.create([call(i) for i in range(calls)] + [text(answer)])


class Harness:
    """One agent with a ``search`` tool behind a runner with the loopwatch plugin."""

    def __init__(self, guard: Guard | None, model: MockModel, plugin: bool = True) -> None:
        self.ran: list[dict[str, Any]] = []
        self.model = model

        def search(q: str, page: int = 1) -> str:
            """Search the web."""
            self.ran.append({"q": q, "page": page})
            return "18C cloudy" if page == 1 else f"page {page}: more results"

        agent = LlmAgent(name="researcher", model=model, tools=[search])
        plugins = [LoopwatchPlugin(guard)] if plugin else []
        self.runner = InMemoryRunner(app=App(name="app", root_agent=agent, plugins=plugins))
        self.session = self.runner.session_service.create_session_sync(
            app_name="app", user_id="u", session_id="s-1"
        )

    def ask(self, mode: str, prompt: str = QUESTION) -> list[Any]:
        message = types.Content(role="user", parts=[types.Part(text=prompt)])
        kwargs: dict[str, Any] = {"user_id": "u", "session_id": "s-1", "new_message": message}
        if mode == "stream":
            kwargs["run_config"] = RunConfig(streaming_mode=StreamingMode.SSE)
        if mode == "sync":
            return list(self.runner.run(**kwargs))

        async def collect() -> list[Any]:
            return [event async for event in self.runner.run_async(**kwargs)]

        return asyncio.run(collect())

    def state(self) -> dict[str, Any]:
        got = self.runner.session_service.get_session_sync(
            app_name="app", user_id="u", session_id="s-1"
        )
        assert got is not None
        return dict(got.state)


def responses(request: Any) -> dict[str, Any]:
    """Function responses in a model request, by call id."""
    return {
        p.function_response.id: p.function_response.response
        for c in request.contents
        for p in c.parts or ()
        if p.function_response
    }


@pytest.mark.parametrize("mode", MODES)
def test_stop_ends_the_run_the_adk_way_at_the_event_scan_reports(mode: str) -> None:
    guard = RecordingGuard()
    app = Harness(guard, script(10))

    events = app.ask(mode)

    verdict = next(v for v in guard.verdicts if v.action == "stop")
    assert verdict.message and "search" in verdict.message
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[0] == {"kind": "user", "text": QUESTION}
    assert guard.events[verdict.step]["kind"] == "tool_call"
    # the defaults, on a short result ("18C cloudy"): two calls ran, the 3rd was told
    # (skipped: the tool did not run, the model got why as the call's response), the
    # 4th, the agent persisting, stopped before running
    assert len(app.ran) == 2 and len(app.model.requests) == 4, "no call after the stop"
    assert guard.first("skip") == report.first_warn
    told = responses(app.model.requests[3])["call-2"]
    assert told["error"].startswith("[loopwatch] This call was not executed.")
    assert "search" in told["error"]
    last = events[-1]
    assert last.is_final_response()
    [part] = last.content.parts
    assert part.function_response.response == {"error": verdict.message}
    assert app.state()[STOP_KEY] == verdict.message
    assert set(guard.run_ids) == {"s-1"}
    assert all(e["agent"] == "researcher" for e in guard.events[1:])


@pytest.mark.parametrize("mode", MODES)
def test_warning_is_in_the_next_request_only_after_the_function_response(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    app = Harness(guard, script(3))

    events = app.ask(mode)

    assert events[-1].content.parts[0].text == ANSWER
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn

    def shows(request: Any) -> bool:
        return any(p.text == warning for c in request.contents for p in c.parts or ())

    assert [i for i, r in enumerate(app.model.requests) if shows(r)] == [3]
    last = app.model.requests[3].contents[-1]
    assert last.role == "user"
    assert last.parts[0].function_response.id == "call-2" and last.parts[-1].text == warning
    session = app.runner.session_service.get_session_sync(
        app_name="app", user_id="u", session_id="s-1"
    )
    assert session is not None
    stored = [p.text for e in session.events if e.content for p in e.content.parts or ()]
    assert warning not in stored, "the warning is not kept in the session"


@pytest.mark.parametrize("mode", MODES)
def test_skip_answers_the_call_without_running_the_tool(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    app = Harness(guard, script(6))

    events = app.ask(mode)

    assert events[-1].content.parts[0].text == ANSWER
    assert len(app.ran) == 4, "the 5th and 6th identical calls were answered, not run"
    answered = responses(app.model.requests[-1])
    assert answered["call-3"] == {"result": "18C cloudy"}
    for skipped in ("call-4", "call-5"):
        assert answered[skipped]["error"].startswith("[loopwatch] This call was not executed.")
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop
    kinds = [e["kind"] for e in guard.events]
    assert kinds.count("tool_result") == 4, "loopwatch's own answers are not tool results"


@pytest.mark.parametrize("mode", MODES)
def test_a_healthy_run_is_never_warned_and_sees_the_same_requests(mode: str) -> None:
    def pages() -> MockModel:
        steps = [call(p, {"q": "paris weather", "page": p}) for p in (1, 2, 3)]
        return MockModel.create([*steps, text("Page 3.")])

    plain = Harness(None, pages(), plugin=False)
    plain.ask(mode)
    guard = RecordingGuard()
    app = Harness(guard, pages())
    events = app.ask(mode)

    assert events[-1].content.parts[0].text == "Page 3."
    assert all(v.action == "ok" for v in guard.verdicts)
    assert [e["kind"] for e in guard.events] == ["user"] + [
        "model",
        "tool_call",
        "tool_result",
    ] * 3 + ["model"]
    assert [r.contents for r in app.model.requests] == [r.contents for r in plain.model.requests]


def test_the_session_is_the_run_and_each_message_a_user_turn() -> None:
    """deer-flow's report: one lookup per user turn, eight turns in one session."""
    guard = RecordingGuard()
    contents: list[types.Content] = []
    for _ in range(8):
        contents += [call(len(contents)), text(ANSWER)]
    app = Harness(guard, MockModel.create(contents))
    for turn in range(8):
        app.ask("async", f"Weather in Paris, turn {turn}?")
    assert set(guard.run_ids) == {"s-1"}
    assert [e["kind"] for e in guard.events].count("user") == 8
    assert all(v.action == "ok" for v in guard.verdicts)


def test_agents_of_one_session_passing_a_request_back_and_forth_are_seen() -> None:
    """A coordinator and its sub-agent transfer the same unclear request to each other:
    one run (the session), each event naming its agent, the ping-pong found."""
    guard = RecordingGuard(on_loop="warn")

    def transfer(to: str, say: str, n: int) -> list[types.Content]:
        fc = types.FunctionCall(name="transfer_to_agent", args={"agent_name": to}, id=f"t{n}")
        return [
            types.Content(role="model", parts=[types.Part(text=say), types.Part(function_call=fc)])
        ]

    boss_says = "Please clarify which report you need me to write."
    worker_says = "Could you clarify which report you need?"
    rounds = 4
    boss_model = MockModel.create(
        [c for i in range(rounds) for c in transfer("worker", boss_says, i)] + [text("Done.")]
    )
    worker_model = MockModel.create(
        [c for i in range(rounds) for c in transfer("boss", worker_says, i)]
    )
    worker = LlmAgent(name="worker", model=worker_model, description="Writes reports.")
    boss = LlmAgent(name="boss", model=boss_model, description="Coordinates.", sub_agents=[worker])
    runner = InMemoryRunner(app=App(name="app", root_agent=boss, plugins=[LoopwatchPlugin(guard)]))
    runner.session_service.create_session_sync(app_name="app", user_id="u", session_id="team")
    message = types.Content(role="user", parts=[types.Part(text="Write the report.")])
    list(runner.run(user_id="u", session_id="team", new_message=message))

    assert set(guard.run_ids) == {"team"}
    speakers = [e["agent"] for e in guard.events if e["kind"] == "model"]
    assert {"boss", "worker"} <= set(speakers)
    report = scan(guard.events, config=guard.config)
    assert "ping_pong" in {f.detector for f in report.findings}


def test_passing_guard_and_keywords_is_refused() -> None:
    with pytest.raises(TypeError):
        LoopwatchPlugin(Guard(), on_loop="skip")


def test_example_stops_the_loop_by_call_8() -> None:
    stopped_at, out = run_example("google_adk")
    assert stopped_at <= 8 and "[loopwatch]" in out, out


def test_the_readme_snippet_runs_and_skips_the_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository
    ran: list[str] = []

    def web_search(q: str) -> str:
        """Search the web."""
        ran.append(q)
        return "18C, cloudy"

    # four identical calls: two run, two are skipped (a third skip in a row would stop)
    model = MockModel.create([call(i, name="web_search") for i in range(4)] + [text(ANSWER)])
    names, _ = run_snippet(readme_snippet("google_adk"), model=model, web_search=web_search)
    runner = names["runner"]
    runner.session_service.create_session_sync(app_name="weather", user_id="u", session_id="s")
    message = types.Content(role="user", parts=[types.Part(text=QUESTION)])
    events = list(runner.run(user_id="u", session_id="s", new_message=message))
    assert events[-1].content.parts[0].text == ANSWER
    assert len(ran) == 2, "on_loop='skip': the 3rd and 4th identical calls were answered"


# -- the same run, exported by ADK's own tracing and scanned ------------------------------------
def traced_run(run: str, mode: str, tmp_path: Any, **env: str) -> tuple[list[Any], list[Any]]:
    """A run of ``tests/integrations/adk_traced_run.py`` with ``env`` on top of a clean environment:
    (the events the plugin observed live, the runs read back from ADK's export)."""
    import json
    import os
    import subprocess
    import sys

    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("LOOPWATCH_", "OTEL_", "ADK_", "GOOGLE_"))
    }
    clean["PYTHONPATH"] = os.pathsep.join([str(ROOT / "tests" / "helpers"), str(ROOT / "src")])
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "integrations" / "adk_traced_run.py"), run, mode],
        capture_output=True,
        text=True,
        env={**clean, **env},
        cwd=tmp_path,  # no loopwatch.toml from the repository
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    return found["events"], scan_otlp_json(found["otlp"], config=Config())


@pytest.mark.parametrize("mode", MODES)
def test_the_otel_trace_adk_exports_scans_to_the_live_verdict(mode: str, tmp_path: Any) -> None:
    """The same looping run, traced by ADK's built-in OpenTelemetry tracing with content
    capture on (``execute_tool`` spans carry ``gen_ai.tool.call.arguments`` and
    ``.result`` only then) and scanned afterwards: the scan stops at the call where the
    live plugin would have, with the same findings."""
    events, runs = traced_run(
        "stuck", mode, tmp_path, OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT="SPAN_ONLY"
    )

    [exported] = runs  # one run: the session (gen_ai.conversation.id)
    assert exported.meta["conversation_id"] == "s-1"
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    assert [c.get("args") for c in calls] == [{"q": "paris weather"}] * 6
    assert all("text" in e for e in exported.events if e["kind"] == "tool_result")
    # both scanned with the default configuration, where the 3rd identical call (a short
    # result) is told and the 4th stopped
    assert_scans_like_the_live_run(events, exported)


CAPTURE_OFF: dict[str, dict[str, str]] = {
    # ADK's default: no message content on the spans
    "default": {},
    # the older ADK schema with its own content switch off: "{}" stands for the arguments
    "legacy": {
        "ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1",
        "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false",
    },
}


@pytest.mark.parametrize("settings", sorted(CAPTURE_OFF))
@pytest.mark.parametrize("run", ["healthy", "stuck"])
def test_without_content_capture_the_arguments_are_unknown_never_the_same(
    run: str, settings: str, tmp_path: Any
) -> None:
    """With content capture off, ADK's spans do not carry what a call was asked or what
    it returned (or carry a ``"{}"`` placeholder): the export reads those as unknown.
    Six calls of one tool are then neither the same call nor a healthy run stopped; a
    stuck run is not stopped either, since nothing in the trace shows it repeating."""
    events, runs = traced_run(run, "async", tmp_path, **CAPTURE_OFF[settings])

    [exported] = runs
    calls = [e for e in exported.events if e["kind"] == "tool_call"]
    results = [e for e in exported.events if e["kind"] == "tool_result"]
    assert len(calls) == len(results) == 6
    assert all("args" not in c and c["unknown"] == ["args"] for c in calls)
    assert all("text" not in r and r["unknown"] == ["text"] for r in results)
    assert exported.meta["unknown"]["tool_args"] == 6
    assert exported.verdict != "stop"
    assert not {"repeated_call", "futility", "no_progress"} & {
        f.detector for f in exported.report.findings
    }
    if run == "healthy":
        assert scan(events, config=Config()).verdict == exported.verdict == "ok"
