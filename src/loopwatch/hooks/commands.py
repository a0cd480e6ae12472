"""The coding-agent subcommands of the ``loopwatch`` command: ``hook``, ``install``,
``uninstall`` and ``doctor`` (:func:`add_parsers`, called by :mod:`loopwatch.cli`).

A module of its own because the doctor imports the installer (it reads what
:mod:`.install` writes) and these commands call both: kept in the installer, they
made each of the two import the other. ``hook`` imports its dispatcher when it runs
only, as before: the other subcommands never load the guard.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from . import AGENTS, doctor
from .install import hook_command, install, settings_path, uninstall
from .mcp_install import CLIENTS

__all__ = ["add_parsers"]

_NOTES = {
    "codex": "Codex runs hooks only with `hooks = true` under [features] in its config.toml, "
    "and a project's hooks only in a trusted project.",
    "gemini-cli": "Gemini CLI runs a project's hooks only in a trusted folder.",
    "copilot-cli": "Copilot CLI loads a repository's hooks only in a trusted folder "
    "(--trust-folder, or when it asks).",
}


def add_parsers(sub: Any) -> None:
    """The ``hook``, ``install``, ``uninstall`` and ``doctor`` subcommands."""
    p_hook = sub.add_parser("hook", help="answer one coding-agent hook call (payload on stdin)")
    p_hook.add_argument("agent", choices=AGENTS)
    p_hook.add_argument("event", nargs="?", default="", help=argparse.SUPPRESS)
    p_hook.set_defaults(func=_cmd_hook, config_free=True)
    for name, helptext in (
        ("install", "add loopwatch's hooks to a coding agent's settings "
                    "(`install mcp CLIENT`: put a client's MCP servers behind loopwatch)"),
        ("uninstall", "remove loopwatch's hooks from a coding agent's settings "
                      "(`uninstall mcp CLIENT`: restore a client's MCP servers)"),
    ):  # fmt: skip
        p = sub.add_parser(name, help=helptext, description=helptext)
        p.add_argument("agent", choices=(*AGENTS, "mcp"))
        p.add_argument(
            "client", nargs="?", metavar="CLIENT",
            help=f"after mcp: the MCP client ({', '.join(CLIENTS)})",
        )  # fmt: skip
        scope = p.add_mutually_exclusive_group()
        scope.add_argument(
            "--project", dest="scope", action="store_const", const="project",
            help="this project's settings, at the root of its git repository (the default)",
        )  # fmt: skip
        scope.add_argument(
            "--user", dest="scope", action="store_const", const="user",
            help="your user settings (every project)",
        )  # fmt: skip
        p.set_defaults(
            func=_cmd_install if name == "install" else _cmd_uninstall, scope=None,
            config_free=True,
        )  # fmt: skip
    p_mcp = sub.add_parser(
        "mcp",
        help="run an MCP server behind loopwatch (stdio), or reach one at --url",
        description="Run an MCP server behind loopwatch: `loopwatch mcp -- COMMAND [ARGS]` "
        "(stdio) or `loopwatch mcp --url URL` (streamable HTTP). The client talks to "
        "this command over stdio as it would to the server; every tools/call goes "
        "through the guard.",
    )
    p_mcp.add_argument("--url", help="the server's streamable-HTTP endpoint")
    p_mcp.add_argument(
        "--header", action="append", default=[], metavar="'NAME: VALUE'",
        help="an HTTP header for every request to --url (repeatable)",
    )  # fmt: skip
    p_mcp.add_argument("--run-id", help="the run's id (default: a new one per session)")
    p_mcp.add_argument("--config", metavar="FILE", help="a loopwatch.toml or pyproject.toml")
    p_mcp.add_argument("server", nargs=argparse.REMAINDER, metavar="-- COMMAND [ARGS]",
                       help="the server's command line, after --")  # fmt: skip
    p_mcp.set_defaults(func=_cmd_mcp, config_free=True)
    p_doc = sub.add_parser(
        "doctor", help="show whether the coding-agent hooks are installed and working"
    )
    p_doc.add_argument("--json", action="store_true", help="one JSON object")
    p_doc.add_argument("--calls", type=int, default=5, metavar="N", help="last hook calls shown")
    p_doc.set_defaults(func=_cmd_doctor, config_free=True)


def _cmd_hook(args: argparse.Namespace, config: Any) -> int:
    from ._dispatch import main

    return main([args.agent, *([args.event] if args.event else [])])


def _cmd_mcp(args: argparse.Namespace, config: Any) -> int:
    try:
        from ..integrations.mcp import main
    except ModuleNotFoundError as exc:  # the mcp extra is not installed: say which
        print(f"loopwatch mcp: {exc}", file=sys.stderr)
        return 2
    server = list(args.server)
    if server[:1] == ["--"]:
        server = server[1:]
    return main(server, args.url, args.header, args.run_id, args.config)


def _cmd_doctor(args: argparse.Namespace, config: Any) -> int:
    return doctor.run(as_json=args.json, calls=args.calls)


def _cmd_install(args: argparse.Namespace, config: Any) -> int:
    return _edit(args, install)


def _cmd_uninstall(args: argparse.Namespace, config: Any) -> int:
    return _edit(args, uninstall)


def _edit(args: argparse.Namespace, action: Any) -> int:
    if args.agent == "mcp" or args.client is not None:
        return _edit_mcp(args, action is install)
    scope = args.scope or "project"
    path = settings_path(args.agent, scope)
    try:
        changes = action(args.agent, path, scope) if action is install else action(args.agent, path)
    except (OSError, ValueError) as exc:
        print(f"loopwatch {args.command}: {path}: {exc}", file=sys.stderr)
        return 2
    if not changes:
        print(f"{path}: nothing to change")
        return 0
    for change in changes:
        print(f"{path}: {change}")
    if action is install:
        print(f"hook command: {hook_command(args.agent, scope)}")
        if args.agent in _NOTES:
            print(_NOTES[args.agent])
    return 0


def _edit_mcp(args: argparse.Namespace, installing: bool) -> int:
    """``install | uninstall mcp CLIENT``: wrap a client's MCP servers, or restore them."""
    from . import mcp_install

    if args.agent != "mcp":
        print(f"loopwatch {args.command}: {args.agent} takes no client (did you mean "
              f"`loopwatch {args.command} mcp {args.client}`?)", file=sys.stderr)  # fmt: skip
        return 2
    if args.client not in CLIENTS:
        what = f"unknown MCP client {args.client!r}" if args.client else "no MCP client named"
        print(f"loopwatch {args.command} mcp: {what}; supported: {', '.join(CLIENTS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        path = mcp_install.config_path(args.client, args.scope)
        scope = args.scope or mcp_install.default_scope(args.client)
        if installing:
            changes = mcp_install.install(args.client, path, scope)
        else:
            changes = mcp_install.uninstall(args.client, path)
    except (OSError, ValueError) as exc:
        print(f"loopwatch {args.command} mcp: {exc}", file=sys.stderr)
        return 2
    if not path.exists():
        print(f"{path}: no such file: {args.client} has no MCP servers configured there")
        return 0
    if not changes:
        print(f"{path}: nothing to change")
        return 0
    for change in changes:
        print(f"{path}: {change}")
    if installing and any(c.startswith("wrapped") for c in changes):
        print(f"restart {args.client} (or reconnect its MCP servers) to start them behind "
              "loopwatch")  # fmt: skip
    return 0
