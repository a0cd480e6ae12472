"""The hook command older installs wrote: ``python /path/to/loopwatch/hooks/_entry.py
AGENT``. Kept so that those settings keep working: it runs ``loopwatch hook AGENT``
the fast way (:mod:`_loopwatch_entry`); ``loopwatch install`` rewrites them to the
current command.
"""

from __future__ import annotations

import sys
from pathlib import Path

if __name__ == "__main__":
    if sys.path and Path(sys.path[0]).resolve() == Path(__file__).resolve().parent:
        del sys.path[0]  # the script's folder: its modules are not top-level modules
    from _loopwatch_entry import main

    sys.exit(main(["hook", *sys.argv[1:]], exit_now=True))
