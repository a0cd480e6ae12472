"""Build: compile the hot path with mypyc where possible, else install pure Python.

Everything else is declared in pyproject.toml. The modules compiled are listed once,
in ``src/loopwatch/_build.py`` (``COMPILED``), and read from there. The compiled and
pure builds come from the same sources and give the same results.

* ``LOOPWATCH_PURE=1`` skips compilation (a pure-Python install);
* no mypyc, no working C compiler, or a failed compilation: a warning, and the
  pure-Python install goes on (the package never fails to install for lack of a
  compiler);
* ``LOOPWATCH_REQUIRE_COMPILED=1`` turns that fallback into an error (wheel builds).
"""

from __future__ import annotations

import ast
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

HERE = Path(__file__).resolve().parent


def _flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")


def compiled_modules() -> list[str]:
    """``COMPILED`` from src/loopwatch/_build.py, without importing the package."""
    tree = ast.parse((HERE / "src" / "loopwatch" / "_build.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", "") == "COMPILED":
            value: Any = ast.literal_eval(node.value)
            return list(value)
    raise RuntimeError("COMPILED not found in src/loopwatch/_build.py")


def _warn(message: str) -> None:
    if _flag("LOOPWATCH_REQUIRE_COMPILED"):
        raise SystemExit(f"loopwatch: {message} (LOOPWATCH_REQUIRE_COMPILED is set)")
    print(f"loopwatch: {message}; installing the pure-Python build", file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that falls back to pure Python when the compilation fails, leaving
    no half-built extension behind (a shim without its shared library would fail
    to import)."""

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler, missing headers...
            _warn(f"compiling the core failed ({type(exc).__name__}: {exc})")
            self._remove_outputs()
            self.extensions = []

    def _remove_outputs(self) -> None:
        # An in-place (editable) build must not leave an older compiled module
        # beside the source it would shadow; a wheel build leaves the tree alone.
        bases = [self.build_lib]
        if self.inplace or getattr(self, "editable_mode", False):
            bases.append(str(HERE / "src"))
        for ext in self.extensions:
            for base in bases:
                path = Path(base) / self.get_ext_filename(ext.name)
                if path.exists():
                    path.unlink()

    def get_outputs(self) -> list[str]:
        return super().get_outputs() if self.extensions else []


def ext_modules() -> list[Any]:
    if _flag("LOOPWATCH_PURE"):
        print("loopwatch: LOOPWATCH_PURE is set; installing the pure-Python build", file=sys.stderr)
        return []
    try:
        from mypyc.build import mypycify
    except ImportError:
        _warn("mypyc is not available")
        return []
    paths = [
        str(Path("src", *module.split(".")).with_suffix(".py")) for module in compiled_modules()
    ]
    try:
        return list(mypycify(paths, opt_level="3", debug_level="0", group_name="loopwatch"))
    except BaseException as exc:  # mypyc reports type errors with SystemExit
        _warn(f"mypyc could not compile the core ({type(exc).__name__}: {exc})")
        return []


setup(ext_modules=ext_modules(), cmdclass={"build_ext": OptionalBuildExt})
