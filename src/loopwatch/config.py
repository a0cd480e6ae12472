"""Configuration: ``loopwatch.toml``, ``[tool.loopwatch]`` in ``pyproject.toml``, keywords.

Shape (TOML)::

    on_loop = "stop"            # stop | skip | warn
    max_iterations = 250        # shortcut for [iteration_cap] max_iterations
    exempt_tools = ["get_job_status"]   # invisible to every detector (pollers, clocks)

    [repeated_call]
    warn_at = 3
    stop_at = 5

    [frequency]
    enabled = true              # off by default
    per_tool = { get_job_status = [40, 0] }   # 0 = never

Every detector section accepts ``enabled`` and the detector's own parameters;
an unknown key is an error that names the valid ones.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from .detectors import (
    Chanting,
    CostBudget,
    Cycle,
    Detector,
    DetectorSet,
    ErrorLoop,
    Frequency,
    Futility,
    IterationCap,
    NoProgress,
    PingPong,
    Recursion,
    RepeatedCall,
    Semantic,
    SpendVelocity,
    Stagnation,
    TimeBudget,
    TokenBudget,
)
from .policy import ON_LOOP_CHOICES

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[import-not-found,unused-ignore]

__all__ = ["DETECTORS", "Config", "ConfigError", "find_config_file"]


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says which and what is valid."""


def _name_cycle(**kw: Any) -> Cycle:
    kw.setdefault("warn_repeats", 5)
    kw.setdefault("stop_repeats", None)
    return Cycle(level="name", **kw)


# name -> (factory, enabled by default)
DETECTORS: Final[dict[str, tuple[Any, bool]]] = {
    "repeated_call": (RepeatedCall, True),
    "cycle": (Cycle, True),
    "error_loop": (ErrorLoop, True),
    "no_progress": (NoProgress, True),
    "stagnation": (Stagnation, True),
    "chanting": (Chanting, True),
    "recursion": (Recursion, True),
    "iteration_cap": (IterationCap, True),
    "spend_velocity": (SpendVelocity, True),
    "ping_pong": (PingPong, True),
    "futility": (Futility, True),
    "frequency": (Frequency, False),
    "name_cycle": (_name_cycle, False),
    "semantic": (Semantic, False),
    "token_budget": (TokenBudget, False),
    "cost_budget": (CostBudget, False),
    "time_budget": (TimeBudget, False),
}
_TOP_KEYS: Final = frozenset(
    {"on_loop", "max_iterations", "store", "max_runs", "ttl_seconds", "on_store_error",
     "exempt_tools"}
)  # fmt: skip
_NEVER: Final = 0  # in TOML, 0 stands for "never" where a threshold may be None


def _params(factory: Any) -> list[str]:
    target = Cycle if factory is _name_cycle else factory
    return [p for p in inspect.signature(target.__init__).parameters if p not in ("self", "level")]


