"""``loopwatch doctor``: is this project protected, and if not, why.

For each coding agent: whether loopwatch's hooks are installed for this project
(at the root of its git repository) and for the user, the command they run and
whether it runs (it is run, with a payload that asks it which loopwatch answered:
a command that finds no loopwatch answers nothing); for each MCP client, which of
its MCP servers run behind ``loopwatch mcp`` (``loopwatch install mcp``) and which do
not; then the configuration the hooks load from here (a key it refuses is named),
the state store, the hook daemon (running or not, its pid, version and socket), and
the last hook calls and errors the hooks logged.

Exit status: 0 when nothing is broken, 2 when something is (an invalid
configuration, an unreadable settings file, an installed command that does not
run loopwatch, an install missing events, a wrapped MCP server whose loopwatch
cannot be found: the client could not start it), so a script or CI job can check it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from . import AGENTS
from ._log import CALLS, FAILURES, parse_call, state_dir, tail
from .install import (
    _TARGETS,
    _events,
    _handler_command,
    _handlers,
    _load,
    is_ours,
    project_root,
)
from .install import settings_path as _settings_path
from .mcp_install import CLIENTS, config_path, runs, servers

__all__ = ["check_command", "run"]

_PLUGIN_COMMAND = re.compile(r"^const COMMAND = (\".*\");$", re.MULTILINE)


@dataclass
class Install:
    """One agent's hooks in one scope."""

    agent: str
    scope: str
    path: str
    installed: bool = False
    commands: list[str] = field(default_factory=list)
    missing_events: list[str] = field(default_factory=list)
    runs: str = ""  # what the command answered ("loopwatch 0.1.0 (python)") or why not
    ok: bool = True


