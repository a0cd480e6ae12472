"""The compiled core and the pure-Python fallback are one program.

``pip install`` compiles the hot path with mypyc where it can (setup.py); the same
sources run as plain Python where it cannot, or with ``LOOPWATCH_PURE=1``. These
tests hold the two builds to the same answers: a worker process running the pure
build (tests/core/build_worker.py) and this process, running the compiled one, are fed
the same corpus runs, conformance scenarios and hypothesis streams, and must agree
on every step's verdict and findings (steps, severities, messages, patterns), the
scan's report and score, and the run state's bytes, which each build must also
read from the other (a Redis store shared by workers of both builds).

Run under the pure build (``LOOPWATCH_PURE=1``, the Makefile's second pass), the
comparison would be the pure build against itself: those tests skip.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import DATA
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_parity import events as parity_events

import loopwatch
from loopwatch import _build

HERE = Path(__file__).resolve().parent
CORPUS = HERE.parents[2] / "shared" / "corpus"
SCENARIOS = [DATA / "conformance.jsonl", DATA / "intent.jsonl"]

compiled_only = pytest.mark.skipif(
    not loopwatch.compiled, reason="the pure-Python build is loaded: nothing to compare"
)


def test_the_build_loaded_is_the_one_asked_for() -> None:
    if _build.pure_requested():
        assert not loopwatch.compiled
        assert all(not _build._is_extension(m) for m in _build.COMPILED)
    elif os.environ.get("CI"):
        # CI builds on a machine with a compiler: a silent fallback to pure Python
        # would leave the compiled build untested.
        assert loopwatch.compiled, "CI must test the compiled build (pip install -e . compiles)"
    assert ("compiled" in _build.describe()) == loopwatch.compiled
    # fingerprints.py picks its character scan by how it runs: compiled, and only then
    from loopwatch import fingerprints

    assert loopwatch.compiled is fingerprints._SCAN_CHARACTERS


@compiled_only
def test_every_compiled_module_is_newer_than_its_source() -> None:
    """An edited source with the old extension beside it would run the old code
    silently: `make test` rebuilds when a compiled source changes, and this says so
    if anything else left a stale build."""
    for module in _build.COMPILED:
        source = _build.source_path(module)
        built = Path(sys.modules[module].__file__ or "")
        if built.parent != source.parent:
            continue  # an installed wheel: no source tree to be stale against
        assert built.stat().st_mtime >= source.stat().st_mtime, (
            f"{built.name} is older than {source.name}: rebuild with `pip install -e .` "
            "(or `make test`)"
        )


class Worker:
    """The pure-Python build in a subprocess, answering one stream per request."""

    def __init__(self) -> None:
        env = {**os.environ, "LOOPWATCH_PURE": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "build_worker.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            cwd=HERE,
        )

    def ask(self, request: dict[str, Any]) -> Any:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(request).encode() + b"\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        assert line, "the pure-Python worker died"
        return json.loads(line)

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=60)


@pytest.fixture(scope="module")
def pure() -> Iterator[Worker]:
    worker = Worker()
    yield worker
    worker.close()


def here(request: dict[str, Any]) -> Any:
    import build_worker

    # the same JSON round trip as the worker's answer (tuples become lists)
    return json.loads(json.dumps(build_worker.run(request)))


def check(pure: Worker, events: list[dict[str, Any]], on_loop: str = "stop") -> None:
    request = {"events": events, "on_loop": on_loop}
    theirs, ours = pure.ask(request), here(request)
    for i, (a, b) in enumerate(zip(theirs["steps"], ours["steps"], strict=True)):
        assert a == b, f"step {i} ({events[i].get('kind')}): pure {a} != compiled {b}"
    assert theirs["guard"] == ours["guard"]
    assert theirs["report"] == ours["report"]
    assert theirs["state"] == ours["state"], "the builds serialise the run state differently"
    # each build reads the state the other wrote and goes on from it identically
    tail = events[-10:]
    for writer in (theirs, ours):
        cont = {"events": tail, "on_loop": on_loop, "state": writer["state"]}
        assert pure.ask(cont) == here(cont)


@compiled_only
def test_both_builds_agree_on_constructors_and_state_layout(pure: Worker) -> None:
    import build_worker

    theirs, ours = pure.ask({"describe": True}), build_worker.describe()
    assert theirs["compiled"] is False and ours["compiled"] is True
    assert theirs["defaults"] == ours["defaults"]
    # this process may have imported more record classes (the hooks') than the worker
    assert theirs["records"].keys() <= ours["records"].keys()
    assert theirs["records"] == {k: ours["records"][k] for k in theirs["records"]}


def _runs(path: Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as fh:
        return [json.loads(line) for line in fh if line.strip()]


@compiled_only
def test_both_builds_agree_on_the_scenarios(pure: Worker) -> None:
    for path in SCENARIOS:
        for run in _runs(path):
            for on_loop in ("stop", "skip", "warn"):
                check(pure, run["events"], on_loop)


@compiled_only
@pytest.mark.skipif(not CORPUS.is_dir(), reason="no shared corpus beside the repository")
def test_both_builds_agree_on_the_corpus(pure: Worker) -> None:
    from loopwatch.traces import TraceRun, read_runs

    checked = 0
    for path in sorted(CORPUS.glob("*.jsonl")):
        for run in read_runs(str(path)):
            assert isinstance(run, TraceRun), run
            check(pure, list(run.events))
            checked += 1
    assert checked > 100


@compiled_only
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    run_events=st.lists(parity_events(), max_size=80),
    on_loop=st.sampled_from(["stop", "skip", "warn"]),
)
def test_both_builds_agree_on_random_streams(
    pure: Worker, run_events: list[dict[str, Any]], on_loop: str
) -> None:
    check(pure, run_events, on_loop)


@pytest.mark.skipif(_build.pure_requested(), reason="a build test: run once, in the main pass")
def test_without_a_compiler_the_package_still_builds_as_pure_python(tmp_path: Path) -> None:
    """setup.py falls back to pure Python when compiling fails (here: a C compiler
    that always fails), and leaves no half-built extension in the wheel."""
    pytest.importorskip("mypyc")
    root = HERE.parents[1]
    env = {**os.environ, "CC": "false", "LOOPWATCH_REQUIRE_COMPILED": ""}
    cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps"]
    cmd += ["--no-build-isolation", "-w", str(tmp_path), str(root)]
    subprocess.run(cmd, env=env, check=True, capture_output=True, timeout=600)
    (wheel,) = tmp_path.glob("loopwatch-*.whl")
    import zipfile

    names = zipfile.ZipFile(wheel).namelist()
    assert not [n for n in names if n.endswith((".so", ".pyd"))]
    for module in _build.COMPILED:
        assert module.replace(".", "/") + ".py" in names
