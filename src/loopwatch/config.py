"""Configuration: ``loopwatch.toml``, ``[tool.loopwatch]`` in ``pyproject.toml``, keywords.

Shape (TOML)::

    on_loop = "stop"            # stop | skip | warn
    tell_first = true           # a stop is told first: warned, stopped if it persists
    max_iterations = 250        # shortcut for [iteration_cap] max_iterations
    exempt_tools = ["get_job_status"]   # invisible to every detector (pollers, clocks)

    [repeated_call]
    warn_at = 3
    stop_at = 5

    [frequency]
    enabled = true              # off by default
    per_tool = { get_job_status = [40, 0] }   # 0 = never

    [redact]                    # secrets are redacted from previews and messages;
    patterns = ["corp-[0-9a-f]{32}"]   # these regexes too (a group named secret: that part)

Every detector section accepts ``enabled`` and the detector's own parameters;
an unknown key is an error that names the valid ones.
"""

from __future__ import annotations

import inspect
import re
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qs, urlparse

from .detectors import Detector, DetectorSet, registered
from .durations import parse_duration
from .embeddings import semantic_unavailable_reason
from .policy import ON_LOOP_CHOICES
from .redact import compile_patterns
from .stores import SCHEMES, scheme_of


def _toml() -> Any:
    """The TOML parser, imported when a file is read: a coding-agent hook (a process
    per tool call) in a project with no loopwatch configuration never needs it."""
    if sys.version_info >= (3, 11):
        import tomllib as parser
    else:  # pragma: no cover
        import tomli as parser  # type: ignore[import-not-found,unused-ignore]
    return parser


__all__ = ["DETECTORS", "NEVER_AS_ZERO", "Config", "ConfigError", "find_config_file"]


class ConfigError(ValueError):
    """A configuration value or key is wrong; the message says which and what is valid."""


# name -> (detector class, enabled by default): every registered detector, in run
# order. The detectors declare both themselves; this module only loads and checks.
DETECTORS: Final[dict[str, tuple[type[Detector], bool]]] = {
    name: (cls, cls.default_on) for name, cls in registered().items()
}
_TOP_KEYS: Final = frozenset(
    {"on_loop", "max_iterations", "store", "max_runs", "ttl_seconds", "on_store_error",
     "exempt_tools", "tell_first"}
)  # fmt: skip
_NEVER: Final = 0  # in TOML, 0 stands for "never" where a threshold may be None


def _signature(factory: Any) -> inspect.Signature:
    """The constructor's signature, read from the class: a class compiled by mypyc
    carries it there (its ``__init__`` is a slot wrapper that takes ``*args``)."""
    return inspect.signature(factory)


def _params(factory: Any) -> list[str]:
    return [p for p in _signature(factory).parameters if p not in ("self", "level")]


