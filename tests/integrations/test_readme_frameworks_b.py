"""The smolagents, AutoGen and LlamaIndex docs pages' snippets run as written, with
scripted models.

The snippets use free names: ``model`` (a smolagents model), ``client`` (an AutoGen
model client), ``llm`` (a LlamaIndex LLM) and ``web_search`` (the tool, in the
framework's own form).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from smolagents import tool
from test_integration_autogen import Recording, call
from test_integration_llama_index import Scripted as ScriptedLLM
from test_integration_llama_index import calls as llama_calls
from test_integration_readme import run_snippet
from test_integration_smolagents import Scripted, calls

DOCS = Path(__file__).resolve().parents[2] / "docs" / "integrations"
PAGES = {"LoopwatchSmolagents": "smolagents.md", "LoopwatchAutogen": "autogen.md"}


def snippet(needle: str) -> str:
    text = (DOCS / PAGES.get(needle, "llama-index.md")).read_text(encoding="utf-8")
    found = re.findall(r"```python\n(.*?)```", text, flags=re.DOTALL)
    (code,) = [code for code in found if needle in code]
    return code


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # no loopwatch.toml from the repository


def test_smolagents_snippet() -> None:
    @tool
    def web_search(q: str) -> str:
        """Search the web.

        Args:
            q: the query
        """
        return "18C, cloudy"

    model = Scripted(lambda turn, messages: calls("web_search", {"q": "paris"}, turn))
    _, printed = run_snippet(snippet("LoopwatchSmolagents"), model, web_search=web_search)
    assert (
        printed.strip()
        .splitlines()[-1]
        .startswith("[loopwatch] Run stopped: You called web_search(")
    )


def test_autogen_snippet() -> None:
    def web_search(q: str) -> str:
        """Search the web."""
        return "18C, cloudy"

    client = Recording([call(i, name="web_search") for i in range(20)])
    _, printed = run_snippet(
        snippet("LoopwatchAutogen"), None, client=client, web_search=web_search
    )
    assert (
        printed.strip()
        .splitlines()[-1]
        .startswith("[loopwatch] Run stopped: You called web_search(")
    )


def test_llama_index_snippet() -> None:
    ran: list[str] = []

    def web_search(q: str) -> str:
        """Search the web."""
        ran.append(q)
        return "18C, cloudy"

    model = ScriptedLLM(lambda turn, messages: llama_calls("web_search", {"q": "paris"}, turn))
    _, printed = run_snippet(
        snippet("LoopwatchLlamaIndex"), None, llm=model.llm, web_search=web_search
    )
    assert (
        printed.strip()
        .splitlines()[-1]
        .startswith("[loopwatch] Run stopped: You called web_search(")
    )
    assert len(ran) == 2  # the 3rd identical call, after two same results, did not run
