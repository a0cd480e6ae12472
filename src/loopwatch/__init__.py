"""loopwatch: catch LLM agents stuck in loops, at run time and in recorded traces.

The public API::

    from loopwatch import Guard, scan

    guard = Guard()
    verdict = guard.observe("run-1", {"kind": "tool_call", "name": "search", "args": {"q": "x"}})

    report = scan({"run_id": "r1", "events": [...]})
"""

from __future__ import annotations

from . import _build  # first: LOOPWATCH_PURE=1 must act before any hot module loads
from .config import Config, ConfigError
from .detectors import (
    Chanting,
    CostBudget,
    Cycle,
    Detector,
    DetectorSet,
    Embedder,
    ErrorLoop,
    Frequency,
    Futility,
    IterationCap,
    NameCycle,
    NoEffect,
    NoProgress,
    PingPong,
    Recursion,
    RepeatedCall,
    RepeatedInstruction,
    RestatedReply,
    RevisitedPage,
    Semantic,
    SpendVelocity,
    Stagnation,
    TimeBudget,
    TokenBudget,
    WaitBudget,
    default_detectors,
)
from .errors import LoopDetected, StoreUnavailable
from .events import Event
from .findings import Action, Finding, Severity, Verdict
from .guard import Guard
from .integrations.decorator import current_run, watch
from .scan import Report, Scanner, scan
from .stores import MemoryStore, Store
from .traces import InputError, TraceRun, read_runs

__version__ = "0.1.0"
# True when the hot path runs compiled (mypyc), False on the pure-Python build
# (no compiler at install time, or LOOPWATCH_PURE=1); the results are the same.
compiled: bool = _build.compiled()

__all__ = [
    "Action",
    "Chanting",
    "Config",
    "ConfigError",
    "CostBudget",
    "Cycle",
    "Detector",
    "DetectorSet",
    "Embedder",
    "ErrorLoop",
    "Event",
    "Finding",
    "Frequency",
    "Futility",
    "Guard",
    "InputError",
    "IterationCap",
    "LoopDetected",
    "MemoryStore",
    "NameCycle",
    "NoEffect",
    "NoProgress",
    "PingPong",
    "Recursion",
    "RepeatedCall",
    "RepeatedInstruction",
    "Report",
    "RestatedReply",
    "RevisitedPage",
    "Scanner",
    "Semantic",
    "Severity",
    "SpendVelocity",
    "Stagnation",
    "Store",
    "StoreUnavailable",
    "TimeBudget",
    "TokenBudget",
    "TraceRun",
    "Verdict",
    "WaitBudget",
    "__version__",
    "current_run",
    "default_detectors",
    "read_runs",
    "scan",
    "watch",
]
