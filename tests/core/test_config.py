"""Configuration: files found from the working directory upward, keywords on top."""

from __future__ import annotations

from pathlib import Path

import pytest

from loopwatch import Config, ConfigError, Guard
from loopwatch.config import find_config_file


def test_pyproject_tool_section_is_found_from_a_subfolder(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[project]\nname = "x"\n[tool.loopwatch]\non_loop = "skip"\nmax_iterations = 40\n'
    )
    sub = tmp_path / "a" / "b"
    sub.mkdir(parents=True)
    assert find_config_file(sub) == tmp_path / "pyproject.toml"
    cfg = Config.load(start=sub)
    assert cfg.on_loop == "skip" and cfg.max_iterations == 40


def test_loopwatch_toml_wins_over_a_pyproject_above_it(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[tool.loopwatch]\non_loop = "skip"\n')
    sub = tmp_path / "svc"
    sub.mkdir()
    (sub / "loopwatch.toml").write_text('on_loop = "warn"\n')
    assert Config.load(start=sub).on_loop == "warn"
    assert Config.load(start=tmp_path).on_loop == "skip"


def test_pyproject_without_the_section_is_ignored(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text('[project]\nname = "x"\n')
    assert find_config_file(tmp_path) != tmp_path / "pyproject.toml"


def test_unknown_keys_name_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"unknown configuration key 'on_lop'.*on_loop"):
        Config.from_mapping({"on_lop": "stop"})
    with pytest.raises(ConfigError, match=r"'warn_after' in \[repeated_call\].*warn_at"):
        Config.from_mapping({"repeated_call": {"warn_after": 1}})
    bad = tmp_path / "loopwatch.toml"
    bad.write_text("on_loop = [")
    with pytest.raises(ConfigError, match="cannot read"):
        Config.load(bad)


def test_detectors_can_be_enabled_disabled_and_tuned() -> None:
    cfg = Config.from_mapping(
        {"frequency": {"enabled": True, "per_tool": {"poll": [40, 0]}}, "chanting": False}
    )
    names = [d.name for d in cfg.detectors()]
    assert "frequency" in names and "chanting" not in names
    freq = next(d for d in cfg.detectors() if d.name == "frequency")
    assert freq.per_tool == {"poll": (40, None)}  # type: ignore[attr-defined]


def test_keywords_override_the_file() -> None:
    base = Config.from_mapping({"on_loop": "warn", "repeated_call": {"stop_at": 4}})
    guard = Guard(base, on_loop="skip", repeated_call={"warn_at": 2})
    assert guard.config.on_loop == "skip"
    assert guard.config.sections["repeated_call"] == {"stop_at": 4, "warn_at": 2}
    assert base.on_loop == "warn"  # the original is not modified


def test_exempt_tools_are_invisible_to_detectors() -> None:
    from runs import run, tool

    from loopwatch import scan

    events = []
    for _ in range(8):
        events += tool("get_job_status", {"job": "j"}, "pending", cid=None)
    base = scan(run(events), Config())
    assert base.verdict == "warn"  # a status checked 5 times without waiting in between
    exempt = Config.from_mapping({"exempt_tools": ["get_job_status"]})
    report = scan(run(events), exempt)
    assert report.verdict == "ok" and report.events == len(events)
    guard = Guard(exempt)
    verdicts = [guard.observe("r", e) for e in events]
    assert all(v.ok for v in verdicts) and verdicts[-1].step == len(events) - 1
    with pytest.raises(ConfigError, match="exempt_tools"):
        Config.from_mapping({"exempt_tools": "get_job_status"})


@pytest.mark.parametrize(
    "section",
    [
        {"repeated_call": {"stop_at": "five"}},
        {"repeated_call": {"warn_at": True}},
        {"stagnation": {"similarity": "high"}},
        {"frequency": {"per_tool": {"poll": [40]}}},
        {"frequency": {"exempt": "poll"}},
        {"chanting": {"enabled": "yes"}},
    ],
)
def test_wrong_value_types_fail_at_configuration_time(section: dict) -> None:
    with pytest.raises(ConfigError):
        Guard(Config.from_mapping(section))
