"""An integration imported without its framework says which extra to install.

Each case runs in a fresh interpreter where the framework's top-level module is
blocked (``sys.modules[name] = None``), which is what importing it looks like when
the package is not installed.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[2] / "src")

CASES = [
    ("openai_agents", "agents", "loopwatch[openai-agents]"),
    ("langchain", "langchain", "loopwatch[langchain]"),
    ("langchain", "langgraph", "loopwatch[langchain]"),
    ("deepeval", "deepeval", "loopwatch[deepeval]"),
    ("smolagents", "smolagents", "loopwatch[smolagents]"),
    ("autogen", "autogen_agentchat", "loopwatch[autogen]"),
    ("pydantic_ai", "pydantic_ai", "loopwatch[pydantic-ai]"),
    ("google_adk", "google.adk", "loopwatch[google-adk]"),
    ("strands", "strands", "loopwatch[strands]"),
    ("claude_agent_sdk", "claude_agent_sdk", "loopwatch[claude-agent-sdk]"),
    ("llama_index", "llama_index", "loopwatch[llama-index]"),
    ("crewai", "crewai", "loopwatch[crewai]"),
    ("opentelemetry", "opentelemetry.sdk", "loopwatch[otel]"),
    ("opentelemetry", "opentelemetry", "loopwatch[otel]"),
    ("mcp", "mcp", "loopwatch[mcp]"),
]


@pytest.mark.parametrize(("module", "blocked", "extra"), CASES)
def test_missing_framework_names_the_extra(module: str, blocked: str, extra: str) -> None:
    code = (
        "import sys\n"
        f"sys.modules[{blocked!r}] = None\n"
        "try:\n"
        f"    import loopwatch.integrations.{module}\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, '|', exc.name, '|', exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC, "DEEPEVAL_TELEMETRY_OPT_OUT": "1"},
        timeout=120,
        check=True,
    ).stdout
    kind, name, message = (part.strip() for part in out.split("|", 2))
    assert kind == "ModuleNotFoundError"  # still what `except ModuleNotFoundError` expects
    assert name.startswith(blocked)
    assert f'pip install "{extra}"' in message


def test_loopwatch_itself_imports_without_any_framework() -> None:
    code = (
        "import sys\n"
        "for name in ('agents', 'langchain', 'langgraph', 'deepeval', 'smolagents',\n"
        "             'autogen_agentchat', 'llama_index'):\n"
        "    sys.modules[name] = None\n"
        "import loopwatch, loopwatch.integrations, loopwatch.traces\n"
        "print('ok')\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": SRC},
        timeout=120,
        check=True,
    ).stdout
    assert out.strip() == "ok"