@dataclass
class Config:
    """Effective configuration: top-level options plus one section per detector."""

    on_loop: str = "stop"
    store: str = "memory://"
    max_runs: int = 10_000
    ttl_seconds: float | None = 3600.0
    on_store_error: str = "allow"
    exempt_tools: tuple[str, ...] = ()
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str | None = None) -> Config:
        """Build and validate a configuration from a parsed TOML table (or a dict)."""
        cfg = cls(source=source)
        cfg.update(data)
        return cfg

    def update(self, data: Mapping[str, Any]) -> None:
        """Merge more settings (keyword arguments override files this way)."""
        where = f" in {self.source}" if self.source else ""
        for key, value in data.items():
            if key in DETECTORS:
                if isinstance(value, bool):
                    value = {"enabled": value}
                if not isinstance(value, Mapping):
                    raise ConfigError(f"[{key}]{where} must be a table of settings, not {value!r}")
                valid = ["enabled", *_params(DETECTORS[key][0])]
                for sub in value:
                    if sub not in valid:
                        raise ConfigError(
                            f"unknown key {sub!r} in [{key}]{where}; valid keys: {', '.join(valid)}"
                        )
                converted = {k: _convert(k, v) for k, v in value.items()}
                defaults = _defaults(DETECTORS[key][0])
                for sub, sub_value in converted.items():
                    _check_type(f"[{key}] {sub}{where}", sub_value, defaults.get(sub, True))
                self.sections.setdefault(key, {}).update(converted)
            elif key == "max_iterations":
                self.sections.setdefault("iteration_cap", {})["max_iterations"] = (
                    None if value in (None, _NEVER) else int(value)
                )
            elif key == "exempt_tools":
                if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                    raise ConfigError(f"exempt_tools{where} must be a list of tool names")
                self.exempt_tools = tuple(sorted(set(value)))
            elif key in _TOP_KEYS:
                setattr(self, key, value)
            else:
                valid = sorted(_TOP_KEYS | set(DETECTORS))
                raise ConfigError(
                    f"unknown configuration key {key!r}{where}; valid keys: {', '.join(valid)}"
                )
        if self.on_loop not in ON_LOOP_CHOICES:
            raise ConfigError(
                f"on_loop{where} must be one of {ON_LOOP_CHOICES}, not {self.on_loop!r}"
            )
        if self.on_store_error not in ("allow", "raise"):
            raise ConfigError(
                f"on_store_error{where} must be 'allow' or 'raise', not {self.on_store_error!r}"
            )

    def with_options(self, options: Mapping[str, Any]) -> Config:
        """A copy of this configuration with keyword overrides merged in."""
        copy = Config(
            on_loop=self.on_loop,
            store=self.store,
            max_runs=self.max_runs,
            ttl_seconds=self.ttl_seconds,
            on_store_error=self.on_store_error,
            exempt_tools=self.exempt_tools,
            sections={k: dict(v) for k, v in self.sections.items()},
            source=self.source,
        )
        copy.update(options)
        return copy

    @classmethod
    def load(cls, path: str | Path | None = None, start: str | Path | None = None) -> Config:
        """Load a file, or find ``loopwatch.toml`` / ``pyproject.toml`` upward from ``start``
        (the working directory). No file found means the defaults."""
        file = Path(path) if path is not None else find_config_file(start)
        if file is None:
            return cls()
        try:
            data = tomllib.loads(file.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read configuration {file}: {exc}") from exc
        if file.name == "pyproject.toml":
            data = data.get("tool", {}).get("loopwatch", {})
        return cls.from_mapping(data, source=str(file))

    @property
    def max_iterations(self) -> int | None:
        section = self.sections.get("iteration_cap", {})
        if not section.get("enabled", True):
            return None
        value = section.get("max_iterations", 250)
        return None if value in (None, _NEVER) else int(value)

    def detectors(self) -> DetectorSet:
        """Instantiate the enabled detectors with their configured thresholds."""
        built: list[Detector] = []
        for name, (factory, default_on) in DETECTORS.items():
            section = dict(self.sections.get(name, {}))
            if not section.pop("enabled", default_on):
                continue
            kwargs = dict(section)
            try:
                built.append(factory(**kwargs))
            except (TypeError, ValueError, ImportError) as exc:
                raise ConfigError(f"[{name}]: {exc}") from exc
        return DetectorSet(tuple(built))

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration, every detector with all its parameters."""
        out: dict[str, Any] = {
            "on_loop": self.on_loop,
            "store": self.store,
            "max_runs": self.max_runs,
            "ttl_seconds": self.ttl_seconds,
            "on_store_error": self.on_store_error,
            "exempt_tools": list(self.exempt_tools),
        }
        for name, (factory, default_on) in DETECTORS.items():
            defaults = _defaults(factory)
            if factory is _name_cycle:
                defaults.update(warn_repeats=5, stop_repeats=None)
            section = {"enabled": default_on, **defaults, **self.sections.get(name, {})}
            out[name] = section
        return out


def _defaults(factory: Any) -> dict[str, Any]:
    target = Cycle if factory is _name_cycle else factory
    return {
        p.name: p.default
        for p in inspect.signature(target.__init__).parameters.values()
        if p.name not in ("self", "level")
    }


def _check_type(where: str, value: Any, default: Any) -> None:
    """Reject a value of the wrong type now, not at the agent's first step.

    Parameters whose default is None are numbers (a threshold or a limit) unless
    the caller passes an object (an embedder, a clock), which only Python can do.
    """
    ok: bool
    if isinstance(default, bool):
        ok = isinstance(value, bool)
        expected = "true or false"
    elif isinstance(default, int):
        ok = value is None or (isinstance(value, int) and not isinstance(value, bool))
        expected = "a whole number (0 for never)"
    elif isinstance(default, float) or default is None:
        if default is None and not isinstance(value, (str, bool, int, float)):
            return  # an object passed from Python (embedder=..., clock=...)
        ok = value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))
        expected = "a number"
    elif isinstance(default, str):
        ok = isinstance(value, str)
        expected = "a string"
    else:
        return  # structured values are checked by _convert
    if not ok:
        raise ConfigError(f"{where} must be {expected}, not {value!r}")


def _convert(key: str, value: Any) -> Any:
    """TOML has no null: 0 means "never" for stop thresholds; lists become tuples."""
    if key.startswith("stop") and value == _NEVER:
        return None
    if key == "per_tool":
        if not isinstance(value, Mapping) or not all(
            isinstance(v, (list, tuple))
            and len(v) == 2
            and all(isinstance(x, int) or x is None for x in v)
            for v in value.values()
        ):
            raise ConfigError(
                f"per_tool must map tool names to [warn_at, stop_at] pairs, not {value!r}"
            )
        return {
            str(k): (int(v[0]), None if v[1] in (None, _NEVER) else int(v[1]))
            for k, v in value.items()
        }
    if key == "exempt":
        if isinstance(value, str) or not all(isinstance(v, str) for v in value):
            raise ConfigError(f"exempt must be a list of tool names, not {value!r}")
        return frozenset(value)
    return value


def find_config_file(start: str | Path | None = None) -> Path | None:
    """``loopwatch.toml``, or a ``pyproject.toml`` with ``[tool.loopwatch]``, from
    ``start`` upward; the nearest wins."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        candidate = folder / "loopwatch.toml"
        if candidate.is_file():
            return candidate
        pyproject = folder / "pyproject.toml"
        if pyproject.is_file():
            try:
                data = tomllib.loads(pyproject.read_text(encoding="utf-8"))
            except (OSError, tomllib.TOMLDecodeError):
                continue
            if "loopwatch" in data.get("tool", {}):
                return pyproject
    return None
