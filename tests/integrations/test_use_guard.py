"""``use_guard``: the context-local default guard that adapters built without
``guard=`` and bare ``@watch`` calls take (what the pytest plugin puts in force per
test). Context-local: threads, asyncio tasks and nested blocks each see their own."""

from __future__ import annotations

import asyncio
import contextvars
import threading
from typing import Any

import pytest

from loopwatch import Guard, RepeatedCall
from loopwatch.integrations import current_guard, current_run, make_guard, use_guard, watch
from loopwatch.integrations.langchain import LoopwatchMiddleware
from loopwatch.testing import RecordedGuard


def pinned() -> list[RepeatedCall]:
    return [RepeatedCall(warn_at=2, stop_at=3, window_warn_at=None, window_stop_at=None)]


def test_outside_any_block_adapters_build_their_own_guard() -> None:
    assert current_guard() is None
    built = make_guard(None, {"on_loop": "skip"})
    assert isinstance(built, Guard) and built.policy.on_loop == "skip"
    assert make_guard(None, {}) is not make_guard(None, {})


def test_inside_a_block_adapters_take_the_guard_and_blocks_nest() -> None:
    outer, inner = Guard(), Guard()
    with use_guard(outer):
        assert make_guard(None, {}) is outer
        assert LoopwatchMiddleware().guard is outer  # a real adapter, built without guard=
        with use_guard(inner):
            assert current_guard() is inner and make_guard(None, {}) is inner
        assert current_guard() is outer
    assert current_guard() is None


def test_an_explicit_guard_wins_and_guard_with_keywords_is_still_refused() -> None:
    mine = Guard()
    with use_guard(Guard()):
        assert make_guard(mine, {}) is mine
        assert LoopwatchMiddleware(mine).guard is mine
        with pytest.raises(TypeError, match="not both"):
            make_guard(mine, {"on_loop": "skip"})


def test_keywords_configure_a_guard_of_their_own_on_top_of_the_blocks() -> None:
    base = Guard(on_loop="skip", max_iterations=7)
    with use_guard(base):
        derived = make_guard(None, {"repeated_call": {"stop_at": 9}})
        assert derived is not base
        assert derived.policy.on_loop == "skip"  # from the block's guard
        sections = derived.config.to_dict()
        assert sections["iteration_cap"]["max_iterations"] == 7
        assert sections["repeated_call"]["stop_at"] == 9  # the keyword
        made: list[dict[str, Any]] = []

        def derive(options: dict[str, Any]) -> Guard:
            made.append(options)
            return RecordedGuard(base.config, **options)

    with use_guard(base, derive=derive):
        assert isinstance(make_guard(None, {"on_loop": "warn"}), RecordedGuard)
    assert made == [{"on_loop": "warn"}]


def test_bare_watch_follows_the_block_at_each_call() -> None:
    @watch
    def search(q: str) -> str:
        return "same"

    first = RecordedGuard(detectors=pinned(), on_loop="warn")  # the agent runs on
    second = RecordedGuard(detectors=pinned(), on_loop="warn")
    with use_guard(first), current_run("r"):
        for _ in range(3):
            search("x")
    with use_guard(second), current_run("r"):
        search("x")
    assert first.record.verdict == "stop"
    assert second.record.verdict == "ok"  # its own state: one call


def test_watch_with_its_own_guard_ignores_the_block() -> None:
    own = RecordedGuard(detectors=pinned(), on_loop="warn")
    scoped = RecordedGuard(detectors=pinned(), on_loop="warn")

    @watch(guard=own, run_id="r")
    def search(q: str) -> str:
        return "same"

    with use_guard(scoped):
        for _ in range(3):
            search("x")
    assert own.record.verdict == "stop" and scoped.record.runs() == []


def test_threads_do_not_inherit_the_block_copied_contexts_do() -> None:
    guard = Guard()
    seen: dict[str, Guard | None] = {}
    with use_guard(guard):
        plain = threading.Thread(target=lambda: seen.update(plain=current_guard()))
        context = contextvars.copy_context()
        copied = threading.Thread(
            target=context.run, args=(lambda: seen.update(copied=current_guard()),)
        )
        for t in (plain, copied):
            t.start()
            t.join()
    assert seen == {"plain": None, "copied": guard}


def test_concurrent_tasks_each_keep_their_own_block() -> None:
    guards = [RecordedGuard(detectors=pinned(), on_loop="warn") for _ in range(4)]

    @watch
    async def lookup(q: str) -> str:
        await asyncio.sleep(0)
        return "same"

    async def task(n: int) -> None:
        with use_guard(guards[n]), current_run(f"t{n}"):
            for _ in range(n):  # task n makes n identical calls
                await lookup("x")
                await asyncio.sleep(0)  # let the others interleave

    async def main() -> None:
        await asyncio.gather(*(task(n) for n in range(4)))

    asyncio.run(main())
    assert [g.record.verdict for g in guards] == ["ok", "ok", "warn", "stop"]
    assert [[r.run_id for r in g.record.runs()] for g in guards] == [[], [], ["t2"], ["t3"]]
