"""``loopwatch install | uninstall AGENT [--project | --user]``.

Writes (or removes) loopwatch's hook entries for a coding agent, keeping every
other setting and hook as it is, and prints what changed:

* Claude Code: ``.claude/settings.json`` (project) or ``~/.claude/settings.json``;
* Codex: ``.codex/hooks.json`` or ``$CODEX_HOME/hooks.json`` (``~/.codex``);
* Gemini CLI: ``.gemini/settings.json`` or ``~/.gemini/settings.json``;
* Qwen Code: ``.qwen/settings.json`` or ``~/.qwen/settings.json``;
* GitHub Copilot CLI: a file of its own, ``.github/hooks/loopwatch.json`` or
  ``$COPILOT_HOME/hooks/loopwatch.json`` (``~/.copilot``);
* OpenCode: a plugin of its own, ``.opencode/plugins/loopwatch.js`` or
  ``$XDG_CONFIG_HOME/opencode/plugins/loopwatch.js`` (``~/.config``);
* Cursor: ``.cursor/hooks.json`` or ``~/.cursor/hooks.json`` (its own format: a
  list of ``{"command": ...}`` per event, no matcher groups).

A project install goes to the root of the git repository the command runs in
(the working directory outside one), and writes a command any teammate can run:
``loopwatch hook AGENT`` found on PATH, and nothing at all (exit 0, no output)
where loopwatch is not installed, so a committed settings file never breaks a
colleague's agent. A user install pins this interpreter instead
(``python -m _loopwatch_entry hook AGENT``), silent too if it goes away.

Idempotent: installing twice changes nothing the second time, and an older
loopwatch command is updated in place. An entry is recognised as loopwatch's by its
command. Uninstall removes exactly those entries, then what they alone made: an
event list, the ``hooks`` object, a settings file and its folder left empty.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import AGENTS

__all__ = [
    "hook_command",
    "install",
    "project_root",
    "settings_path",
    "uninstall",
]


@dataclass(frozen=True)
class _Target:
    """Where and how an agent's hooks are written."""

    project: str  # path under the project root
    user: str  # path under the user's folder for this agent
    user_env: str  # environment variable naming that folder ("" = the home folder)
    # "settings": hooks in matcher groups in a shared JSON file; "flat": handlers listed
    # per event in a shared JSON file (Cursor); "own": a file of loopwatch's
    kind: str
    timeout: int  # per hook call, in the agent's unit
    matcher: str = "*"
    named: bool = False  # Gemini CLI shows a hook's name in its warnings


_TARGETS: dict[str, _Target] = {
    "claude-code": _Target(".claude/settings.json", ".claude/settings.json", "", "settings", 30),
    "codex": _Target(".codex/hooks.json", "hooks.json", "CODEX_HOME", "settings", 30),
    "gemini-cli": _Target(
        ".gemini/settings.json", ".gemini/settings.json", "", "settings", 30_000, ".*", True
    ),
    "qwen-code": _Target(".qwen/settings.json", ".qwen/settings.json", "", "settings", 30_000),
    "copilot-cli": _Target(
        ".github/hooks/loopwatch.json", "hooks/loopwatch.json", "COPILOT_HOME", "own", 30
    ),
    "opencode": _Target(
        ".opencode/plugins/loopwatch.js",
        "opencode/plugins/loopwatch.js",
        "XDG_CONFIG_HOME",
        "own",
        30_000,
    ),
    "cursor": _Target(".cursor/hooks.json", ".cursor/hooks.json", "", "flat", 30),
}
_USER_DEFAULT = {"CODEX_HOME": ".codex", "COPILOT_HOME": ".copilot", "XDG_CONFIG_HOME": ".config"}
# How older and current loopwatch commands name the agent they answer for.
_MARKERS = ("loopwatch hook", "_loopwatch_entry hook", "loopwatch/hooks/_entry.py",
            "loopwatch.hooks")  # fmt: skip


def _check(agent: str) -> _Target:
    target = _TARGETS.get(agent)
    if target is None:
        raise ValueError(f"unknown agent {agent!r}; supported: {', '.join(AGENTS)}")
    return target


def _events(agent: str) -> tuple[tuple[str, bool], ...]:
    """The hook events loopwatch registers for an agent, each with whether it takes a
    tool matcher (the agent's protocol module declares them)."""
    from importlib import import_module

    module = import_module(f"{__package__}.{agent.replace('-', '_')}")
    events: tuple[tuple[str, bool], ...] = getattr(module, "HOOK_EVENTS", ())
    return events


def project_root(start: Path | None = None) -> Path:
    """The root of the git repository holding ``start`` (the working directory), or
    ``start`` itself outside a repository: a project's hooks belong at its root,
    where the agents look for them whatever folder they are started from."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / ".git").exists():
            return folder
    return here


def hook_command(agent: str, scope: str = "project", event: str = "") -> str:
    """The command line the agent runs for each hook event.

    Project: ``loopwatch`` from PATH, or nothing when it is absent (a teammate
    without loopwatch; an agent that treats a failing hook as a deny, like Copilot
    CLI, must not deny every call). User: this interpreter, pinned, silent too if
    it is gone. ``event``: for agents whose payloads do not name their event.
    """
    _check(agent)
    args = f"hook {agent}" + (f" {event}" if event else "")
    if scope == "project":
        return f"command -v loopwatch >/dev/null 2>&1 && exec loopwatch {args} || true"
    python = shlex.quote(sys.executable)
    return f"test -x {python} && exec {python} -m _loopwatch_entry {args} || true"


def settings_path(agent: str, scope: str = "project", root: Path | None = None) -> Path:
    """The file ``install`` edits (or writes) for this agent and scope."""
    target = _check(agent)
    if scope == "project":
        return (root or project_root()) / target.project
    home = Path(os.path.expanduser("~"))
    if target.user_env:
        base = os.environ.get(target.user_env) or str(home / _USER_DEFAULT[target.user_env])
        return Path(base) / target.user
    return home / target.user


def is_ours(command: Any, agent: str) -> bool:
    """Whether a hook command is one of loopwatch's, for this agent."""
    text = str(command or "").replace("\\", "/")
    return any(f"{marker} {agent}" in text for marker in _MARKERS)


