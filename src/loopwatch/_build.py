"""Which build of the hot path is loaded: compiled (mypyc) or pure Python.

The modules in :data:`COMPILED` are plain, mypy-strict Python. ``pip install``
compiles them with mypyc where it can (setup.py) and installs them as they are
where it cannot; the two builds give the same findings, verdicts, scores and
serialised state (tests/core/test_build.py feeds both the same streams).

``LOOPWATCH_PURE=1`` in the environment loads the pure-Python modules even when
compiled ones are installed (the test suite runs its core tests both ways; it is
also a way to rule the compiled core out when debugging). It must be set before
``loopwatch`` is first imported.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

__all__ = ["COMPILED", "compiled", "describe", "force_pure", "pure_requested"]

# The hot path: event intake and fingerprints, run state, the engine, the policy and
# the default detectors' per-event update, the scan's per-event loop (replay). setup.py
# compiles exactly these.
COMPILED: tuple[str, ...] = (
    "loopwatch.fingerprints",
    "loopwatch.events",
    "loopwatch.redact",
    "loopwatch.text",
    "loopwatch.state",
    "loopwatch.engine",
    "loopwatch.findings",
    "loopwatch.policy",
    "loopwatch.stores.base",
    "loopwatch.stores.memory",
    "loopwatch.guard",
    "loopwatch.replay",
    "loopwatch.detectors.base",
    "loopwatch.detectors.budget",
    "loopwatch.detectors.conversation",
    "loopwatch.detectors.chanting",
    "loopwatch.detectors.cycle",
    "loopwatch.detectors.errors",
    "loopwatch.detectors.futility",
    "loopwatch.detectors.handoff",
    "loopwatch.detectors.instruction",
    "loopwatch.detectors.narration",
    "loopwatch.detectors.progress",
    "loopwatch.detectors.recursion",
    "loopwatch.detectors.repeat",
    "loopwatch.detectors.revisit",
    "loopwatch.detectors.spend",
    "loopwatch.detectors.stagnation",
    "loopwatch.detectors.wait",
)

_PACKAGE = Path(__file__).resolve().parent


def source_path(module: str) -> Path:
    """The ``.py`` file of a module in :data:`COMPILED`."""
    return _PACKAGE.joinpath(*module.split(".")[1:]).with_suffix(".py")


def pure_requested() -> bool:
    """Whether ``LOOPWATCH_PURE`` asks for the pure-Python build."""
    return os.environ.get("LOOPWATCH_PURE", "").strip().lower() not in ("", "0", "false", "no")


class _PureFinder(importlib.abc.MetaPathFinder):
    """Finds the modules of :data:`COMPILED` as their ``.py`` sources, so that an
    extension module beside a source never loads."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in COMPILED:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname))


def force_pure() -> None:
    """Load the pure-Python modules from now on (before any of them is imported)."""
    loaded = [m for m in COMPILED if m in sys.modules]
    if loaded:
        raise RuntimeError(f"force_pure() after {loaded[0]} was imported")
    if not any(isinstance(f, _PureFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _PureFinder())


def _is_extension(module: str) -> bool:
    mod = sys.modules.get(module)
    origin = getattr(mod, "__file__", None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def compiled() -> bool:
    """True when every hot-path module is the compiled one (call it after importing
    ``loopwatch``); False for the pure-Python build."""
    for module in COMPILED:
        if module not in sys.modules:
            importlib.import_module(module)
    return all(_is_extension(m) for m in COMPILED)


def describe() -> str:
    """One line for ``loopwatch --version``: which build is loaded."""
    if compiled():
        return "compiled core (mypyc)"
    if pure_requested():
        return "pure Python (LOOPWATCH_PURE is set)"
    return "pure Python"


if pure_requested():  # imported first by loopwatch/__init__.py, before any hot module
    force_pure()
