"""Thin adapters between agent frameworks and one :class:`~loopwatch.Guard`.

Each framework module turns the framework's hooks into FORMAT.md events for the
guard and turns the guard's verdict back into the framework's own way to warn,
skip or stop. This package imports no framework: ``loopwatch.integrations.langchain``,
``.openai_agents`` and ``.deepeval`` import theirs when they are imported, so
``import loopwatch`` works with none of them installed.

The helpers here are shared by the adapters: building the guard from keyword
configuration (or using the one :func:`use_guard` put in force), observing without
letting a loopwatch bug crash the user's agent, and holding the warnings that wait
for the model's next request.
"""

from __future__ import annotations

from ._common import (
    PendingWarnings,
    aobserve_safely,
    content_text,
    current_guard,
    make_guard,
    missing_extra,
    observe_safely,
    use_guard,
)
from .decorator import current_run, watch

__all__ = [
    "PendingWarnings",
    "aobserve_safely",
    "content_text",
    "current_guard",
    "current_run",
    "make_guard",
    "missing_extra",
    "observe_safely",
    "use_guard",
    "watch",
]
