"""The pytest plugin, run by real pytest sessions (``pytester``): watched tests fail
with the evidence when their agent loops, clean ones pass, the summary names the
tests that were warned; on by ``--loopwatch`` or the ini file, dormant otherwise.

Every inner session pins its detector (a marker's ``detectors=`` or a loopwatch.toml
with every other detector off), so these tests do not move with the defaults.
"""

from __future__ import annotations

import re
from importlib import resources
from pathlib import Path

import pytest

from loopwatch import Config, read_runs, scan
from loopwatch.config import DETECTORS

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = resources.files("loopwatch") / "examples" / "agents.jsonl"

# The inner sessions' helpers: a watched tool, an agent that calls it, the pin.
AGENTKIT = '''
from loopwatch import RepeatedCall
from loopwatch.integrations import current_run, watch

calls = []


def pinned(warn_at=2, stop_at=3):
    """Only RepeatedCall, with these thresholds."""
    return [RepeatedCall(warn_at=warn_at, stop_at=stop_at,
                         window_warn_at=None, window_stop_at=None)]


@watch
def search(q: str) -> str:
    calls.append(q)
    return "18C, cloudy"


def agent(run_id, queries):
    """Calls search once per query, in run ``run_id``."""
    with current_run(run_id):
        for q in queries:
            search(q)
'''


def only_repeated_call(warn_at: int = 2, stop_at: int = 3, on_loop: str = "warn") -> str:
    """A loopwatch.toml with RepeatedCall alone, pinned."""
    lines = [
        f'on_loop = "{on_loop}"',
        "[repeated_call]",
        f"warn_at = {warn_at}",
        f"stop_at = {stop_at}",
        "window_warn_at = 0",
        "window_stop_at = 0",
    ]
    lines += [f"[{name}]\nenabled = false" for name in DETECTORS if name != "repeated_call"]
    return "\n".join(lines) + "\n"


@pytest.fixture
def inner(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    # the inner sessions run in this process: the guard an earlier test's unwatched
    # @watch call created (with the configuration of its folder) must not be shared
    monkeypatch.setattr("loopwatch.integrations.decorator._default_guard", None)
    pytester.makepyfile(agentkit=AGENTKIT)
    pytester.syspathinsert()
    return pytester


# the outer session's own settings: deepeval's plugin off, pytest-asyncio's scope said
QUIET = (
    "-p",
    "no:deepeval",
    "-p",
    "no:cacheprovider",
    "-o",
    "asyncio_default_fixture_loop_scope=function",
)


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest(*QUIET, *args)


def output(result: pytest.RunResult) -> str:
    return "\n".join(result.outlines + result.errlines)


# -- a looping test fails with the evidence; a clean one passes -----------------------------
def test_a_looping_agent_fails_its_test_with_the_findings_and_their_evidence(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_agent="""
        import pytest
        from agentkit import agent, pinned

        # on_loop="warn": the agent runs on, so only the plugin can fail the test
        @pytest.mark.loopwatch(detectors=pinned(), on_loop="warn")
        def test_stuck(loopwatch):
            agent("ticket-42", ["paris weather"] * 5)

        @pytest.mark.loopwatch(detectors=pinned(), on_loop="warn")
        def test_clean(loopwatch):
            agent("ticket-43", ["paris", "rome", "oslo"])
        """
    )
    result = run(inner)
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    failure = text.split("_ test_stuck _")[1].split("short test summary")[0]
    assert "[loopwatch] the agent looped" in failure
    run_line = re.search(
        r"run 'ticket-42': stop, first warn at step (\d+), first stop at step (\d+)", failure
    )
    assert run_line, failure
    first_warn, first_stop = int(run_line[1]), int(run_line[2])
    assert first_warn < first_stop <= 2 * 3  # stopped by the 3rd identical call at the latest
    stop = re.search(
        r"repeated_call \(stop\) at step (\d+), evidence steps ([\d, ]+): (.*)", failure
    )
    assert stop, failure
    assert int(stop[1]) == first_stop
    evidence = [int(s) for s in stop[2].split(", ")]
    assert evidence[-1] == first_stop and len(evidence) >= 3
    assert "search" in stop[3]
    assert "repeated_call (warn)" in failure  # the warning before the stop, too
    assert "ticket-43" not in text  # the clean run is not reported
    assert "Traceback" not in failure  # the report, not loopwatch's own stack


def test_a_stop_the_adapter_raised_keeps_its_error_and_gets_the_evidence(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_agent="""
        import pytest
        from agentkit import agent, pinned

        @pytest.mark.loopwatch(detectors=pinned(), on_loop="stop")
        def test_stuck():
            agent("r-stop", ["paris weather"] * 5)
        """
    )
    result = run(inner)
    result.assert_outcomes(failed=1)
    text = output(result)
    assert "LoopDetected: [loopwatch] Run stopped:" in text  # the test's own failure
    section = text.split("Captured loopwatch call")[1]
    assert "run 'r-stop': stop" in section and "repeated_call (stop)" in section


def test_skip_is_a_loop_too(inner: pytest.Pytester) -> None:
    """``on_loop="skip"`` keeps the agent going with the call answered by loopwatch:
    the test passes unless the plugin fails it."""
    inner.makepyfile(
        test_agent="""
        import pytest
        import agentkit

        @pytest.mark.loopwatch(detectors=agentkit.pinned(), on_loop="skip")
        def test_stuck():
            agentkit.agent("r-skip", ["paris weather"] * 4)
            assert len(agentkit.calls) < 4  # some calls were skipped, none raised
        """
    )
    result = run(inner)
    result.assert_outcomes(failed=1)
    assert "run 'r-skip': stop" in output(result)


# -- fail_on, and the summary line -----------------------------------------------------------
WARNED_ONLY = """
import pytest
from agentkit import agent, pinned

@pytest.mark.loopwatch(detectors=pinned(warn_at=2, stop_at=9))
def test_warned():
    agent("r-warned", ["paris weather"] * 2)

@pytest.mark.loopwatch(detectors=pinned(warn_at=2, stop_at=9))
def test_quiet():
    agent("r-quiet", ["a", "b"])
"""


def test_warnings_pass_by_default_and_the_summary_names_the_tests(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_agent=WARNED_ONLY)
    result = run(inner)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        ["loopwatch: 1 test had warnings: test_agent.py::test_warned (warn: repeated_call)"]
    )
    assert "test_quiet (" not in output(result)


