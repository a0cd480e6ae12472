"""Claude Agent SDK with the real package driving its real bundled ``claude`` CLI
against a scripted fake Anthropic endpoint on 127.0.0.1 (tests/helpers/claude_sdk_fake.py):
the tests assert what the CLI sent the model. No network beyond loopback."""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from claude_agent_sdk import AgentDefinition, ClaudeSDKClient, ResultMessage, query
from claude_sdk_fake import (
    SEARCH,
    FakeAnthropic,
    FakeServer,
    calls_then_answer,
    fresh_home,
    offline_options,
    result_text,
    search_server,
    stuck,
    tool_results,
)
from frameworks_a import readme_snippet, run_snippet
from test_integration_decorator import RecordingGuard

from loopwatch import Config, Guard, LoopDetected, TraceRun, read_runs, scan
from loopwatch.integrations.claude_agent_sdk import LoopwatchHooks

QUESTION = "What is the weather in Paris?"
SKIPPED = "[loopwatch] This call was not executed."
# each session starts the CLI (a few seconds): the paths are split between the tests
MODES = ["query", "client", "partial"]


class Session:
    """One offline session: the fake endpoint, the tool's calls, the messages."""

    def __init__(
        self, script: Any, guard: Guard | None = None, fails: bool = False, **options: Any
    ) -> None:
        self.fails = fails
        self.fake = FakeAnthropic(script)
        self.guard = guard if guard is not None else RecordingGuard()
        self.watch = LoopwatchHooks(self.guard)
        self.ran: list[dict[str, Any]] = []
        self.messages: list[Any] = []
        self.options = options
        self.transcripts: list[dict[str, Any]] = []  # the runs of the CLI's transcripts

    def run(self, mode: str = "query", prompts: tuple[str, ...] = (QUESTION,)) -> None:
        asyncio.run(self._run(mode, prompts))

    async def _run(self, mode: str, prompts: tuple[str, ...]) -> None:
        with fresh_home() as home, FakeServer(self.fake.handle) as server:
            options = offline_options(
                server,
                home,
                hooks=self.watch.hooks,
                mcp_servers={"web": search_server(self.ran, fails=self.fails)},
                allowed_tools=[SEARCH],
                include_partial_messages=mode == "partial",
                **self.options,
            )
            if mode == "client":
                async with ClaudeSDKClient(options=options) as client:
                    for prompt in prompts:
                        await client.query(prompt)
                        async for message in client.receive_response():
                            self.messages.append(message)
                        self.watch.check(self.messages[-1])
                return
            [prompt] = prompts
            async for message in query(prompt=prompt, options=options):
                self.messages.append(message)
            self.transcripts = [
                r.to_dict()
                for r in read_runs(f"{home}/.claude/projects")
                if isinstance(r, TraceRun)
            ]
        # after the stream has ended: leaving it midway would leave the CLI running
        for message in self.messages:
            self.watch.check(message)

    @property
    def result(self) -> ResultMessage:
        return [m for m in self.messages if isinstance(m, ResultMessage)][-1]


def paired(request: dict[str, Any]) -> bool:
    """Each tool use of the request answered in the very next message."""
    messages = request["messages"]
    for i, message in enumerate(messages):
        content = message["content"] if isinstance(message["content"], list) else []
        uses = {b["id"] for b in content if b.get("type") == "tool_use"}
        if uses:
            following = messages[i + 1] if i + 1 < len(messages) else {"content": []}
            answered = {b.get("tool_use_id") for b in tool_results({"messages": [following]})}
            if answered != uses:
                return False
    return True


@pytest.mark.parametrize("mode", MODES[:2])
def test_stop_ends_the_session_and_check_raises_at_the_event_scan_reports(mode: str) -> None:
    session = Session(stuck())
    with pytest.raises(LoopDetected) as caught:
        session.run(mode)

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    verdict = caught.value.verdict
    assert verdict.action == "stop" and "web_search" in str(caught.value)
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1
    assert guard.events[0] == {"kind": "user", "text": QUESTION}
    assert guard.events[verdict.step]["kind"] == "tool_call"
    # the defaults, on a short result ("18C, cloudy"): two calls ran, the 3rd was told
    # (denied: the tool did not run, the model read why as its result), the 4th, the
    # agent persisting, stopped before running
    assert len(session.ran) == 2 and len(session.fake.requests) == 4, "the 3rd, 4th never ran"
    told = tool_results(session.fake.requests[3])[-1]
    assert told.get("is_error") and SKIPPED in result_text(told)
    assert "web_search" in result_text(told)
    assert guard.first("skip") == report.first_warn
    assert all(paired(r) for r in session.fake.requests)
    assert set(guard.run_ids) == {session.result.session_id}
    assert session.result.terminal_reason == "hook_stopped"  # the CLI's own stop


