"""One Google ADK run traced by ADK's built-in OpenTelemetry tracing, in a process of
its own: the tracer provider is process-wide and can be set only once, so each traced
run gets a fresh process and nothing is left behind in the test session's.

``python adk_traced_run.py {stuck|healthy} {sync|async|stream}`` runs the agent of
``test_integration_google_adk.py`` with the loopwatch plugin (``on_loop="warn"``: the run
goes on and its trace ends normally) and prints one JSON line: the events the plugin
observed, and the finished spans as the OTLP file exporter's JSON (the real encoder).
Which content ADK records is the caller's environment
(``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``...), as it would be a user's.
"""

from __future__ import annotations

import json
import sys


def main(run: str, mode: str) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)  # before ADK takes its tracer

    from google.adk.cli.agent_test_runner import MockModel
    from test_integration_decorator import RecordingGuard
    from test_integration_google_adk import Harness, call, script, text
    from traces_convert import _otlp_of

    if run == "stuck":  # the same search six times, then an answer
        model = script(6)
    else:  # six pages of one search: progress, not a loop
        pages = [call(p, {"q": "paris weather", "page": p}) for p in range(1, 7)]
        model = MockModel.create([*pages, text("Six pages read.")])
    guard = RecordingGuard(on_loop="warn")
    Harness(guard, model).ask(mode)
    provider.shutdown()
    print(json.dumps({"events": guard.events, "otlp": _otlp_of(exporter.get_finished_spans())}))


if __name__ == "__main__":
    main(*sys.argv[1:3])
