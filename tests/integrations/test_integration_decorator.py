"""Plain Python: ``watch`` on sync and async tool functions, with a real Guard.

Also home of :class:`RecordingGuard`, which the framework tests share: a real guard
that keeps the events it observed, so a live run can be checked against ``scan``.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Mapping
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwatch import Guard, LoopDetected, Verdict, scan
from loopwatch.events import Event
from loopwatch.integrations import current_run, watch


class RecordingGuard(Guard):
    """A real guard that also keeps every event it observed and every verdict."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.events: list[dict[str, Any]] = []
        self.verdicts: list[Verdict] = []
        self.run_ids: list[str] = []
        # The three lists are read by index, and runs are judged on several threads
        # at once (the span processor judges each run under its own lock): an event
        # and its verdict are appended together, once the verdict is known.
        self._lock = threading.Lock()

    def _record(self, run_id: str, event: dict[str, Any], verdict: Verdict | None) -> None:
        with self._lock:
            self.run_ids.append(run_id)
            self.events.append(event)
            if verdict is not None:
                self.verdicts.append(verdict)

    def observe(self, run_id: str, event: Event | Mapping[str, Any]) -> Verdict:
        seen = event.to_dict() if isinstance(event, Event) else dict(event)
        try:
            verdict = super().observe(run_id, event)
        except BaseException:
            self._record(run_id, seen, None)
            raise
        self._record(run_id, seen, verdict)
        return verdict

    async def aobserve(self, run_id: str, event: Event | Mapping[str, Any]) -> Verdict:
        seen = event.to_dict() if isinstance(event, Event) else dict(event)
        try:
            verdict = await super().aobserve(run_id, event)
        except BaseException:
            self._record(run_id, seen, None)
            raise
        self._record(run_id, seen, verdict)
        return verdict

    def first(self, action: str) -> int | None:
        for verdict in self.verdicts:
            if verdict.action == action:
                return verdict.step
        return None

    def events_of(self, run_id: str) -> list[dict[str, Any]]:
        return [e for r, e in zip(self.run_ids, self.events, strict=True) if r == run_id]


def test_stop_raises_before_the_third_identical_call_runs() -> None:
    guard = RecordingGuard()
    ran: list[str] = []

    @watch(guard=guard, run_id="r1")
    def search(q: str) -> str:
        ran.append(q)
        return "18C cloudy"

    with pytest.raises(LoopDetected) as caught:
        for _ in range(10):
            search("paris weather")

    # the defaults, on a short result: two calls ran, the 3rd returned why it was not run
    # (told), the 4th, the agent persisting, raised before running
    assert len(ran) == 2
    verdict = caught.value.verdict
    assert verdict.findings[0].detector == "repeated_call"
    assert "search" in str(caught.value)
    report = scan(guard.events, config=guard.config)
    assert verdict.step == report.first_stop == len(guard.events) - 1


def test_async_functions_are_watched_too() -> None:
    guard = RecordingGuard(on_loop="skip")
    ran: list[str] = []

    @watch(guard=guard, run_id="r1", on_skip="SKIPPED")
    async def search(q: str) -> str:
        ran.append(q)
        await asyncio.sleep(0)
        return "18C cloudy"

    async def agent() -> list[str]:
        return [await search(q="paris weather") for _ in range(5)]

    results = asyncio.run(agent())
    # two calls ran; the 3rd was skipped to tell the agent, the 4th and 5th skipped as
    # the agent persisted (max_skips=3: a 7th would stop)
    assert results == ["18C cloudy"] * 2 + ["SKIPPED"] * 3
    assert len(ran) == 2
    report = scan(guard.events, config=guard.config)
    skips = [v.step for v in guard.verdicts if v.action == "skip"]
    assert (skips[0], skips[1]) == (report.first_warn, report.first_stop)


def test_skip_value_can_be_computed_from_the_verdict() -> None:
    guard = Guard(on_loop="skip")
    tool = watch(guard=guard, run_id="r", on_skip=lambda v: {"error": v.message})

    @tool
    def lookup(key: str) -> dict[str, str]:
        return {"value": "same"}

    out = [lookup("k") for _ in range(3)]
    assert out[:2] == [{"value": "same"}] * 2
    assert out[2]["error"].startswith("[loopwatch] This call was not executed.")


def test_one_guard_sees_a_cycle_across_tools(caplog: pytest.LogCaptureFixture) -> None:
    guard = RecordingGuard()
    tool = watch(guard=guard)  # the guard.tool-style usage: one decorator, many tools

    @tool
    def fetch(url: str) -> str:
        return "page"

    @tool
    def search(q: str) -> str:
        return "results"

    with (
        caplog.at_level(logging.WARNING, logger="loopwatch"),
        pytest.raises(LoopDetected),
        current_run("cyc"),
    ):
        for _ in range(10):
            search("x")
            fetch("http://a")
    assert set(guard.run_ids) == {"cyc"}
    assert any("[loopwatch] Warning" in r.getMessage() for r in caplog.records)


