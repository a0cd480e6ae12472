"""One way to load optional dependencies: a missing one names the extra to install."""

from __future__ import annotations

import pytest

from loopwatch.extras import EXTRAS, install_hint, missing, missing_extra

# Extras that conflict with the dev environment: `make test` runs their tests in a
# virtualenv of their own (google-adk pins OpenTelemetry below what langfuse 5 needs,
# crewai pydantic below the dev environment's).
OWN_VENV = {"google-adk", "crewai"}


def test_every_extra_of_the_package_is_known_and_installed_here() -> None:
    # the dev install has every extra but those with a virtualenv of their own
    for extra in EXTRAS:
        if extra not in OWN_VENV:
            assert missing(extra) == [], extra


def test_a_missing_module_of_an_extra_names_the_extra() -> None:
    err = missing_extra(ModuleNotFoundError("x", name="agents.run"), "openai-agents", "the SDK")
    assert 'pip install "loopwatch[openai-agents]"' in str(err) and err.name == "agents.run"
    other = ModuleNotFoundError("x", name="numpy")
    assert missing_extra(other, "openai-agents", "the SDK") is other
    assert install_hint("redis") == 'pip install "loopwatch[redis]"'


def test_missing_reports_what_is_absent(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(EXTRAS, "redis", ("redis", "no_such_module_for_loopwatch"))
    assert missing("redis") == ["no_such_module_for_loopwatch"]


def test_extras_match_pyproject() -> None:
    from pathlib import Path

    import tomllib

    pyproject = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    declared = set(pyproject["project"]["optional-dependencies"])
    assert set(EXTRAS) <= declared
