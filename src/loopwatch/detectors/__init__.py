"""Detectors: one module per signal, each a small class with its own thresholds."""

from __future__ import annotations

from .base import Context, Detector, DetectorSet
from .budget import IterationCap
from .chanting import Chanting
from .cycle import Cycle
from .errors import ErrorLoop
from .frequency import Frequency
from .progress import NoProgress
from .recursion import Recursion
from .repeat import RepeatedCall
from .stagnation import Stagnation

__all__ = [
    "Chanting",
    "Context",
    "Cycle",
    "Detector",
    "DetectorSet",
    "ErrorLoop",
    "Frequency",
    "IterationCap",
    "NoProgress",
    "Recursion",
    "RepeatedCall",
    "Stagnation",
    "default_detectors",
]


def default_detectors() -> DetectorSet:
    """The default set: every detector with its measured default thresholds.

    Frequency and the name-level cycle are left out (see their docstrings).
    """
    return (
        RepeatedCall()
        | Cycle()
        | ErrorLoop()
        | NoProgress()
        | Stagnation()
        | Chanting()
        | Recursion()
        | IterationCap()
    )