@pytest.mark.parametrize(
    "how",
    ["--loopwatch-fail-on=warn", "ini", "marker"],
)
def test_fail_on_warn_fails_a_warned_test(inner: pytest.Pytester, how: str) -> None:
    source = WARNED_ONLY
    args: list[str] = []
    if how == "ini":
        inner.makeini("[pytest]\nloopwatch_fail_on = warn\n")
    elif how == "marker":
        source = source.replace(
            "stop_at=9))\ndef test_warned", "stop_at=9), fail_on='warn')\ndef test_warned"
        )
        assert "fail_on='warn'" in source
    else:
        args.append(how)
    inner.makepyfile(test_agent=source)
    result = run(inner, *args)
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    assert "FAILED test_agent.py::test_warned" in text
    assert "run 'r-warned': warn, first warn at step" in text
    result.stdout.fnmatch_lines(
        ["loopwatch: 1 test failed on a loop: *test_warned (warn: repeated_call)"]
    )


def test_fail_on_never_reports_without_failing(inner: pytest.Pytester) -> None:
    """A test that checks the agent *is* stopped opts out, and asserts on the record."""
    inner.makepyfile(
        test_agent="""
        import pytest
        from agentkit import agent, pinned

        @pytest.mark.loopwatch(detectors=pinned(), on_loop="warn", fail_on="never")
        def test_the_agent_is_caught(loopwatch):
            agent("r-caught", ["paris weather"] * 3)
            [run] = loopwatch.record.runs()
            assert (run.run_id, run.verdict) == ("r-caught", "stop")
            assert loopwatch.record.detectors() == ["repeated_call"]
        """
    )
    result = run(inner)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(
        ["loopwatch: 1 test had warnings: *test_the_agent_is_caught (stop: repeated_call)"]
    )


def test_bad_fail_on_is_a_usage_error(inner: pytest.Pytester) -> None:
    inner.makeini("[pytest]\nloopwatch = true\nloopwatch_fail_on = sometimes\n")
    inner.makepyfile(test_agent="def test_x():\n    pass\n")
    result = run(inner)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "loopwatch_fail_on must be one of warn, stop, never, not 'sometimes'" in output(result)
    assert "Traceback" not in output(result)


# -- on by the flag or the ini file, off by default -------------------------------------------
UNMARKED = """
from agentkit import agent

def test_stuck():
    agent("r-unmarked", ["paris weather"] * 5)

def test_clean():
    agent("r-clean", ["a", "b"])
"""


