"""The fast hook command: ``python /path/to/loopwatch/hooks/_entry.py AGENT``.

Why a script and not ``python -m loopwatch.hooks``: ``-m`` first runs the package's
``__init__``, which imports the whole public API (trace readers, the scan, the
integrations: about a quarter of a hook call's time). A hook needs only the guard's
modules, so this script registers the ``loopwatch`` package without running its
``__init__`` and imports just those. Nothing on the guard's import path reads names
from the package itself (only from its modules), and a test pins that.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path


def _bare_package() -> None:
    """Make ``loopwatch`` importable as a package whose ``__init__`` has not run."""
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # the script's folder: its modules are not top-level modules
    if "loopwatch" in sys.modules:
        return
    root = Path(__file__).resolve().parent.parent
    package = types.ModuleType("loopwatch", "loopwatch (bare: loaded by the hook entry)")
    package.__path__ = [str(root)]
    package.__file__ = str(root / "__init__.py")
    package.__package__ = "loopwatch"
    sys.modules["loopwatch"] = package


if __name__ == "__main__":
    _bare_package()
    from loopwatch.hooks._dispatch import main

    sys.exit(main(exit_now=True))
