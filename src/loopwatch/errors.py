"""The exceptions loopwatch raises.

They live apart from :mod:`loopwatch.findings` because that module is compiled and
these must stay plain Python classes in every build: users catch them and subclass
them, with other bases too (an integration's stop that is also its framework's abort,
``class LoopStopped(LoopDetected, HookAborted)``). A method of a class in a
mypyc-compiled module refuses a subclass's instance as ``self``, even with
``native_class=False``; a class defined here has no such method.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .findings import Verdict

__all__ = ["LoopDetected", "StoreUnavailable"]


class LoopDetected(RuntimeError):
    """Raised by integrations when the guard says stop; carries the verdict."""

    def __init__(self, verdict: Verdict) -> None:
        self.verdict = verdict
        super().__init__(verdict.message or "loop detected")


class StoreUnavailable(RuntimeError):
    """The guard's state store could not be reached and ``on_store_error="raise"``."""