# The CLI records a call its PreToolUse hook denied with the hook's reason behind its own
# prefix ("PreToolUse:<tool> hook error: [loopwatch] This call was not executed. ..."):
# the scan must still read it as loopwatch's answer (the tool did not run), not as the
# tool's own failed result that would end the streak.
def test_the_cli_transcript_scans_to_the_live_verdict() -> None:
    """The session as the CLI wrote it down, read back by ``loopwatch scan``: told and
    stopped at the same calls as the live guard."""
    session = Session(stuck())
    with pytest.raises(LoopDetected) as caught:
        session.run("query")

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    live = scan(guard.events, config=Config())
    assert live.first_warn is not None and caught.value.verdict.step == live.first_stop
    [transcript] = session.transcripts
    scanned = scan(transcript, config=Config())
    events = transcript["events"]
    assert scanned.verdict == "stop"
    assert scanned.first_stop is not None and scanned.first_warn is not None

    def calls_through(run: list[dict[str, Any]], step: int) -> int:
        return sum(e["kind"] == "tool_call" for e in run[: step + 1])

    assert calls_through(events, scanned.first_warn) == calls_through(guard.events, live.first_warn)
    assert calls_through(events, scanned.first_stop) == calls_through(guard.events, live.first_stop)
    assert calls_through(events, scanned.first_stop) == 4


@pytest.mark.parametrize("mode", MODES[2:])
def test_warning_reaches_the_model_once_after_the_tool_result(mode: str) -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs a warning
    guard = RecordingGuard(repeated_call={"warn_at": 3, "stop_at": 5})
    session = Session(calls_then_answer(3), guard=guard)
    session.run(mode)

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert session.result.result == "It is 18C and cloudy."
    warning = next(v.message for v in guard.verdicts if v.action == "warn")
    assert warning and guard.first("warn") == scan(guard.events, config=guard.config).first_warn
    needle = json.dumps(warning)[1:-1]  # as it is inside a JSON string
    counts = [json.dumps(r["messages"]).count(needle) for r in session.fake.requests]
    assert counts == [0, 0, 0, 1], "from the request after the warned call on, said once"
    messages = session.fake.requests[3]["messages"]
    at = next(i for i, m in enumerate(messages) if needle in json.dumps(m))
    assert tool_results({"messages": [messages[at - 1]]}), "right after the tool result"
    assert all(paired(r) for r in session.fake.requests)


def test_skip_answers_the_call_without_running_the_tool() -> None:
    # pinned: the defaults tell the 3rd identical call with a skip; this test needs warnings
    guard = RecordingGuard(on_loop="skip", repeated_call={"warn_at": 3, "stop_at": 5})
    session = Session(calls_then_answer(6), guard=guard)
    session.run()

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert session.result.result == "It is 18C and cloudy."
    assert len(session.ran) == 4, "the 5th and 6th identical calls were answered, not run"
    results = tool_results(session.fake.requests[-1])
    assert [result_text(r) for r in results[:4]] == ["18C, cloudy"] * 4
    for skipped in results[4:]:
        assert skipped.get("is_error") and SKIPPED in result_text(skipped)
    assert guard.first("skip") == scan(guard.events, config=guard.config).first_stop


def test_a_healthy_session_is_never_warned_and_sends_the_same_requests() -> None:
    def pages() -> Any:
        return calls_then_answer(3, args=lambda n: {"q": f"paris weather page {n + 1}"})

    plain = Session(pages())
    session = Session(pages())
    session.run()
    asyncio.run(_run_without_hooks(plain))

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert all(v.action == "ok" for v in guard.verdicts)
    assert [e["kind"] for e in guard.events] == ["user"] + ["tool_call", "tool_result"] * 3
    assert [_shape(r) for r in session.fake.requests] == [_shape(r) for r in plain.fake.requests]