@pytest.mark.parametrize("how", ["--loopwatch", "ini"])
def test_the_flag_or_the_ini_option_watches_every_test(inner: pytest.Pytester, how: str) -> None:
    (inner.path / "loopwatch.toml").write_text(only_repeated_call())
    if how == "ini":
        inner.makeini("[pytest]\nloopwatch = true\n")
    inner.makepyfile(test_agent=UNMARKED)
    result = run(inner, *([how] if how != "ini" else []))
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    assert "run 'r-unmarked': stop" in text
    assert "loopwatch: watching every test, fail_on=stop" in text  # the header


def test_loopwatch_config_names_the_tests_configuration(inner: pytest.Pytester) -> None:
    (inner.path / "ci").mkdir()
    (inner.path / "ci" / "loopwatch-tests.toml").write_text(only_repeated_call(stop_at=9))
    # the project's own file says otherwise: the ini option wins
    (inner.path / "loopwatch.toml").write_text(only_repeated_call(stop_at=3))
    inner.makeini("[pytest]\nloopwatch = true\nloopwatch_config = ci/loopwatch-tests.toml\n")
    inner.makepyfile(test_agent=UNMARKED)
    result = run(inner)
    result.assert_outcomes(passed=2)  # 5 identical calls: warned, not stopped at 9
    result.stdout.fnmatch_lines(
        ["loopwatch: 1 test had warnings: *test_stuck (warn: repeated_call)"]
    )


def test_a_missing_loopwatch_config_errors_naming_the_file(inner: pytest.Pytester) -> None:
    inner.makeini("[pytest]\nloopwatch = true\nloopwatch_config = nowhere.toml\n")
    inner.makepyfile(test_agent=UNMARKED)
    result = run(inner)
    result.assert_outcomes(errors=2)
    text = output(result)
    assert "nowhere.toml: no such file" in text and "Traceback" not in text


def test_off_by_default_nothing_is_watched(inner: pytest.Pytester) -> None:
    # a configuration under which the unmarked agent is only warned, never raised at
    (inner.path / "loopwatch.toml").write_text(only_repeated_call(on_loop="warn"))
    inner.makepyfile(test_agent=UNMARKED)
    result = run(inner)
    result.assert_outcomes(passed=2)
    assert "loopwatch:" not in output(result)


