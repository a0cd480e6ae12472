"""``python -m loopwatch.hooks AGENT``: the hook command `loopwatch install` writes."""

from __future__ import annotations

import sys

from ._dispatch import main

sys.exit(main(exit_now=True))
