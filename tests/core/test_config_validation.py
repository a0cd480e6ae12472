"""Configuration is judged in one place, at load time: every wrong value is a
ConfigError naming the key, the value and what is accepted, and the command line
turns it into one line on stderr and exit status 2."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

import loopwatch.config as config_module
from loopwatch import Config, ConfigError, Guard
from loopwatch.cli import _toml, main

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

REFUSED: list[tuple[dict[str, Any], str, str]] = [
    # (settings, the key named, a fragment of the accepted range)
    ({"max_iterations": "abc"}, "max_iterations", ">= 1"),
    ({"max_iterations": -3}, "max_iterations", ">= 1"),
    # 0 is not "never" here: a cap of 0 turns would stop every run; no cap is said so
    ({"max_iterations": 0}, "max_iterations", "enabled = false"),
    ({"iteration_cap": {"max_iterations": 0}}, "max_iterations", "enabled = false"),
    ({"store": "redis://localhost/0?ttl_seconds=soon"}, "ttl_seconds", "'1h'"),
    ({"store": "sqlite:///tmp/x.db?ttl_seconds=-5"}, "ttl_seconds", "positive number"),
    ({"store": "memory://?ttl_seconds=1x"}, "ttl_seconds", "'30m'"),
    ({"time_budget": {"enabled": True, "max_seconds": "soon"}}, "max_seconds", "'1h'"),
    ({"exempt_tools": 5}, "exempt_tools", "list of tool names"),
    ({"exempt_tools": "search"}, "exempt_tools", "list of tool names"),
    ({"max_runs": "lots"}, "max_runs", ">= 1"),
    ({"max_runs": 0}, "max_runs", ">= 1"),
    ({"store": 42}, "store", "memory://"),
    ({"store": "http://example.com"}, "store", "redis://"),
    ({"ttl_seconds": 0}, "ttl_seconds", "more than 0"),
    ({"ttl_seconds": -60}, "ttl_seconds", "more than 0"),
    ({"ttl_seconds": "0s"}, "ttl_seconds", "more than 0"),
    ({"ttl_seconds": "soon"}, "ttl_seconds", "'30m'"),
    ({"ttl_seconds": "1x"}, "ttl_seconds", "'30m'"),
    ({"ttl_seconds": True}, "ttl_seconds", "'30m'"),
    ({"store": "redis://localhost/0", "ttl_seconds": None}, "ttl_seconds", "expire"),
    ({"repeated_call": {"warn_at": 0}}, "warn_at", ">= 1"),
    ({"repeated_call": {"stop_at": -1}}, "stop_at", ">= 1"),
    ({"repeated_call": {"warn_at": 6}}, "warn_at", "stop_at (3)"),
    ({"repeated_call": {"window_warn_at": 9}}, "window_warn_at", "window_stop_at (7)"),
    ({"error_loop": {"tool_warn_at": 11}}, "tool_warn_at", "tool_stop_at (10)"),
    ({"cycle": {"warn_repeats": 5}}, "warn_repeats", "stop_repeats (4)"),
    ({"cycle": {"max_period": 1}}, "max_period", ">= 2"),
    ({"frequency": {"window": 0}}, "window", ">= 1"),
    ({"frequency": {"per_tool": {"poll": [50, 10]}}}, "per_tool", "must not exceed"),
    ({"frequency": {"per_tool": {"poll": [0, 10]}}}, "per_tool", ">= 1"),
    ({"frequency": {"exempt": 5}}, "exempt", "list of tool names"),
    ({"spend_velocity": {"warn_after": 0}}, "warn_after", ">= 1"),
    ({"spend_velocity": {"min_output_novelty": 2}}, "min_output_novelty", "[0, 1]"),
    # found by the configuration fuzz test: None is "off" for a cap, not for a minimum
    ({"spend_velocity": {"min_tokens": None}}, "min_tokens", ">= 0"),
    ({"spend_velocity": {"min_cost": None}}, "min_cost", ">= 0"),
    ({"stagnation": {"similarity": 0}}, "similarity", "(0, 1]"),
    ({"iteration_cap": {"warn_ratio": 1.5}}, "warn_ratio", "(0, 1]"),
    ({"token_budget": True}, "max_tokens", "> 0"),
    ({"cost_budget": {"enabled": True, "max_cost": -1}}, "max_cost", "> 0"),
    ({"time_budget": {"enabled": True}}, "max_seconds", "> 0"),
    ({"chanting": {"warn_at": 2.5}}, "warn_at", "whole number"),
    ({"recursion": {"warn_at": True}}, "warn_at", "whole number"),
]


@pytest.mark.parametrize(("settings", "key", "accepted"), REFUSED)
def test_bad_values_are_refused_at_load_naming_key_value_and_range(
    settings: dict[str, Any], key: str, accepted: str
) -> None:
    with pytest.raises(ConfigError) as exc:
        Config.from_mapping(settings, source="loopwatch.toml")
    message = str(exc.value)
    assert key in message and accepted in message and "loopwatch.toml" in message
    assert "\n" not in message
    # the same refusal from Python keywords, before any run is observed
    with pytest.raises(ConfigError):
        Guard(Config(), **settings)


@pytest.mark.parametrize(
    ("settings", "check"),
    [
        ({"repeated_call": {"warn_at": 5, "stop_at": 5}}, lambda c: True),  # equal is allowed
        (
            {"repeated_call": {"warn_at": 9, "stop_at": 0}},
            lambda c: c.sections["repeated_call"]["stop_at"] is None,
        ),
        (
            {"error_loop": {"tool_stop_at": 0}},
            lambda c: c.sections["error_loop"]["tool_stop_at"] is None,
        ),
        ({"iteration_cap": {"enabled": False}}, lambda c: c.max_iterations is None),
        ({"max_iterations": None}, lambda c: c.max_iterations is None),  # from Python
        ({"ttl_seconds": "1h"}, lambda c: c.ttl_seconds == 3600.0),
        ({"ttl_seconds": "30m"}, lambda c: c.ttl_seconds == 1800.0),
        ({"ttl_seconds": "90s"}, lambda c: c.ttl_seconds == 90.0),
        ({"ttl_seconds": "1h30m"}, lambda c: c.ttl_seconds == 5400.0),
        ({"ttl_seconds": 2.5}, lambda c: c.ttl_seconds == 2.5),
        ({"ttl_seconds": None}, lambda c: c.ttl_seconds is None),  # memory store: never expire
        # a duration reads the same wherever it is written
        ({"store": "redis://localhost/0?ttl_seconds=1h"}, lambda c: True),
        ({"store": "memory://?ttl_seconds=30m"}, lambda c: True),
        (
            {"time_budget": {"enabled": True, "max_seconds": "2m"}},
            lambda c: c.sections["time_budget"]["max_seconds"] == 120.0,
        ),
        ({"token_budget": {"enabled": True, "max_tokens": 1000}}, lambda c: True),
        ({"store": "redis://localhost:6379/0"}, lambda c: c.store.startswith("redis")),
    ],
)
def test_good_values_are_accepted(settings: dict[str, Any], check: Any) -> None:
    assert check(Config.from_mapping(settings))


def test_semantic_without_its_extra_is_refused_naming_the_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        config_module,
        "semantic_unavailable_reason",
        lambda: "torch is not installed; pip install 'loopwatch[semantic]'",
    )
    for settings in ({"semantic": True}, {"ping_pong": {"semantic": True}}):
        with pytest.raises(ConfigError, match=r"loopwatch\[semantic\]"):
            Config.from_mapping(settings)

    # with an embedder of the caller's own, the extra is not needed
    class Words:
        def embed(self, texts: list[str]) -> list[list[float]]:
            return [[float(len(t)), 1.0] for t in texts]

    Config.from_mapping({"semantic": {"enabled": True, "embedder": Words()}})
    monkeypatch.setattr(config_module, "semantic_unavailable_reason", lambda: None)
    Config.from_mapping({"semantic": True})  # installed: accepted


def test_a_malformed_pyproject_with_our_table_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.loopwatch]\non_loop = "skip\n')
    with pytest.raises(ConfigError, match=r"pyproject\.toml"):
        Config.load(start=tmp_path)
    # someone else's broken pyproject.toml is not ours to report
    other = tmp_path / "other"
    other.mkdir()
    (other / "pyproject.toml").write_text('[project]\nname = "x\n')
    assert config_module.find_config_file(other) == tmp_path / "pyproject.toml"


def test_tool_loopwatch_that_is_not_a_table_is_reported(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool]\nloopwatch = 5\n")
    with pytest.raises(ConfigError, match=r"\[tool.loopwatch\]"):
        Config.load(start=tmp_path)


def test_malformed_loopwatch_toml_is_reported(tmp_path: Path) -> None:
    (tmp_path / "loopwatch.toml").write_bytes(b"on_loop = \xff\n")
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(start=tmp_path)


@pytest.mark.parametrize(
    "toml",
    [
        "[repeated_call]\nwarn_at = -1\n",
        'max_iterations = "abc"\n',
        "exempt_tools = 5\n",
        'max_runs = "lots"\n',
        "store = 42\n",
        "ttl_seconds = 0\n",
        "[token_budget]\nenabled = true\n",
        "[cycle]\nmax_period = 1\n",
        'on_loop = "skip\n',
    ],
)
def test_cli_exits_2_with_one_line_on_a_bad_configuration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str
) -> None:
    conf = tmp_path / "loopwatch.toml"
    conf.write_text(toml)
    runs = tmp_path / "runs.jsonl"
    runs.write_text(json.dumps({"run_id": "a", "events": []}) + "\n")
    assert main(["scan", "--json", "--config", str(conf), str(runs)]) == 2
    assert main(["config", "--config", str(conf)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 2 and all(line.startswith("loopwatch: ") for line in lines)
    assert "Traceback" not in captured.err


def test_discovered_bad_configuration_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.loopwatch]\nttl_seconds = -1\n")
    monkeypatch.chdir(tmp_path)
    assert main(["config"]) == 2
    err = capsys.readouterr().err
    assert "ttl_seconds" in err and "-1" in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "url",
    [
        "memory://?max_runs=abc",
        "memory://?max_runs=0",
        "memory://?ttl_seconds=0",
        "memory://?ttl_seconds=x",
    ],
)
def test_memory_store_url_options_are_checked_like_the_keys(url: str) -> None:
    with pytest.raises(ConfigError, match="store"):
        Config.from_mapping({"store": url})


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"frequency": {"enabled": True, "per_tool": {"poll": [5, 10], "clock": [40, 0]}}},
        {"repeated_call": {"window_warn_at": 0, "window_stop_at": 0, "stop_at": 0}},
        {"error_loop": {"tool_stop_at": 0}, "max_iterations": None, "ttl_seconds": "2h"},
        {"token_budget": {"enabled": True, "max_tokens": 5000}, "exempt_tools": ["b", "a"]},
    ],
)
def test_the_shown_configuration_loads_back_to_the_same(settings: dict[str, Any]) -> None:
    """`loopwatch config` prints TOML that loads back to the same configuration
    (0 for never, pairs in order), so it can be saved and edited."""
    config = Config.from_mapping(settings)
    shown = _toml(config)
    again = Config.from_mapping(tomllib.loads(shown))
    assert again.to_dict() == config.to_dict()


def test_a_ttl_unset_from_python_is_shown_as_a_comment_not_as_0() -> None:
    shown = _toml(Config.from_mapping({"ttl_seconds": None}))
    assert "# ttl_seconds: not set" in shown
    Config.from_mapping(tomllib.loads(shown))  # loads back (0 would be refused)
