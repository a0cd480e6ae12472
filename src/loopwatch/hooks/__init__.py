"""Coding-agent hooks: ``loopwatch hook AGENT`` for Claude Code, Codex, Gemini CLI,
GitHub Copilot CLI, OpenCode, Qwen Code and Cursor.

Each agent runs a command around every tool call with the call as JSON on stdin
and reads the answer from the exit code, stdout and stderr (OpenCode through a
small plugin that runs the same command). One module per agent's protocol turns
the payload into loopwatch events and a verdict back into that protocol;
:mod:`._dispatch` does the rest (state in a SQLite file, config, never failing the
agent). Kept import-light: a hook runs once per tool call. Faster still, the hook
daemon (:mod:`.daemon`) answers the calls with the guard kept loaded, and the hook
process is a client that imports nothing (:mod:`_loopwatch_hook`).

The same ``install``, ``uninstall`` and ``doctor`` commands put an MCP client's servers
behind ``loopwatch mcp`` (:mod:`.mcp_install`; the proxy itself is
:mod:`loopwatch.integrations.mcp`).
"""

from __future__ import annotations

__all__ = ["AGENTS"]

AGENTS = (
    "claude-code", "codex", "gemini-cli", "copilot-cli", "opencode", "qwen-code", "cursor"
)  # fmt: skip
