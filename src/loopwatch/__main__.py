"""``python -m loopwatch``: the same as the ``loopwatch`` command."""

import sys

from .cli import main

sys.exit(main())