def test_off_the_plugin_imports_nothing_of_loopwatch(pytester: pytest.Pytester) -> None:
    """In a process of its own: pytest loads the entry point at start-up, and a session
    that watches no test must not pay for importing loopwatch."""
    pytester.makeconftest(
        """
        import sys

        def pytest_sessionfinish(session):
            loaded = sorted(m for m in sys.modules if m.split(".")[0] == "loopwatch")
            print("LOADED", loaded)
            print("PLUGIN", session.config.pluginmanager.has_plugin("loopwatch"))
        """
    )
    pytester.makepyfile(test_plain="def test_x():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess(*QUIET, "-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*LOADED []", "PLUGIN True"])


def test_p_no_loopwatch_turns_it_off(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_agent="def test_x(loopwatch):\n    pass\n")
    result = run(inner, "-p", "no:loopwatch")
    result.assert_outcomes(errors=1)
    assert "fixture 'loopwatch' not found" in output(result)
    refused = run(inner, "-p", "no:loopwatch", "--loopwatch")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR


# -- the fixture's guard: fresh per test, used by every adapter and @watch -------------------
def test_each_test_gets_a_fresh_guard_that_adapters_and_watch_use(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_agent="""
        import asyncio, contextvars, threading
        import pytest
        from loopwatch import Guard
        from loopwatch.integrations import current_guard, make_guard, watch
        from agentkit import agent, pinned

        seen = []

        # two calls each: with one guard for both tests the second test's would be 3 and 4
        @pytest.mark.parametrize("n", [1, 2])
        @pytest.mark.loopwatch(detectors=pinned(warn_at=3, stop_at=3))
        def test_fresh(loopwatch, n):
            seen.append(loopwatch)
            agent("same-run", ["paris weather"] * 2)
            assert loopwatch.record.verdict == "ok"

        def test_they_were_two():
            assert len(seen) == 2 and seen[0] is not seen[1]

        @pytest.mark.loopwatch(detectors=pinned())
        def test_adapters_take_it(loopwatch):
            assert current_guard() is loopwatch
            assert make_guard(None, {}) is loopwatch
            derived = make_guard(None, {"on_loop": "skip"})  # keywords: a guard of its own
            assert derived is not loopwatch and derived.record is loopwatch.record
            assert derived.policy.on_loop == "skip"
            mine = Guard()
            assert make_guard(mine, {}) is mine  # an explicit guard stays the user's

        @pytest.mark.loopwatch(detectors=pinned(), on_loop="warn", fail_on="never")
        def test_async_tasks_and_copied_contexts_see_it(loopwatch):
            @watch
            async def lookup(q: str) -> str:
                return "same"

            async def main():
                await asyncio.gather(*(lookup("x") for _ in range(3)))

            asyncio.run(main())
            context = contextvars.copy_context()
            worker = threading.Thread(target=context.run, args=(agent, "in-thread", ["y"] * 3))
            worker.start(); worker.join()
            assert {r.run_id for r in loopwatch.record.runs()} == {"default", "in-thread"}
            assert loopwatch.record.verdict == "stop"
        """
    )
    result = run(inner)
    result.assert_outcomes(passed=5)


def test_the_guard_is_gone_after_the_test(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_agent="""
        from loopwatch.integrations import current_guard

        def test_watched(loopwatch):
            assert current_guard() is loopwatch

        def test_after():
            assert current_guard() is None
        """
    )
    run(inner).assert_outcomes(passed=2)


def test_a_fixture_that_builds_the_agent_sees_the_tests_guard(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_agent="""
        import pytest
        from loopwatch.integrations import make_guard

        @pytest.fixture
        def agent_guard():
            return make_guard(None, {})

        @pytest.mark.loopwatch
        def test_it(agent_guard, loopwatch):
            assert agent_guard is loopwatch
        """
    )
    run(inner).assert_outcomes(passed=1)


def test_the_markers_config_is_a_file_beside_the_test_or_a_dict(inner: pytest.Pytester) -> None:
    (inner.path / "pinned.toml").write_text(only_repeated_call(stop_at=3))
    inner.makepyfile(
        test_agent="""
        import pytest
        from loopwatch.config import DETECTORS
        from agentkit import agent

        OFF = {name: {"enabled": False} for name in DETECTORS if name != "repeated_call"}
        LENIENT = {**OFF, "on_loop": "warn",
                   "repeated_call": {"warn_at": 2, "stop_at": 9, "window_warn_at": 0,
                                     "window_stop_at": 0}}

        @pytest.mark.loopwatch(config="pinned.toml", on_loop="warn")
        def test_from_a_file(loopwatch):
            assert loopwatch.config.source.endswith("pinned.toml")
            agent("r-file", ["x"] * 4)

        @pytest.mark.loopwatch(config=LENIENT)
        def test_from_a_dict(loopwatch):
            agent("r-dict", ["x"] * 4)

        @pytest.mark.loopwatch(config="missing.toml")
        def test_missing():
            pass
        """
    )
    result = run(inner)
    result.assert_outcomes(failed=1, passed=1, errors=1)
    text = output(result)
    assert "run 'r-file': stop" in text  # stop_at 3 from the file
    result.stdout.fnmatch_lines(["*1 test had warnings: *test_from_a_dict (warn: repeated_call)"])
    assert "missing.toml: no such file" in text


def test_a_fixture_requested_on_the_fly_watches_the_test_from_there(
    inner: pytest.Pytester,
) -> None:
    inner.makepyfile(
        test_agent="""
        from agentkit import agent

        def test_late(request):
            guard = request.getfixturevalue("loopwatch")
            agent("r-late", ["x"] * 4)
            assert guard.record.runs()
        """
    )
    (inner.path / "loopwatch.toml").write_text(only_repeated_call(on_loop="warn"))
    result = run(inner)
    # found inside the call, told at teardown: an error, not a silent pass
    result.assert_outcomes(passed=1, errors=1)
    text = output(result)
    assert "ERROR at teardown of test_late" in text and "run 'r-late': stop" in text


def test_bad_marker_settings_error_at_setup_with_a_clear_message(inner: pytest.Pytester) -> None:
    inner.makepyfile(
        test_agent="""
        import pytest

        @pytest.mark.loopwatch(repeated_call={"stop_at": "often"})
        def test_bad_value():
            pass

        @pytest.mark.loopwatch("warn")
        def test_positional():
            pass

        @pytest.mark.loopwatch(fail_on="sometimes")
        def test_bad_fail_on():
            pass
        """
    )
    result = run(inner)
    result.assert_outcomes(errors=3)
    text = output(result)
    assert "repeated_call" in text and "stop_at" in text
    assert "the loopwatch marker takes keywords only" in text
    assert "fail_on must be one of warn, stop, never, not 'sometimes'" in text
    assert "Traceback" not in text


def test_a_real_langchain_agent_in_a_test_is_watched(inner: pytest.Pytester) -> None:
    """LangChain's middleware ends a looping run gracefully (no exception): without the
    plugin such a test passes. With it, the middleware built in the test reports to
    the test's guard, and the test fails with the evidence."""
    inner.makepyfile(
        test_agent='''
        import pytest
        from langchain.agents import create_agent
        from langchain_core.language_models import BaseChatModel
        from langchain_core.messages import AIMessage
        from langchain_core.outputs import ChatGeneration, ChatResult
        from langchain_core.tools import tool
        from loopwatch.integrations.langchain import LoopwatchMiddleware
        from agentkit import pinned


        class Relentless(BaseChatModel):
            """A scripted model: the same search, turn after turn."""
            turns: int = 0

            @property
            def _llm_type(self):
                return "scripted"

            def bind_tools(self, tools, **kwargs):
                return self

            def _generate(self, messages, stop=None, run_manager=None, **kwargs):
                self.turns += 1
                call = {"name": "search", "args": {"q": "paris"}, "id": f"c{self.turns}"}
                reply = AIMessage(content="", tool_calls=[call])
                return ChatResult(generations=[ChatGeneration(message=reply)])


        @tool
        def search(q: str) -> str:
            """Search the web."""
            return "18C, cloudy"


        def ask(middleware):
            agent = create_agent(Relentless(), tools=[search], middleware=[middleware])
            return agent.invoke({"messages": [{"role": "user", "content": "weather?"}]},
                                {"recursion_limit": 60})


        @pytest.mark.loopwatch(detectors=pinned())
        def test_default_middleware(loopwatch):
            result = ask(LoopwatchMiddleware())
            assert result["messages"][-1].content.startswith("[loopwatch] Run stopped:")

        @pytest.mark.loopwatch(detectors=pinned())
        def test_middleware_with_its_own_keywords(loopwatch):
            ask(LoopwatchMiddleware(on_loop="skip"))
        '''
    )
    result = run(inner)
    result.assert_outcomes(failed=2)
    text = output(result)
    assert text.count("repeated_call (stop)") >= 2
    assert "search" in text


# -- the docs page's snippets ------------------------------------------------------------------
def page_snippets() -> list[str]:
    page = (ROOT / "docs" / "integrations" / "pytest.md").read_text(encoding="utf-8")
    mark = "<!-- run-by: tests/integrations/test_pytest_plugin.py -->"
    return re.findall(re.escape(mark) + r"\n```python\n(.*?)```", page, re.DOTALL)


def test_the_docs_page_snippet_runs(inner: pytest.Pytester) -> None:
    inner.makepyfile(test_docs_snippet=page_snippets()[0])
    result = run(inner)
    # the page's two tests: the stuck agent fails with the evidence, the other passes
    result.assert_outcomes(passed=1, failed=1)
    text = output(result)
    assert "FAILED test_docs_snippet.py::test_a_stuck_agent" in text
    assert "[loopwatch] the agent looped" in text and "run 'stuck': stop" in text


def test_the_docs_page_assert_no_loops_snippet_runs(inner: pytest.Pytester) -> None:
    (inner.path / "traces.jsonl").write_bytes(EXAMPLES.read_bytes())
    (inner.path / "loopwatch.toml").write_text(only_repeated_call(on_loop="stop"))
    inner.makepyfile(test_traces=page_snippets()[1])
    result = run(inner)
    result.assert_outcomes(failed=1)
    config = Config.load(inner.path / "loopwatch.toml")
    looping = [r.run_id for r in map(lambda run: scan(run, config), read_runs(str(EXAMPLES)))
               if r.verdict == "stop"]  # fmt: skip
    assert looping  # the examples hold loops RepeatedCall alone stops
    text = output(result)
    assert f"loopwatch: {len(looping)} of 6 runs in traces.jsonl looped" in text
    for run_id in looping:
        assert f"run {run_id!r} (traces.jsonl:" in text
