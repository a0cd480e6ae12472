"""loopwatch's pytest plugin, as pytest loads it (the ``pytest11`` entry point).

Dormant unless asked: ``--loopwatch`` (or ``loopwatch = true`` in the ini file) watches
every test; without it only the tests that ask for the ``loopwatch`` fixture or carry
the ``loopwatch`` marker are watched. ``-p no:loopwatch`` turns it off altogether.

A top-level module, like :mod:`_loopwatch_entry`, because importing anything inside
``loopwatch`` first runs the package's ``__init__``, which imports the whole public API
(about as long as pytest's own start-up). This module imports nothing of loopwatch:
it declares the options, the marker and the fixture, and loads the plugin's body
(:mod:`loopwatch.integrations.pytest_plugin`) only when some test is watched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from loopwatch.testing import RecordedGuard

__all__ = ["loopwatch"]

_FAIL_ON = ("warn", "stop", "never")  # loopwatch.testing.FAIL_ON_CHOICES, not imported


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("loopwatch", "loop detection for agents under test (loopwatch)")
    group.addoption(
        "--loopwatch",
        action="store_true",
        default=None,
        help="watch every test: fail a test whose agent looped (default: only the tests "
        "that use the loopwatch fixture or marker)",
    )
    group.addoption(
        "--loopwatch-fail-on",
        choices=_FAIL_ON,
        default=None,
        help="what fails a watched test: a run the guard stopped (stop, the default), "
        "any warning (warn), or nothing, only the summary (never)",
    )
    parser.addini("loopwatch", "watch every test for agent loops", type="bool", default=False)
    parser.addini("loopwatch_fail_on", "warn, stop (default) or never", default="stop")
    parser.addini(
        "loopwatch_config",
        "the loopwatch.toml for the tests' guards, relative to the ini file "
        "(default: the project's loopwatch.toml or [tool.loopwatch])",
        default="",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "loopwatch(fail_on=..., config=..., detectors=..., **options): watch this test for "
        "agent loops, with these settings for its guard (loopwatch.toml keys as keywords)",
    )
    if config.getoption("loopwatch") or config.getini("loopwatch"):
        _body().start(config, watch_all=True)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ``--loopwatch``: load the plugin if a collected test asks for it."""
    if config.pluginmanager.has_plugin("loopwatch-watch"):  # pytest_plugin.PLUGIN_NAME
        return
    for item in items:
        if "loopwatch" in getattr(item, "fixturenames", ()) or item.get_closest_marker("loopwatch"):
            _body().start(config, watch_all=False)
            return


@pytest.fixture
def loopwatch(request: pytest.FixtureRequest) -> RecordedGuard:
    """This test's guard (a fresh one per test): every adapter built and every bare
    ``@watch`` called in the test uses it; the test fails if a run reaches
    ``fail_on``. ``loopwatch.record`` holds what it found."""
    guard: RecordedGuard = _body().guard_for(request)
    return guard


def _body() -> Any:
    from loopwatch.integrations import pytest_plugin

    return pytest_plugin