def test_runs_are_kept_apart_by_current_run() -> None:
    guard = RecordingGuard()

    @watch(guard=guard)
    def search(q: str) -> str:
        return "same"

    # 2 calls in each of two runs: neither reaches the 3rd identical call, which the
    # defaults stop; one run would have stopped at the 3rd of these 4 calls
    for _ in range(2):
        with current_run("a"):
            search("x")
        with current_run("b"):
            search("x")
    assert guard.first("stop") is None
    assert len(guard.events_of("a")) == len(guard.events_of("b")) == 4


def test_warn_calls_on_warn_and_errors_are_observed() -> None:
    guard = RecordingGuard(on_loop="warn")
    warnings: list[Verdict] = []

    @watch(guard=guard, run_id="r", on_warn=warnings.append)
    def flaky(path: str) -> str:
        raise FileNotFoundError(path)

    for _ in range(6):
        with pytest.raises(FileNotFoundError):
            flaky("/missing")
    results = [e for e in guard.events if e["kind"] == "tool_result"]
    assert len(results) == 6 and all(e["error"] for e in results)
    assert results[0]["text"] == "FileNotFoundError: /missing"
    assert warnings and all(v.action == "warn" for v in warnings)


def test_positional_and_keyword_calls_are_the_same_call() -> None:
    guard = RecordingGuard()

    @watch(guard=guard, run_id="r")
    def search(q: str, page: int = 1) -> str:
        return "same"

    search("x")
    search(q="x")
    # the defaults tell the 3rd identical call (not run: the agent reads why) and stop
    # the 4th: both because they are the same call
    assert "not executed" in search("x", 1)
    with pytest.raises(LoopDetected):
        search(page=1, q="x")
    calls = [e for e in guard.events if e["kind"] == "tool_call"]
    assert [c["args"] for c in calls] == [{"q": "x", "page": 1}] * 4


def test_guard_and_keywords_together_are_refused() -> None:
    with pytest.raises(TypeError, match="not both"):
        watch(guard=Guard(), on_loop="skip")


def test_bare_decorator_uses_one_shared_default_guard() -> None:
    @watch
    def a(x: int) -> int:
        return x

    @watch
    def b(x: int) -> int:
        return x + 1

    with current_run("bare-decorator-test"):
        assert a(1) == 1 and b(1) == 2
    from loopwatch.integrations import decorator

    shared = decorator._default_guard
    assert shared is not None
    state = shared.state("bare-decorator-test")
    assert state is not None and state.n == 4


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["search", "fetch"]), st.integers(0, 2), st.integers(0, 1)),
        min_size=1,
        max_size=30,
    )
)
def test_the_decorated_run_stops_exactly_where_scan_says(
    calls: list[tuple[str, int, int]],
) -> None:
    """Whatever the sequence of calls, the decorator stops (raises) at the event index
    where a scan of the events it observed reports first_stop, and nowhere else."""
    guard = RecordingGuard()
    tool = watch(guard=guard, run_id="prop")

    @tool
    def search(q: int, result: int) -> str:
        return f"search result {result}"

    @tool
    def fetch(q: int, result: int) -> str:
        return f"fetch result {result}"

    tools = {"search": search, "fetch": fetch}
    stopped_at = None
    for name, arg, result in calls:
        try:
            tools[name](arg, result)
        except LoopDetected as exc:
            stopped_at = exc.verdict.step
            break
    assert stopped_at == scan(guard.events, config=guard.config).first_stop


def test_loopwatch_imports_without_any_framework_installed() -> None:
    """``import loopwatch`` and ``loopwatch.integrations`` (the decorator) must work with
    no framework installed; a framework module says what to install."""
    import subprocess
    import sys
    import textwrap

    code = textwrap.dedent(
        """
        import importlib.abc, sys
        BLOCKED = ("langchain", "langchain_core", "langgraph", "agents", "deepeval", "openai")

        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, Block())
        import loopwatch, loopwatch.integrations, loopwatch.traces.deepeval
        from loopwatch.integrations import watch

        @watch(run_id="r")
        def f(x):
            return x

        assert f(1) == 1
        for name in ("langchain", "openai_agents", "deepeval"):
            try:
                __import__(f"loopwatch.integrations.{name}")
            except ModuleNotFoundError as exc:
                print(name, exc.name)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "langchain",
        "langchain",
        "openai_agents",
        "agents",
        "deepeval",
        "deepeval",
    ]
