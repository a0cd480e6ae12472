"""Helpers shared by the tests of the framework adapters (Pydantic AI, Google ADK, Strands,
Claude Agent SDK, smolagents, AutoGen, LlamaIndex): scanning a framework's own
OpenTelemetry export, and running an ``examples/`` script."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loopwatch import Config, scan
from loopwatch.scan import Report
from loopwatch.traces import InputError, read_runs

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Scanned:
    """One run read back from an OTLP export, and its scan."""

    report: Report
    events: list[dict[str, Any]]
    meta: dict[str, Any]

    @property
    def verdict(self) -> str:
        return self.report.verdict

    @property
    def first_stop(self) -> int | None:
        return self.report.first_stop

    @property
    def tool_calls_before_stop(self) -> int | None:
        """How many tool calls the run had made when the scan first said stop."""
        if self.report.first_stop is None:
            return None
        return sum(e["kind"] == "tool_call" for e in self.events[: self.report.first_stop + 1])


def scan_otlp(spans: Any, config: Config) -> list[Scanned]:
    """Finished OpenTelemetry SDK spans, written as the OTLP file exporter's JSON and
    read back by ``loopwatch scan``'s readers."""
    from traces_convert import _otlp_of

    return scan_otlp_json(_otlp_of(spans), config)


def scan_otlp_json(document: dict[str, Any], config: Config) -> list[Scanned]:
    """An OTLP JSON document (as :func:`traces_convert._otlp_of` writes it, possibly in
    another process) read back by ``loopwatch scan``'s readers, each run scanned."""
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "trace.json")
        Path(path).write_text(json.dumps(document))
        runs = [item for item in read_runs(path) if not isinstance(item, InputError)]
    out = []
    for run in runs:
        data = run.to_dict()
        out.append(Scanned(scan(data, config=config), list(data["events"]), run.meta))
    return out


STOPPED = re.compile(r"^loopwatch: stopped at call (\d+)$")


def run_example(name: str, python: str = sys.executable) -> tuple[int, str]:
    """Run ``examples/<name>.py`` as a user would; the N of its last line
    ``loopwatch: stopped at call N`` and the whole output."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOOPWATCH_")}
    with tempfile.TemporaryDirectory() as tmp:  # no loopwatch.toml around it
        done = subprocess.run(
            [python, str(ROOT / "examples" / f"{name}.py")],
            capture_output=True,
            text=True,
            cwd=tmp,
            env=env,
            timeout=300,
            check=False,
        )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    last = done.stdout.strip().splitlines()[-1]
    found = STOPPED.match(last)
    assert found, f"last line {last!r}\n{out}"
    return int(found.group(1)), out


def readme_snippet(module: str) -> str:
    """The snippet of the framework's docs page (docs/integrations/, ``google_adk`` ->
    ``google-adk.md``) that imports ``loopwatch.integrations.<module>``."""
    page = ROOT / "docs" / "integrations" / f"{module.replace('_', '-')}.md"
    section = page.read_text(encoding="utf-8")
    found = [
        code
        for code in re.findall(r"```python\n(.*?)```", section, flags=re.DOTALL)
        if f"loopwatch.integrations.{module} import" in code
    ]
    assert len(found) == 1, found
    return found[0]


def run_snippet(code: str, **names: Any) -> tuple[dict[str, Any], str]:
    """Run a snippet as written, with its free names bound; (namespace, stdout)."""
    import contextlib
    import io

    namespace: dict[str, Any] = {"__name__": "readme", **names}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/integrations", "exec"), namespace)
    return namespace, out.getvalue()


@contextmanager
def openinference(
    instrumentor: Any, processors: Sequence[Any] = (), **options: Any
) -> Iterator[Any]:
    """An OpenInference ``instrumentor`` on for the block, exporting to memory (yields the
    ``InMemorySpanExporter``), and off afterwards: the framework's other tests run on the
    framework as it is. ``processors``: more span processors on its provider."""
    from traces_convert import _otel_collector

    provider, exporter = _otel_collector(processors)
    instrumentor.instrument(tracer_provider=provider, **options)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()
    assert not instrumentor.is_instrumented_by_opentelemetry


def assert_scans_like_the_live_run(
    events: list[dict[str, Any]], exported: Scanned, told_at_call: int = 3, stopped_at_call: int = 4
) -> None:
    """The exported run scans to the verdicts of the live events, with the same detectors.

    A stop is earned: the run is told first (the scan's ``first_warn``), stopped when it
    persists (``first_stop``); the export says both after as many tool calls as the live
    events, ``told_at_call`` and ``stopped_at_call``. The defaults are the default
    configuration's on the tests' short result ("18C cloudy": a bare result may be a
    hiccup): the 3rd identical call is told, the 4th stopped. A detailed result returned
    twice is told at the 2nd call's result and stopped at the 3rd call."""
    live = scan(events, config=Config())
    assert exported.verdict == live.verdict == "stop"
    assert live.first_stop is not None and live.first_warn is not None
    assert exported.report.first_warn is not None

    def calls_through(run: list[dict[str, Any]], step: int) -> int:
        return sum(e["kind"] == "tool_call" for e in run[: step + 1])

    told = calls_through(exported.events, exported.report.first_warn)
    assert told == calls_through(events, live.first_warn) == told_at_call
    live_calls = calls_through(events, live.first_stop)
    assert exported.tool_calls_before_stop == live_calls == stopped_at_call
    assert [f.detector for f in exported.report.findings] == [f.detector for f in live.findings]
