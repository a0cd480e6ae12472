"""The benchmarks print numbers and are not run by the suite; this only checks that
each still loads against the current API (two of them had been importing a name
that moved, and nothing noticed)."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCHMARKS = sorted((Path(__file__).resolve().parents[2] / "benchmarks").glob("*.py"))


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 10


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda p: p.name)
def test_each_benchmark_loads(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(path.parent))
    # run_name other than "__main__": the module's imports and definitions run, its
    # main() does not
    namespace = runpy.run_path(str(path), run_name="loopwatch_benchmark")
    assert namespace
    sys.modules.pop("_workload", None)