def _handler_command(handler: Any) -> str:
    if not isinstance(handler, dict):
        return ""
    return str(handler.get("command") or handler.get("bash") or "")


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


def _write(path: Path, text: str) -> None:
    """Replace the file at once (a reader never sees half of it), keeping its mode: a
    settings file that holds tokens is often private (``~/.claude.json`` is 0600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".loopwatch-tmp")
    tmp.write_text(text, encoding="utf-8", newline="")
    with contextlib.suppress(OSError):
        os.chmod(tmp, path.stat().st_mode & 0o7777)
    os.replace(tmp, path)


def _remove(path: Path) -> None:
    """Delete a file loopwatch alone filled, and its folder if that is left empty."""
    path.unlink()
    with contextlib.suppress(OSError):
        path.parent.rmdir()  # only when empty


def _scope_of(path: Path, agent: str) -> str:
    return "user" if path == settings_path(agent, "user") else "project"


def install(agent: str, path: Path, scope: str | None = None) -> list[str]:
    """Add loopwatch's hooks for ``agent`` to ``path``; the list of changes (empty:
    none). ``scope`` picks the command (default: from the path)."""
    target = _check(agent)
    scope = scope or _scope_of(path, agent)
    if target.kind == "own":
        text = _own_file(agent, scope)
        if path.exists() and path.read_text(encoding="utf-8") == text:
            return []
        changes = ["updated loopwatch's hooks" if path.exists() else "added loopwatch's hooks"]
        _write(path, text)
        return changes
    data = _load(path)
    hooks = data.setdefault("hooks", {})
    if not isinstance(hooks, dict):
        raise ValueError(f"'hooks' in {path} is not an object")
    command = hook_command(agent, scope)
    changes = []
    flat = target.kind == "flat"
    if flat and "version" not in data:
        data = {"version": 1, **data}
    for event, takes_matcher in _events(agent):
        groups = hooks.setdefault(event, [])
        if not isinstance(groups, list):
            raise ValueError(f"'hooks.{event}' in {path} is not a list")
        ours = [h for h in _handlers(groups, flat) if is_ours(_handler_command(h), agent)]
        if ours:
            for h in ours:
                if h.get("command") != command:
                    h["command"] = command
                    changes.append(f"updated the {event} hook's command")
            continue
        handler: dict[str, Any] = {"type": "command", "command": command}
        handler["timeout"] = target.timeout
        if flat:
            groups.append(handler)
            changes.append(f"added the {event} hook")
            continue
        if target.named:
            handler["name"] = "loopwatch"
        group: dict[str, Any] = {"hooks": [handler]}
        if takes_matcher:
            group = {"matcher": target.matcher, **group}
        groups.append(group)
        changes.append(f"added the {event} hook")
    if changes:
        _write(path, json.dumps(data, indent=2) + "\n")
    return changes


def _handlers(groups: list[Any], flat: bool) -> list[Any]:
    """An event's hook handlers: listed directly (``flat``) or in matcher groups."""
    if flat:
        return [h for h in groups if isinstance(h, dict)]
    return [
        h
        for g in groups
        if isinstance(g, dict) and isinstance(g.get("hooks"), list)
        for h in g["hooks"]
    ]


def _own_file(agent: str, scope: str) -> str:
    """The whole content of a file that is loopwatch's alone (Copilot CLI's hook file,
    OpenCode's plugin)."""
    target = _TARGETS[agent]
    if agent == "opencode":
        from importlib.resources import files

        template = files(__package__).joinpath("opencode_plugin.js").read_text(encoding="utf-8")
        return template.replace("__COMMAND__", json.dumps(hook_command(agent, scope)))
    hooks = {
        event: [{"type": "command", "bash": hook_command(agent, scope, event),
                 "timeoutSec": target.timeout}]
        for event, _ in _events(agent)
    }  # fmt: skip
    return json.dumps({"version": 1, "hooks": hooks}, indent=2) + "\n"


def uninstall(agent: str, path: Path) -> list[str]:
    """Remove loopwatch's hooks for ``agent`` from ``path``, leaving everything else."""
    target = _check(agent)
    if not path.exists():
        return []
    if target.kind == "own":
        text = path.read_text(encoding="utf-8", errors="replace")
        if not is_ours(text, agent):
            return []  # a file of the same name that is not loopwatch's
        _remove(path)
        return ["removed loopwatch's hooks"]
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
            if target.kind == "flat":
                if is_ours(_handler_command(group), agent):
                    changes.append(f"removed the {event} hook")
                    continue
            elif isinstance(group, dict) and isinstance(group.get("hooks"), list):
                kept = [h for h in group["hooks"] if not is_ours(_handler_command(h), agent)]
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
    if not changes:
        return []
    if not hooks:
        del data["hooks"]
        if target.kind == "flat" and data.get("version") == 1:
            del data["version"]  # install added it with the hooks, or they need it no more
    if data:
        _write(path, json.dumps(data, indent=2) + "\n")
    else:
        _remove(path)
        changes.append(f"removed {path.name}, left empty")
    return changes
