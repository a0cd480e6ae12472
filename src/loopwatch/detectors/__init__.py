"""Detectors: one module per signal, each a small class with its own thresholds."""

from __future__ import annotations

from typing import Final

from .base import Context, Detector, DetectorSet
from .budget import IterationCap
from .chanting import Chanting
from .conversation import RestatedReply
from .cycle import Cycle, NameCycle
from .errors import ErrorLoop
from .frequency import Frequency
from .futility import Futility
from .handoff import PingPong
from .instruction import RepeatedInstruction
from .progress import NoProgress
from .recursion import Recursion
from .repeat import RepeatedCall
from .revisit import RevisitedPage
from .semantic import Embedder, Semantic, SemanticUnavailable
from .spend import CostBudget, SpendVelocity, TimeBudget, TokenBudget
from .stagnation import Stagnation
from .wait import WaitBudget

__all__ = [
    "RUN_ORDER",
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
    "NameCycle",
    "NoProgress",
    "PingPong",
    "Recursion",
    "RepeatedCall",
    "RepeatedInstruction",
    "RestatedReply",
    "RevisitedPage",
    "Semantic",
    "SemanticUnavailable",
    "SpendVelocity",
    "Stagnation",
    "TimeBudget",
    "TokenBudget",
    "WaitBudget",
    "default_detectors",
    "registered",
]


# The order detectors run in, and so the order of their findings in a step: the
# call-level evidence first, the run-level evidence last. A detector registers
# itself by naming itself (Detector.__init_subclass__); one missing here runs after
# these, in the order it was defined.
RUN_ORDER: Final = (
    "repeated_call", "cycle", "error_loop", "no_progress", "stagnation", "chanting",
    "recursion", "iteration_cap", "spend_velocity", "ping_pong", "repeated_instruction",
    "revisited_page", "futility", "restated_reply", "wait_budget",
    "frequency", "name_cycle", "semantic", "token_budget", "cost_budget", "time_budget",
)  # fmt: skip


def registered() -> dict[str, type[Detector]]:
    """Every detector class by name, in run order."""
    known = Detector.registry
    names = [n for n in RUN_ORDER if n in known] + [n for n in known if n not in RUN_ORDER]
    return {name: known[name] for name in names}


def default_detectors() -> DetectorSet:
    """The default set: every detector that is on by default, with its measured
    default thresholds (what ``Config().detectors()`` builds)."""
    return DetectorSet(tuple(cls() for cls in registered().values() if cls.default_on))
