"""Detectors: one module per signal, each a small class with its own thresholds."""

from __future__ import annotations

from .base import Context, Detector, DetectorSet
from .budget import IterationCap
from .chanting import Chanting
from .cycle import Cycle
from .errors import ErrorLoop
from .frequency import Frequency
from .futility import Futility
from .handoff import PingPong
from .progress import NoProgress
from .recursion import Recursion
from .repeat import RepeatedCall
from .semantic import Embedder, Semantic, SemanticUnavailable
from .spend import CostBudget, SpendVelocity, TimeBudget, TokenBudget
from .stagnation import Stagnation

__all__ = [
    "Chanting",
    "Context",
    "CostBudget",
    "Cycle",
    "Detector",
    "DetectorSet",
    "Embedder",
    "ErrorLoop",
    "Frequency",
    "Futility",
    "IterationCap",
    "NoProgress",
    "PingPong",
    "Recursion",
    "RepeatedCall",
    "Semantic",
    "SemanticUnavailable",
    "SpendVelocity",
    "Stagnation",
    "TimeBudget",
    "TokenBudget",
    "default_detectors",
]


def default_detectors() -> DetectorSet:
    """The default set: every detector with its measured default thresholds.

    Frequency, the name-level cycle, the semantic layer and the hard budgets are
    left out (see their docstrings); this is what ``Config().detectors()`` builds.
    """
    from ..config import Config

    return Config().detectors()
