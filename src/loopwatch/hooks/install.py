"""``loopwatch install | uninstall claude-code | gemini-cli | codex [--project | --user]``.

Writes (or removes) loopwatch's hook entries in the agent's settings file, keeping
every other setting and hook as it is, and prints what changed:

* Claude Code: ``.claude/settings.json`` (project) or ``~/.claude/settings.json``;
* Gemini CLI: ``.gemini/settings.json`` or ``~/.gemini/settings.json``;
* Codex: ``.codex/hooks.json`` or ``$CODEX_HOME/hooks.json`` (``~/.codex``).

Idempotent: installing twice changes nothing the second time; an entry is
recognised as loopwatch's by its command (``.../loopwatch/hooks/_entry.py <agent>``,
``-m loopwatch.hooks <agent>`` or ``loopwatch hook <agent>``). The command runs
this Python on the hook entry script: no PATH lookup, and only the guard's modules
imported on every tool call.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path
from typing import Any

__all__ = ["add_parsers", "hook_command", "install", "settings_path", "uninstall"]

_EVENTS: dict[str, tuple[tuple[str, bool], ...]] = {
    "claude-code": (
        ("PreToolUse", True),
        ("PostToolUse", True),
        ("PostToolUseFailure", True),
        ("UserPromptSubmit", False),
    ),
    "codex": (("PreToolUse", True), ("PostToolUse", True), ("UserPromptSubmit", False)),
    "gemini-cli": (("BeforeTool", True), ("AfterTool", True), ("BeforeAgent", False)),
}
# Seconds for Claude Code and Codex, milliseconds for Gemini CLI.
_TIMEOUT = {"claude-code": 30, "codex": 30, "gemini-cli": 30_000}


def hook_command(agent: str) -> str:
    """The command line the agent runs for each hook event: this Python running the
    hook entry script (see :mod:`._entry`: faster than ``-m loopwatch.hooks``)."""
    entry = Path(__file__).resolve().with_name("_entry.py")
    return f"{shlex.quote(sys.executable)} {shlex.quote(str(entry))} {agent}"


def settings_path(agent: str, scope: str = "project", root: Path | None = None) -> Path:
    """The settings file ``install`` edits for this agent and scope."""
    if agent not in _EVENTS:
        raise ValueError(f"unknown agent {agent!r}; known: {', '.join(_EVENTS)}")
    if scope == "project":
        base = root or Path.cwd()
        folder = {"claude-code": ".claude", "gemini-cli": ".gemini", "codex": ".codex"}[agent]
        name = "hooks.json" if agent == "codex" else "settings.json"
        return base / folder / name
    home = Path(os.path.expanduser("~"))
    if agent == "codex":
        return Path(os.environ.get("CODEX_HOME") or home / ".codex") / "hooks.json"
    folder = ".claude" if agent == "claude-code" else ".gemini"
    return home / folder / "settings.json"


def _is_ours(handler: Any, agent: str) -> bool:
    if not isinstance(handler, dict):
        return False
    command = str(handler.get("command") or "").replace("\\", "/")
    return any(
        f"{marker} {agent}" in command
        for marker in ("loopwatch.hooks", "loopwatch/hooks/_entry.py", "loopwatch hook")
    )


def _load(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    text = path.read_text(encoding="utf-8")
    if not text.strip():
        return {}
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError(f"{path} does not hold a JSON object")
    return data


def _save(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".loopwatch-tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    os.replace(tmp, path)


def install(agent: str, path: Path) -> list[str]:
    """Add loopwatch's hook entries to ``path``; the list of changes (empty: none)."""
    data = _load(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError(f"'hooks' in {path} is not an object")
    command = hook_command(agent)
    changes = []
    for event, takes_matcher in _EVENTS[agent]:
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ValueError(f"'hooks.{event}' in {path} is not a list")
        ours = [
            h
            for g in groups
            if isinstance(g, dict)
            for h in g.get("hooks", [])
            if _is_ours(h, agent)
        ]
        if ours:
            stale = [h for h in ours if h.get("command") != command]
            for h in stale:
                h["command"] = command
                changes.append(f"updated the {event} hook's command")
            continue
        handler: dict[str, Any] = {"type": "command", "command": command}
        handler["timeout"] = _TIMEOUT[agent]
        if agent == "gemini-cli":
            handler["name"] = "loopwatch"
        group: dict[str, Any] = {"hooks": [handler]}
        if takes_matcher:
            group = {"matcher": "*" if agent != "gemini-cli" else ".*", **group}
        groups.append(group)
        changes.append(f"added the {event} hook")
    if changes:
        _save(path, data)
    return changes


def uninstall(agent: str, path: Path) -> list[str]:
    """Remove loopwatch's hook entries from ``path``, leaving everything else."""
    if not path.exists():
        return []
    data = _load(path)
    hooks = data.get("hooks")
    if not isinstance(hooks, dict):
        return []
    changes = []
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            if isinstance(group, dict) and isinstance(group.get("hooks"), list):
                kept = [h for h in group["hooks"] if not _is_ours(h, agent)]
                if len(kept) != len(group["hooks"]):
                    changes.append(f"removed the {event} hook")
                if not kept:
                    continue
                group["hooks"] = kept
            kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not hooks:
        del data["hooks"]
    if changes:
        _save(path, data)
    return changes


def add_parsers(sub: Any) -> None:
    """The ``hook``, ``install`` and ``uninstall`` subcommands of ``loopwatch``."""
    agents = tuple(_EVENTS)
    p_hook = sub.add_parser("hook", help="answer one coding-agent hook call (payload on stdin)")
    p_hook.add_argument("agent", choices=agents)
    p_hook.set_defaults(func=_cmd_hook)
    for name, helptext in (
        ("install", "add loopwatch's hooks to a coding agent's settings"),
        ("uninstall", "remove loopwatch's hooks from a coding agent's settings"),
    ):
        p = sub.add_parser(name, help=helptext)
        p.add_argument("agent", choices=agents)
        scope = p.add_mutually_exclusive_group()
        scope.add_argument(
            "--project", dest="scope", action="store_const", const="project",
            help="this project's settings (the default)",
        )  # fmt: skip
        scope.add_argument(
            "--user", dest="scope", action="store_const", const="user",
            help="your user settings (every project)",
        )  # fmt: skip
        p.set_defaults(func=_cmd_install if name == "install" else _cmd_uninstall, scope=None)


def _cmd_hook(args: argparse.Namespace, config: Any) -> int:
    from ._dispatch import main

    return main([args.agent])


def _cmd_install(args: argparse.Namespace, config: Any) -> int:
    return _edit(args, install)


def _cmd_uninstall(args: argparse.Namespace, config: Any) -> int:
    return _edit(args, uninstall)


def _edit(args: argparse.Namespace, action: Any) -> int:
    path = settings_path(args.agent, args.scope or "project")
    try:
        changes = action(args.agent, path)
    except (OSError, ValueError) as exc:
        print(f"loopwatch {args.command}: {path}: {exc}", file=sys.stderr)
        return 2
    if not changes:
        print(f"{path}: nothing to change")
        return 0
    for change in changes:
        print(f"{path}: {change}")
    if action is install:
        print(f"hook command: {hook_command(args.agent)}")
        if args.agent == "codex":
            print("Codex runs hooks only with `hooks = true` under [features] in config.toml.")
    return 0
