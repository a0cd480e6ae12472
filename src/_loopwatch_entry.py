"""The ``loopwatch`` command: ``loopwatch hook AGENT`` fast, everything else through
:mod:`loopwatch.cli`.

Why a top-level module: a console script imports its module's package first, and
``loopwatch``'s ``__init__`` imports the whole public API (trace readers, the scan,
the integrations): for a hook, run once per tool call by a coding agent, that is
most of its time. Here ``loopwatch hook`` registers the ``loopwatch`` package without
running its ``__init__`` and imports only the guard's modules; nothing on the
guard's import path reads names from the package itself (only from its modules),
and a test pins that. ``python -m _loopwatch_entry hook AGENT`` does the same with
a chosen interpreter (what ``loopwatch install --user`` writes).
"""

from __future__ import annotations

import sys
import types
from importlib.machinery import ModuleSpec

__all__ = ["bare_package", "main"]


def bare_package() -> None:
    """Make ``loopwatch`` importable as a package whose ``__init__`` has not run."""
    if "loopwatch" in sys.modules:
        return
    spec = _find_spec("loopwatch")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("loopwatch is not installed")
    package = types.ModuleType("loopwatch", "loopwatch (bare: loaded for a hook call)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = "loopwatch"
    package.__spec__ = spec
    sys.modules["loopwatch"] = package


def _find_spec(name: str) -> ModuleSpec | None:
    """``importlib.util.find_spec`` for a top-level name, without importing
    ``importlib.util`` (and contextlib with it: 2 ms of a hook call): ask the import
    system's finders in order, as the import statement would."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, None) if find is not None else None
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def main(argv: list[str] | None = None, exit_now: bool | None = None) -> int:
    """``exit_now`` (default: when reading ``sys.argv``, i.e. run as a command): a hook
    ends its process as soon as its answer is written."""
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["hook"]:
        bare_package()
        from loopwatch.hooks._dispatch import main as hook

        return hook(args[1:], exit_now=argv is None if exit_now is None else exit_now)
    from loopwatch.cli import main as cli

    return cli(args)


if __name__ == "__main__":
    sys.exit(main())
