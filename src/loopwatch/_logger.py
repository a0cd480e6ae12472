"""The ``loopwatch`` logger, imported on first use.

``logging`` (and what it imports: traceback, textwrap, string) is about a tenth of a
coding-agent hook's time, and a hook runs in a fresh process for every tool call,
where nothing is logged unless something goes wrong. So the modules on the guard's
path log through this stand-in: its first use imports ``logging`` and hands over to
``logging.getLogger("loopwatch")`` (handlers, levels and ``caplog`` work as on the
real logger, which it is).
"""

from __future__ import annotations

import sys
from typing import Any, Final

__all__ = ["WARNING", "log", "quiet"]

WARNING: Final = 30  # logging.WARNING, without importing logging
_quiet: list[bool] = [False]


def _real() -> Any:
    import logging

    logger = logging.getLogger("loopwatch")
    if _quiet[0] and not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
        logger.addHandler(logging.NullHandler())
    return logger


class _Logger:
    """``logging.getLogger("loopwatch")``, looked up when first used."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        return getattr(_real(), name)


log: Any = _Logger()


def quiet() -> None:
    """Nothing on stderr from logging's last-resort handler (a hook's stderr is the
    agent's; its own failures go to hook.log): a NullHandler on the logger, added
    now if ``logging`` is loaded, else when it first is."""
    _quiet[0] = True
    if "logging" in sys.modules:
        _real()
