"""Every python snippet of the docs' LangChain, OpenAI Agents, deepeval and plain-Python
pages runs, with fakes.

The pages say the snippets use two free names: ``model`` (your chat model) and
``web_search`` (your tool). This test binds them to scripted fakes that keep calling
the same tool, runs each snippet as written, and checks what it claims.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path
from typing import Any

os.environ.setdefault("DEEPEVAL_TELEMETRY_OPT_OUT", "1")

import pytest
from agents import set_tracing_disabled
from agents.testing import ScriptedModel, assistant_message, function_call
from langchain_core.messages import AIMessage, BaseMessage, ToolMessage
from test_integration_langchain import ScriptedChatModel

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"
PAGES = ("langchain.md", "openai-agents.md", "deepeval.md", "plain-python.md")
README = DOCS / "langchain.md"  # the file name tracebacks of a snippet show
set_tracing_disabled(True)


def snippets() -> list[str]:
    return [
        code
        for page in PAGES
        for code in re.findall(
            r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), flags=re.DOTALL
        )
    ]


def web_search(q: str) -> str:
    """Search the web."""
    return "18C, cloudy"


def langchain_model() -> ScriptedChatModel:
    def script(turn: int, messages: list[BaseMessage]) -> AIMessage:
        # four identical calls: two run, two are skipped (the 3rd to tell the agent, the
        # 4th as it persists; on_loop="skip" stops after three persisting skips)
        if turn < 4:
            return AIMessage(
                content="",
                tool_calls=[{"name": "web_search", "args": {"q": "paris"}, "id": f"c{turn}"}],
            )
        return AIMessage(content="18C, cloudy.")

    return ScriptedChatModel(script=script)


def agents_model() -> ScriptedModel:
    # four identical calls: two run, two are skipped (the 3rd to tell the agent, the 4th
    # as it persists; on_loop="skip" stops after three persisting skips)
    steps: list[Any] = [
        [function_call("web_search", {"q": "paris"}, call_id=f"c{i}")] for i in range(4)
    ]
    return ScriptedModel([*steps, [assistant_message("18C, cloudy.")]])


def run_snippet(code: str, model: Any, **names: Any) -> tuple[dict[str, Any], str]:
    """Run ``code`` with the free names bound (``names`` adds or replaces some)."""
    namespace: dict[str, Any] = {"model": model, "web_search": web_search, "__name__": "readme"}
    namespace.update(names)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, str(README), "exec"), namespace)
    return namespace, out.getvalue()


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No loopwatch.toml from the repository; deepeval writes its cache here.
    monkeypatch.chdir(tmp_path)


def test_the_section_has_one_snippet_per_integration() -> None:
    found = snippets()
    assert len(found) == 5
    for needle in (
        "LoopwatchMiddleware",
        "LoopwatchCallbackHandler",
        "LoopwatchAgents",
        "LoopwatchMetric",
        "watch(",
    ):
        assert sum(needle in code for code in found) == 1, needle


def snippet(needle: str) -> str:
    return next(code for code in snippets() if needle in code)


def test_langchain_middleware_snippet() -> None:
    ns, _ = run_snippet(snippet("LoopwatchMiddleware"), langchain_model())
    skipped = [
        m for m in ns["result"]["messages"] if isinstance(m, ToolMessage) and m.status == "error"
    ]
    # two calls ran; on_loop="skip" skips the 3rd identical call (to tell the agent) and
    # the one after it (the agent persisting)
    assert [m.tool_call_id for m in skipped] == ["c2", "c3"]
    assert ns["result"]["messages"][-1].content == "18C, cloudy."


# A callback cannot answer a call in the tool's place: the handler raises on a skip that
# blocks. On the defaults the 3rd identical call is a told skip (a warning here, the call
# runs) and the 4th is the stop the run ends with.
def test_langchain_callback_snippet() -> None:
    _, printed = run_snippet(snippet("LoopwatchCallbackHandler"), langchain_model())
    assert printed.startswith("[loopwatch] Run stopped: You called web_search")


def test_openai_agents_snippet() -> None:
    model = agents_model()
    ns, _ = run_snippet(snippet("LoopwatchAgents"), model)
    assert ns["result"].final_output == "18C, cloudy."
    outputs = [
        item["output"]
        for item in model.calls[-1].input
        if isinstance(item, dict) and item.get("type") == "function_call_output"
    ]
    assert sum(str(o).startswith("[loopwatch] This call was not executed.") for o in outputs) == 2


def test_deepeval_snippet() -> None:
    ns, printed = run_snippet(snippet("LoopwatchMetric"), model=None)
    metric = ns["metric"]
    assert metric.success is False and metric.score < 0.5
    assert "repeated_call" in metric.reason and "repeated_call" in printed


def test_plain_python_snippet() -> None:
    _, printed = run_snippet(snippet("watch("), model=None)
    # a short result ("18C, cloudy"): the 3rd identical call is told (not run), the 4th,
    # the agent persisting, raises
    assert printed.startswith("You called search(")
    assert "4 times" in printed
    assert printed.rstrip().endswith("You were told at step 4.")