def check_command(command: str, agent: str) -> tuple[bool, str]:
    """Run an installed hook command with the doctor's payload: does loopwatch answer?"""
    payload = json.dumps({"loopwatch_doctor": True}).encode()
    try:
        proc = subprocess.run(
            ["/bin/sh", "-c", command], input=payload, capture_output=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"does not run: {exc}"
    out = proc.stdout.decode("utf-8", "replace").strip()
    try:
        reply = json.loads(out.splitlines()[-1]) if out else None
    except ValueError:
        reply = None
    if not isinstance(reply, dict) or "loopwatch" not in reply:
        err = proc.stderr.decode("utf-8", "replace").strip()[:300]
        why = f"exit {proc.returncode}" + (f", {err}" if err else ", no output")
        return False, f"no loopwatch answers this command ({why}): every call is let through"
    if reply.get("agent") not in (agent, None):
        return False, f"it answers as {reply.get('agent')}, not {agent}"
    return True, f"loopwatch {reply['loopwatch']} ({reply.get('python')})"


def _ours(data: Any, agent: str, flat: bool) -> tuple[list[str], list[str]]:
    """loopwatch's hook commands in a hooks file, and the events it should hook that
    have none of them (``flat``: handlers listed per event, else in matcher groups)."""
    hooks = data.get("hooks") if isinstance(data, dict) else None
    hooks = hooks if isinstance(hooks, dict) else {}
    present = {
        event: [
            _handler_command(h)
            for h in _handlers(groups, flat)
            if is_ours(_handler_command(h), agent)
        ]
        for event, groups in hooks.items()
        if isinstance(groups, list)
    }
    commands = [c for cs in present.values() for c in cs]
    return commands, [e for e, _ in _events(agent) if not present.get(e)]


def _inspect(agent: str, scope: str, path: Path) -> Install:
    found = Install(agent, scope, str(path))
    if not path.exists():
        return found
    target = _TARGETS[agent]
    try:
        if target.kind == "own":
            text = path.read_text(encoding="utf-8", errors="replace")
            if agent == "opencode":
                match = _PLUGIN_COMMAND.search(text)
                commands = [json.loads(match.group(1))] if match else []
                wanted: list[str] = []
            else:
                commands, wanted = _ours(json.loads(text), agent, flat=True)
        else:
            commands, wanted = _ours(_load(path), agent, flat=target.kind == "flat")
    except (OSError, ValueError) as exc:
        found.installed, found.ok, found.runs = True, False, f"unreadable: {exc}"
        return found
    if not commands:
        return found
    found.installed = True
    found.commands = sorted(set(commands))
    found.missing_events = wanted
    ok, runs = check_command(found.commands[0], agent)
    found.ok = ok and not wanted
    found.runs = runs
    return found


@dataclass
class McpClient:
    """One MCP client's servers in one scope."""

    client: str
    scope: str
    path: str
    wrapped: list[str] = field(default_factory=list)
    not_wrapped: list[str] = field(default_factory=list)  # could be: stdio or HTTP
    left: list[str] = field(default_factory=list)  # cannot be: SSE, other transports
    launcher: str = ""  # what the wrapped servers run
    problem: str = ""
    ok: bool = True


def _inspect_mcp(client: str, scope: str, path: Path) -> McpClient:
    found = McpClient(client, scope, str(path))
    try:
        configured = servers(client, path)
    except (OSError, ValueError) as exc:
        found.ok, found.problem = False, f"unreadable: {exc}"
        return found
    for server in configured:
        if server.wrapped:
            found.wrapped.append(server.name)
            found.launcher = " ".join(server.command)
            if not runs(server.command):
                found.ok = False
                found.problem = (f"{server.command[0]} is not found: the client cannot "
                                 f"start {server.name!r}")  # fmt: skip
        elif server.transport in ("stdio", "http"):
            found.not_wrapped.append(server.name)
        else:
            found.left.append(f"{server.name} ({server.transport})")
    return found


def _mcp_clients(root: Path) -> list[McpClient]:
    found = []
    for client in CLIENTS:
        for scope in ("project", "user"):
            try:
                path = config_path(client, scope, root)
            except ValueError:  # no project settings (Claude Desktop)
                continue
            found.append(_inspect_mcp(client, scope, path))
    return found


def _config(root: Path) -> dict[str, Any]:
    from ..config import Config, ConfigError, find_config_file

    where = find_config_file(root)
    try:
        config = Config.load(start=root)
    except ConfigError as exc:
        return {"file": str(where) if where else None, "ok": False, "error": str(exc)}
    return {"file": config.source, "ok": True, "on_loop": config.on_loop, "store": config.store}


def _store(config: dict[str, Any]) -> dict[str, Any]:
    from ..stores import store_from_url
    from ._dispatch import _store_url

    class _Configured:
        store = config.get("store", "")

    url = _store_url(_Configured if config.get("ok") else None)
    try:
        store = store_from_url(url)
        try:
            sessions = len(store)
        finally:
            store.close()
    except Exception as exc:
        return {"url": url, "ok": False, "error": f"{type(exc).__name__}: {exc}"}
    return {"url": url, "ok": True, "sessions": sessions}


def report(calls: int = 5) -> dict[str, Any]:
    """Everything ``loopwatch doctor`` shows, as data."""
    root = project_root()
    agents = [
        _inspect(agent, scope, _settings_path(agent, scope, root))
        for agent in AGENTS
        for scope in ("project", "user")
    ]
    mcp = _mcp_clients(root)
    config = _config(root)
    store = _store(config)
    from .daemon import status

    daemon = status()
    last = [c for c in (parse_call(line) for line in tail(CALLS, calls)) if c is not None]
    errors = tail(FAILURES, calls)
    ok = config["ok"] and store["ok"] and all(a.ok for a in agents) and all(m.ok for m in mcp)
    return {
        "ok": ok,
        "project": str(root),
        "agents": [asdict(a) for a in agents],
        "mcp": [asdict(m) for m in mcp],
        "config": config,
        "store": store,
        "daemon": daemon,
        "logs": str(state_dir()),
        "calls": last,
        "errors": errors,
    }


def run(as_json: bool = False, calls: int = 5) -> int:
    data = report(calls)
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        print(_text(data))
    return 0 if data["ok"] else 2


def _daemon_line(daemon: dict[str, Any]) -> str:
    """The hook daemon: off, running (pid, version) or started by the next call."""
    if not daemon["enabled"]:
        return "hook daemon: off (LOOPWATCH_HOOK_DAEMON=0, or no unix sockets): calls in-process"
    if daemon["running"]:
        return (f"hook daemon: running, pid {daemon['pid']}, loopwatch {daemon['version']}, "
                f"{daemon['socket']}")  # fmt: skip
    return f"hook daemon: not running (the next hook call starts it), {daemon['socket']}"


def _text(data: dict[str, Any]) -> str:
    lines = [f"project: {data['project']}", "", "hooks:"]
    for a in data["agents"]:
        head = f"  {a['agent']:<12} {a['scope']:<8}"
        if not a["installed"]:
            lines.append(f"{head} not installed ({a['path']})")
            continue
        mark = "ok" if a["ok"] else "BROKEN"
        lines.append(f"{head} {mark}: {a['path']}")
        for command in a["commands"]:
            lines.append(f"{'':24}command: {command}")
        lines.append(f"{'':24}runs: {a['runs']}")
        if a["missing_events"]:
            events = ", ".join(a["missing_events"])
            lines.append(f"{'':24}missing events: {events} (run `loopwatch install {a['agent']}`)")
    lines += ["", "MCP servers (loopwatch install mcp CLIENT):"]
    for m in data["mcp"]:
        head = f"  {m['client']:<14} {m['scope']:<8}"
        if not m["ok"]:
            lines.append(f"{head} BROKEN: {m['path']}: {m['problem']}")
            continue
        if not (m["wrapped"] or m["not_wrapped"] or m["left"]):
            lines.append(f"{head} none ({m['path']})")
            continue
        lines.append(f"{head} {m['path']}")
        if m["wrapped"]:
            lines.append(f"{'':26}behind loopwatch: {', '.join(m['wrapped'])} ({m['launcher']})")
        if m["not_wrapped"]:
            lines.append(f"{'':26}not watched: {', '.join(m['not_wrapped'])} "
                         f"(run `loopwatch install mcp {m['client']}`)")  # fmt: skip
        if m["left"]:
            lines.append(f"{'':26}not supported: {', '.join(m['left'])}")
    config = data["config"]
    lines.append("")
    if config["ok"]:
        source = config["file"] or "none found: the defaults"
        lines.append(f"configuration: {source} (on_loop = {config['on_loop']})")
    else:
        lines.append(f"configuration: BROKEN, every call is let through: {config['error']}")
    store = data["store"]
    if store["ok"]:
        lines.append(f"store: {store['url']} ({store['sessions']} sessions)")
    else:
        lines.append(f"store: BROKEN: {store['url']}: {store['error']}")
    lines.append(_daemon_line(data["daemon"]))
    lines += ["", f"last hook calls ({os.path.join(data['logs'], CALLS)}):"]
    lines += [
        f"  {c.get('at')} {c.get('agent')} {c.get('event')} {c.get('session')}: "
        f"{c.get('answer')} ({c.get('ms')} ms{', daemon' if c.get('via') == 'daemon' else ''})"
        for c in data["calls"]
    ] or ["  none"]
    lines += ["", f"last errors ({os.path.join(data['logs'], FAILURES)}):"]
    lines += [f"  {e}" for e in data["errors"]] or ["  none"]
    return "\n".join(lines)