@dataclass
class Config:
    """Effective configuration: top-level options plus one section per detector."""

    on_loop: str = "stop"
    tell_first: bool = True
    store: str = "memory://"
    max_runs: int = 10_000
    ttl_seconds: float | None = 3600.0
    on_store_error: str = "allow"
    exempt_tools: tuple[str, ...] = ()
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    source: str | None = None
    redact_patterns: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.ttl_seconds, str):
            self.ttl_seconds = _duration("ttl_seconds", self.ttl_seconds)
        self.validate()

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
                try:
                    converted = {k: _convert(k, v) for k, v in value.items()}
                except ConfigError as exc:
                    raise ConfigError(f"[{key}]{where}: {exc}") from None
                if key == "iteration_cap" and converted.get("max_iterations", 1) is None:
                    del converted["max_iterations"]  # None, from Python: no cap
                    converted["enabled"] = False
                defaults = _defaults(DETECTORS[key][0])
                for sub, sub_value in converted.items():
                    _check_type(f"[{key}] {sub}{where}", sub_value, defaults.get(sub, True))
                self.sections.setdefault(key, {}).update(converted)
            elif key == "max_iterations":
                # None (from Python) is no cap: the cap switched off, which TOML can say
                if _is_zero(value):
                    raise ConfigError(
                        f"max_iterations{where} must be a whole number >= 1, not {value!r}; "
                        "for no cap at all: [iteration_cap] enabled = false"
                    )
                cap = self.sections.setdefault("iteration_cap", {})
                if value is None:
                    cap["enabled"] = False
                else:
                    cap["max_iterations"] = value
            elif key == "exempt_tools":
                self.exempt_tools = _tool_names(f"exempt_tools{where}", value)
            elif key == "redact":
                self.redact_patterns = _redact_patterns(where, value)
            elif key == "ttl_seconds":
                self.ttl_seconds = (
                    None if value is None else _duration(f"ttl_seconds{where}", value)
                )
            elif key in _TOP_KEYS:
                setattr(self, key, value)
            else:
                valid = sorted(_TOP_KEYS | set(DETECTORS) | {"redact"})
                raise ConfigError(
                    f"unknown configuration key {key!r}{where}; valid keys: {', '.join(valid)}"
                )
        self.validate()

    def validate(self) -> None:
        """Check every value against its accepted range; raise :class:`ConfigError`
        naming the key, the value and what is accepted.

        The one place where values are judged, so a file, ``Config.update`` and
        ``Guard(**options)`` refuse the same things, at load time rather than at the
        agent's first step (or never: ``ttl_seconds = 0`` once silently turned the
        memory guard off).
        """
        where = f" in {self.source}" if self.source else ""
        if self.on_loop not in ON_LOOP_CHOICES:
            raise ConfigError(
                f"on_loop{where} must be one of {ON_LOOP_CHOICES}, not {self.on_loop!r}"
            )
        if not isinstance(self.tell_first, bool):
            raise ConfigError(f"tell_first{where} must be true or false, not {self.tell_first!r}")
        if self.on_store_error not in ("allow", "raise"):
            raise ConfigError(
                f"on_store_error{where} must be 'allow' or 'raise', not {self.on_store_error!r}"
            )
        _check_int(f"max_runs{where}", self.max_runs, 1, optional=False)
        if not isinstance(self.store, str) or _scheme(self.store) not in SCHEMES:
            raise ConfigError(
                f"store{where} must be a store URL (memory://, redis://host:port/db or "
                f"sqlite:///path/state.db), not {self.store!r}"
            )
        _check_store_url(f"store{where}", self.store)
        if self.ttl_seconds is not None:
            _duration(f"ttl_seconds{where}", self.ttl_seconds)
        elif SCHEMES[_scheme(self.store)].shared:
            raise ConfigError(
                f"ttl_seconds{where} must be set with store = {self.store!r}: "
                "a shared store needs every run to expire"
            )
        for name, section in self.sections.items():
            _check_section(name, section, where)
        if self.redact_patterns:
            self.redact_patterns = _redact_patterns(where, {"patterns": self.redact_patterns})

    def with_options(self, options: Mapping[str, Any]) -> Config:
        """A copy of this configuration with keyword overrides merged in."""
        copy = Config(
            on_loop=self.on_loop,
            tell_first=self.tell_first,
            store=self.store,
            max_runs=self.max_runs,
            ttl_seconds=self.ttl_seconds,
            on_store_error=self.on_store_error,
            exempt_tools=self.exempt_tools,
            sections={k: dict(v) for k, v in self.sections.items()},
            source=self.source,
            redact_patterns=self.redact_patterns,
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
        toml = _toml()
        try:
            data = toml.loads(file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, toml.TOMLDecodeError) as exc:
            raise ConfigError(f"cannot read configuration {file}: {exc}") from exc
        if file.name == "pyproject.toml":
            tool = data.get("tool", {})
            data = tool.get("loopwatch", {}) if isinstance(tool, dict) else {}
            if not isinstance(data, dict):
                raise ConfigError(f"[tool.loopwatch] in {file} must be a table, not {data!r}")
        return cls.from_mapping(data, source=str(file))

    @property
    def max_iterations(self) -> int | None:
        section = self.sections.get("iteration_cap", {})
        if not section.get("enabled", True):
            return None
        value = section.get("max_iterations", 250)
        return None if value in (None, _NEVER) else int(value)

    def detectors(self, clock: Callable[[], float] | None = None) -> DetectorSet:
        """Instantiate the enabled detectors with their configured thresholds.

        ``clock`` is given to every detector that reads one (the wait and time budgets)
        and was not handed its own: what the time is when an event carries none. The
        scan passes a clock that never moves, so that a report does not depend on how
        fast the machine read the trace."""
        built: list[Detector] = []
        for name, (factory, default_on) in DETECTORS.items():
            section = dict(self.sections.get(name, {}))
            if not section.pop("enabled", default_on):
                continue
            kwargs = dict(section)
            if clock is not None and "clock" not in kwargs and "clock" in _defaults(factory):
                kwargs["clock"] = clock
            try:
                built.append(factory(**kwargs))
            except (TypeError, ValueError, ImportError) as exc:
                raise ConfigError(f"[{name}]: {exc}") from exc
        return DetectorSet(tuple(built))

    def to_dict(self) -> dict[str, Any]:
        """The effective configuration, every detector with all its parameters."""
        out: dict[str, Any] = {
            "on_loop": self.on_loop,
            "tell_first": self.tell_first,
            "store": self.store,
            "max_runs": self.max_runs,
            "ttl_seconds": self.ttl_seconds,
            "on_store_error": self.on_store_error,
            "exempt_tools": list(self.exempt_tools),
            "redact": {"patterns": list(self.redact_patterns)},
        }
        for name, (factory, default_on) in DETECTORS.items():
            defaults = _defaults(factory)
            section = {"enabled": default_on, **defaults, **self.sections.get(name, {})}
            out[name] = section
        return out


def _defaults(factory: Any) -> dict[str, Any]:
    return {
        p.name: p.default
        for p in _signature(factory).parameters.values()
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
    """TOML has no null: 0 means "never" for optional thresholds; lists become tuples."""
    if key in _OPTIONAL_COUNTS and _is_zero(value):
        return None
    if key == "per_tool":
        if not isinstance(value, Mapping) or not all(
            isinstance(v, (list, tuple))
            and len(v) == 2
            and all((isinstance(x, int) and not isinstance(x, bool)) or x is None for x in v)
            for v in value.values()
        ):
            raise ConfigError(
                f"per_tool must map tool names to [warn_at, stop_at] pairs, not {value!r}"
            )
        return {
            str(k): (int(v[0]), None if v[1] is None or _is_zero(v[1]) else int(v[1]))
            for k, v in value.items()
        }
    if key == "exempt":
        return frozenset(_tool_names("exempt", value))
    if key in _DURATIONS and isinstance(value, str):
        return _duration(key, value)
    return value


# -- accepted ranges: the single source of truth for what a value may be -------------------
# Counts (whole numbers) and their lowest accepted value. Those in _OPTIONAL_COUNTS
# may also be None ("never"), written 0 in TOML.
_COUNTS: Final[dict[str, int]] = {
    "warn_at": 1, "stop_at": 1, "window_warn_at": 1, "window_stop_at": 1,
    "tool_warn_at": 1, "tool_stop_at": 1, "warn_repeats": 1, "stop_repeats": 1,
    "warn_after": 1, "stop_after": 1, "window": 1, "max_iterations": 1,
    "max_period": 2, "min_words": 0, "min_new_words": 0, "max_chars": 1,
    "resent_stop_at": 1, "recurring_warn_at": 1, "result_warn_at": 2, "warn_attempts": 1,
    "max_attempts": 1, "attempts": 2, "failures": 0, "absent_warn_at": 1,
    "absent_stop_at": 1,
}  # fmt: skip
_OPTIONAL_COUNTS: Final = frozenset(
    {"stop_at", "window_warn_at", "window_stop_at", "tool_stop_at", "stop_repeats",
     "stop_after", "resent_stop_at", "recurring_warn_at", "result_warn_at", "warn_attempts",
     "max_attempts", "absent_warn_at", "absent_stop_at"}
)  # fmt: skip
# Durations in a detector section: a number of seconds or a string such as "1h".
_DURATIONS: Final = frozenset({"max_seconds"})
NEVER_AS_ZERO: Final = _OPTIONAL_COUNTS  # written 0 in TOML (no null there)
# Fractions: (name -> whether 0 itself is accepted); the top is always 1.
_FRACTIONS: Final[dict[str, bool]] = {
    "similarity": False, "overlap": False, "warn_ratio": False, "min_output_novelty": True,
}  # fmt: skip
# Amounts (any number): "min_*" may be 0; limits must be positive, and are required
# by the detector that owns them when it is enabled.
_AMOUNTS: Final[dict[str, bool]] = {
    "min_tokens": True, "min_cost": True, "max_tokens": False, "max_cost": False,
    "max_seconds": False, "radius": False,
}  # fmt: skip
_REQUIRED: Final = {"token_budget": "max_tokens", "cost_budget": "max_cost",
                    "time_budget": "max_seconds"}  # fmt: skip
# (warn, stop) pairs: a warning must come no later than the stop it announces.
_PAIRS: Final = (
    ("warn_at", "stop_at"), ("window_warn_at", "window_stop_at"),
    ("tool_warn_at", "tool_stop_at"), ("warn_repeats", "stop_repeats"),
    ("warn_after", "stop_after"), ("absent_warn_at", "absent_stop_at"),
    ("warn_attempts", "max_attempts"),
)  # fmt: skip
_OUR_TABLE: Final = re.compile(r"^\s*\[+\s*tool\s*\.\s*[\"']?loopwatch\b", re.MULTILINE)
# What a pyproject.toml needs for a [tool.loopwatch] table: that header (or a deeper
# one), a bare [tool] table, or a top-level key path starting with tool (tool.x = ...,
# tool = {...}). One without any of these has no such table, and is not parsed.
_MAY_HAVE_OURS: Final = re.compile(
    r"^\s*\[+\s*[\"']?tool[\"']?\s*(?:\.\s*[\"']?loopwatch\b|\])|^\s*[\"']?tool[\"']?\s*[.=]",
    re.MULTILINE,
)


def _is_zero(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _check_int(where: str, value: Any, lowest: int, optional: bool) -> None:
    if value is None and optional:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
        never = " (or 0 for never)" if optional else ""
        raise ConfigError(f"{where} must be a whole number >= {lowest}{never}, not {value!r}")


def _tool_names(where: str, value: Any) -> tuple[str, ...]:
    """A list of tool names, sorted and deduplicated."""
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(
        value, (list, tuple, set, frozenset)
    ):
        raise ConfigError(f"{where} must be a list of tool names, not {value!r}")
    if not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where} must be a list of tool names (strings), not {value!r}")
    return tuple(sorted(set(value)))


def _redact_patterns(where: str, value: Any) -> tuple[str, ...]:
    """``[redact] patterns``: a list of regular expressions, each compiled now, so a bad
    one is refused at load time with the key, its position and the regex error."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"[redact]{where} must be a table (patterns = [...]), not {value!r}")
    for sub in value:
        if sub != "patterns":
            raise ConfigError(f"unknown key {sub!r} in [redact]{where}; valid keys: patterns")
    patterns = value.get("patterns", [])
    if isinstance(patterns, (str, bytes, Mapping)) or not isinstance(patterns, (list, tuple)):
        raise ConfigError(
            f"[redact] patterns{where} must be a list of regular expressions, not {patterns!r}"
        )
    for i, pattern in enumerate(patterns):
        if not isinstance(pattern, str) or not pattern:
            raise ConfigError(
                f"[redact] patterns[{i}]{where} must be a non-empty regular expression "
                f"(a string), not {pattern!r}"
            )
        try:
            (compiled,) = compile_patterns([pattern])
        except re.error as exc:
            raise ConfigError(
                f"[redact] patterns[{i}]{where} is not a valid regular expression "
                f"{pattern!r}: {exc}"
            ) from None
        if compiled.fullmatch(""):
            raise ConfigError(
                f"[redact] patterns[{i}]{where} {pattern!r} matches the empty string; "
                "it must match the secret itself"
            )
    return tuple(patterns)


def _duration(where: str, value: Any) -> float:
    """Seconds from a positive number or a string such as ``"90s"``, ``"30m"``,
    ``"1h"``, ``"1h30m"`` or ``"2d"`` (:func:`~loopwatch.durations.parse_duration`:
    the one parser of every duration, in a file, a keyword or a store URL)."""
    try:
        return parse_duration(value)
    except ValueError as exc:
        raise ConfigError(f"{where} {exc}") from None


def _check_store_url(where: str, url: str) -> None:
    """A store URL's ``max_runs`` and ``ttl_seconds``: the same ranges as the keys, at
    load rather than when the guard opens the store."""
    query = {k: v[-1] for k, v in parse_qs(urlparse(url).query).items()}
    if "max_runs" in query:
        try:
            runs = int(query["max_runs"])
        except ValueError:
            runs = 0
        if runs < 1:
            raise ConfigError(
                f"{where}: max_runs must be a whole number >= 1, not {query['max_runs']!r}"
            )
    ttl = query.get("ttl_seconds")
    if ttl is not None and not (_scheme(url) == "sqlite" and ttl in ("0", "none")):
        _duration(f"{where}: ttl_seconds", ttl)


def _scheme(url: str) -> str:
    return scheme_of(url)


def _check_section(name: str, section: Mapping[str, Any], where: str) -> None:
    """Ranges of one detector section, with the detector's defaults filled in."""
    factory = DETECTORS[name][0]
    defaults = _defaults(factory)
    values = {**defaults, **section}
    enabled = values.pop("enabled", DETECTORS[name][1])
    at = f"[{name}] {{}}{where}"
    for key, value in values.items():
        if key == "max_iterations" and _is_zero(value):
            raise ConfigError(
                f"{at.format(key)} must be a whole number >= 1, not 0; for no cap at all: "
                "[iteration_cap] enabled = false"
            )
        if key in _COUNTS:
            _check_int(at.format(key), value, _COUNTS[key], key in _OPTIONAL_COUNTS)
        elif key in _FRACTIONS:
            low_ok = _FRACTIONS[key]
            if not _is_number(value) or not (0 <= value <= 1 if low_ok else 0 < value <= 1):
                interval = "[0, 1]" if low_ok else "(0, 1]"
                raise ConfigError(f"{at.format(key)} must be a number in {interval}, not {value!r}")
        elif key in _AMOUNTS and (value is not None or defaults.get(key) is not None):
            # None turns an optional cap off; an amount with a numeric default
            # (min_tokens = 0.0) has no "off" and must stay a number
            zero_ok = _AMOUNTS[key]
            if not _is_number(value) or not (value >= 0 if zero_ok else value > 0):
                bound = ">= 0" if zero_ok else "> 0"
                raise ConfigError(f"{at.format(key)} must be a number {bound}, not {value!r}")
        elif key == "per_tool":
            for tool, (warn, stop) in value.items():
                _check_int(f"{at.format('per_tool')} {tool!r} warn_at", warn, 1, False)
                _check_int(f"{at.format('per_tool')} {tool!r} stop_at", stop, 1, True)
                if stop is not None and warn > stop:
                    raise ConfigError(
                        f"{at.format('per_tool')} {tool!r}: warn_at ({warn}) must not exceed "
                        f"stop_at ({stop})"
                    )
    for warn_key, stop_key in _PAIRS:
        warn, stop = values.get(warn_key), values.get(stop_key)
        if warn_key in values and warn is not None and stop is not None and warn > stop:
            raise ConfigError(
                f"{at.format(warn_key)} ({warn}) must not exceed {stop_key} ({stop}): a "
                f"warning comes before the stop (set {stop_key} = 0 for never)"
            )
    if not enabled:
        return
    required = _REQUIRED.get(name)
    if required is not None and values.get(required) is None:
        raise ConfigError(
            f"[{name}] is enabled{where} but has no {required}: set {required} to a "
            "number > 0, or disable it"
        )
    wants_model = (name == "semantic" or (name == "ping_pong" and values.get("semantic"))) and (
        values.get("embedder") is None
    )
    if wants_model:
        reason = semantic_unavailable_reason()
        if reason is not None:
            raise ConfigError(f"[{name}] is enabled{where} but {reason}")


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
                text = pyproject.read_text(encoding="utf-8")
            except (OSError, UnicodeDecodeError):
                continue
            if not _MAY_HAVE_OURS.search(text):
                continue
            toml = _toml()
            try:
                data = toml.loads(text)
            except toml.TOMLDecodeError:
                # Broken TOML that has our table: return it, so that loading reports
                # the syntax error instead of silently running on the defaults.
                if _OUR_TABLE.search(text):
                    return pyproject
                continue
            tool = data.get("tool", {})
            if isinstance(tool, dict) and "loopwatch" in tool:
                return pyproject
    return None
