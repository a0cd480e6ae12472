"""The ``loopwatch`` command: ``loopwatch hook AGENT`` fast, everything else through
:mod:`loopwatch.cli`.

Why a top-level module: a console script imports its module's package first, and
``loopwatch``'s ``__init__`` imports the whole public API (trace readers, the scan,
the integrations): for a hook, run once per tool call by a coding agent, that is
most of its time. Here ``loopwatch hook`` asks the hook daemon first (:mod:`_loopwatch_hook`,
the client, imports nothing); when the daemon does not take the call, it registers
the ``loopwatch`` package without running its ``__init__`` and imports only the
guard's modules; nothing on the guard's import path reads names from the package
itself (only from its modules), and a test pins that. ``python -m _loopwatch_entry
hook AGENT`` does the same with a chosen interpreter (what ``loopwatch install
--user`` writes).
"""

from __future__ import annotations

import sys

from _loopwatch_hook import AGENTS, bare_package, daemon_wanted

__all__ = ["bare_package", "main"]


def main(argv: list[str] | None = None, exit_now: bool | None = None) -> int:
    """``exit_now`` (default: when reading ``sys.argv``, i.e. run as a command): a hook
    ends its process as soon as its answer is written, and asks the daemon first."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"]:
        now = argv is None if exit_now is None else exit_now
        raw = None
        if (
            now
            and 2 <= len(args) <= 3
            and args[1] in AGENTS
            and "-h" not in args
            and "--help" not in args
            and daemon_wanted()
        ):
            from _loopwatch_hook import via_daemon

            raw = via_daemon(args)  # returns only if the call is to be answered here
        bare_package()
        from loopwatch.hooks._dispatch import main as hook

        return hook(args[1:], exit_now=now, raw=raw)
    from loopwatch.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