async def _run_without_hooks(session: Session) -> None:
    with fresh_home() as home, FakeServer(session.fake.handle) as server:
        options = offline_options(
            server, home, mcp_servers={"web": search_server(session.ran)}, allowed_tools=[SEARCH]
        )
        async for message in query(prompt=QUESTION, options=options):
            session.messages.append(message)


def _shape(request: dict[str, Any]) -> list[Any]:
    """What the request's conversation says, without the run's ids and temp folder."""
    request = json.loads(re.sub(r"/tmp/loopwatch-claude-\w+", "HOME", json.dumps(request)))
    out = []
    for message in request["messages"]:
        content = message["content"]
        blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
        out.append(
            (
                message["role"],
                [
                    (b.get("type"), b.get("text") or b.get("input") or result_text(b))
                    for b in blocks
                ],
            )
        )
    return out


def test_the_session_is_the_run_and_each_prompt_a_user_turn() -> None:
    session = Session(calls_then_answer(1))
    session.run("client", prompts=tuple(f"Weather in Paris, turn {n}?" for n in range(3)))
    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert set(guard.run_ids) == {session.result.session_id}
    assert [e["kind"] for e in guard.events].count("user") == 3
    assert all(v.action == "ok" for v in guard.verdicts)


def test_a_failed_call_is_observed_and_still_reaches_the_model() -> None:
    session = Session(calls_then_answer(1, answer="The search is down."), fails=True)
    session.run()
    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert session.result.result == "The search is down."
    result = guard.events[-1]
    assert result["kind"] == "tool_result" and result["error"] is True
    assert "backend down" in result["text"]
    [sent] = tool_results(session.fake.requests[-1])
    assert sent.get("is_error") and "backend down" in result_text(sent)


def test_a_sub_agents_calls_name_it_and_its_loop_stops_the_session() -> None:
    def script(n: int, request: dict[str, Any]) -> dict[str, Any]:
        names = {t["name"] for t in request["tools"]}
        if "Agent" not in names:  # the sub-agent's requests: stuck
            return {"tool": SEARCH, "input": {"q": "paris weather"}}
        if n == 0:
            task = {"description": "weather", "prompt": "Find the weather in Paris.",
                    "subagent_type": "researcher"}  # fmt: skip
            return {"tool": "Agent", "input": task}
        return {"text": "Done."}

    researcher = AgentDefinition(description="Researches.", prompt="You research.", tools=[SEARCH])
    session = Session(script, tools=["Agent"], agents={"researcher": researcher})
    with pytest.raises(LoopDetected):
        session.run()

    guard = session.guard
    assert isinstance(guard, RecordingGuard)
    assert len(set(guard.run_ids)) == 1
    spans = [e for e in guard.events if e["kind"] == "span"]
    assert [(s["type"], s["name"]) for s in spans] == [("agent", "researcher")]
    searches = [e for e in guard.events if e.get("name") == SEARCH]
    assert searches and all(e["agent"] == "researcher" for e in searches)
    assert len(session.ran) == 2, "the defaults tell the sub-agent's 3rd search, stop its 4th"


def test_passing_guard_and_keywords_is_refused() -> None:
    with pytest.raises(TypeError):
        LoopwatchHooks(Guard(), on_loop="skip")


def test_the_readme_snippet_runs_and_stops_the_loop(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from claude_agent_sdk import tool

    ran: list[dict[str, Any]] = []

    @tool("web_search", "Search the web.", {"q": str})
    async def web_search(args: dict[str, Any]) -> dict[str, Any]:
        ran.append(args)
        return {"content": [{"type": "text", "text": "18C, cloudy"}]}

    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository
    fake = FakeAnthropic(stuck())
    with FakeServer(fake.handle) as server:
        env = offline_options(server, str(tmp_path)).env
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        _, out = run_snippet(readme_snippet("claude_agent_sdk"), web_search=web_search)
    assert out.startswith("[loopwatch] Run stopped") and "web_search" in out
    assert len(ran) == 2, "the defaults tell the 3rd identical call and stop the 4th"
