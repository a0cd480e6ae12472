"""pytest: each watched test gets a fresh guard that every adapter and ``@watch`` in
it use, and fails when its agent looped, with the evidence in the failure report.

This module is the plugin's body. pytest loads the entry point, ``_loopwatch_pytest``
(a top-level module, so that a session that does not watch any test never imports
loopwatch: its package imports the whole public API, about as long as pytest's own
start-up), and that registers :class:`LoopwatchPlugin` from here when ``--loopwatch``
or ``loopwatch = true`` watches every test, or when a collected test asks for the
``loopwatch`` fixture or carries the ``loopwatch`` marker (then only those tests).

A watched test runs inside :func:`~loopwatch.integrations.use_guard` with a
:class:`~loopwatch.testing.RecordedGuard` made for it (from ``loopwatch_config``, else
the project's ``loopwatch.toml``; the marker's keywords on top; its own memory store),
from the start of its setup to the end of its teardown, so fixtures that build an
agent see it too. After the test's call, a run that reached ``fail_on`` fails it.
"""

from __future__ import annotations

from collections.abc import Generator, Iterable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final

import pytest

from ..config import Config, ConfigError
from ..detectors import Detector
from ..stores import MemoryStore
from ..testing import LoopRecord, RecordedGuard, check_fail_on, reaches
from ._common import use_guard

__all__ = ["PLUGIN_NAME", "LoopwatchPlugin", "guard_for", "start"]

PLUGIN_NAME: Final = "loopwatch-watch"
_PROPERTY: Final = "loopwatch"  # the user property a watched test's reports carry
_MARKER_KEYS: Final = ("config", "fail_on", "detectors")
_LISTED: Final = 20  # tests named in a summary line


class _Watch:
    """One test's guard, its record, and what to undo after its teardown."""

    def __init__(self, guard: RecordedGuard, fail_on: str, exit: ExitStack) -> None:
        self.guard = guard
        self.record: LoopRecord = guard.record
        self.fail_on = fail_on
        self.exit = exit
        self.settled = False  # judged after the test's call


_WATCH: Final = pytest.StashKey[_Watch]()


def start(config: pytest.Config, watch_all: bool) -> LoopwatchPlugin:
    """Register the plugin (once) and return it; ``watch_all`` upgrades a plugin
    registered for the tests that asked to one that watches every test."""
    plugin = config.pluginmanager.get_plugin(PLUGIN_NAME)
    if not isinstance(plugin, LoopwatchPlugin):
        plugin = LoopwatchPlugin(config, watch_all)
        config.pluginmanager.register(plugin, PLUGIN_NAME)
    plugin.watch_all = plugin.watch_all or watch_all
    return plugin


def guard_for(request: pytest.FixtureRequest) -> RecordedGuard:
    """The ``loopwatch`` fixture's value: the test's guard. A test that requested the
    fixture dynamically (``request.getfixturevalue``) is watched from here on."""
    item = request.node
    watch = item.stash.get(_WATCH, None)
    if watch is None:
        watch = start(request.config, watch_all=False).begin(item)
    guard: RecordedGuard = watch.guard
    return guard


class LoopwatchPlugin:
    """The hooks that watch tests (see the module's docstring)."""

    def __init__(self, config: pytest.Config, watch_all: bool) -> None:
        self.config = config
        self.watch_all = watch_all
        option = config.getoption("loopwatch_fail_on", None)
        try:
            self.fail_on = check_fail_on(
                option or config.getini("loopwatch_fail_on") or "stop",
                "--loopwatch-fail-on" if option else "loopwatch_fail_on",
            )
        except ValueError as exc:
            raise pytest.UsageError(f"loopwatch: {exc}") from None
        self._base: Config | None = None
        self.watched = 0
        self.warned: dict[str, str] = {}  # node id -> what fired, for tests that passed
        self.failed: dict[str, str] = {}  # node id -> what fired, for tests that failed

    # -- which tests, with which guard --------------------------------------------------
    def wants(self, item: pytest.Item) -> bool:
        return (
            self.watch_all
            or "loopwatch" in getattr(item, "fixturenames", ())
            or item.get_closest_marker("loopwatch") is not None
        )

    def base_config(self) -> Config:
        """``loopwatch_config`` (relative to the ini file's folder), else the
        ``loopwatch.toml`` / ``[tool.loopwatch]`` found from the root directory."""
        if self._base is None:
            path = str(self.config.getini("loopwatch_config") or "")
            if path:
                base = self.config.inipath.parent if self.config.inipath else self.config.rootpath
                file = base / path
                if not file.is_file():
                    raise ConfigError(f"loopwatch_config: {file}: no such file")
                self._base = Config.load(file)
            else:
                self._base = Config.load(start=self.config.rootpath)
        return self._base

    def begin(self, item: pytest.Item) -> _Watch:
        """Make the test's guard and put it in force until the end of its teardown."""
        try:
            guard, fail_on = self._guard(item)
        except (ConfigError, TypeError, ValueError) as exc:
            pytest.fail(f"loopwatch: {item.nodeid}: {exc}", pytrace=False)
        exit = ExitStack()
        exit.enter_context(use_guard(guard, derive=self._deriver(guard, item)))
        watch = _Watch(guard, fail_on, exit)
        item.stash[_WATCH] = watch
        self.watched += 1
        return watch

    def _options(self, item: pytest.Item) -> dict[str, Any]:
        """The ``loopwatch`` markers' keywords, the closest one winning."""
        options: dict[str, Any] = {}
        for marker in reversed(list(item.iter_markers("loopwatch"))):
            if marker.args:
                raise TypeError(
                    "the loopwatch marker takes keywords only: "
                    "@pytest.mark.loopwatch(fail_on='warn', repeated_call={'stop_at': 4})"
                )
            options.update(marker.kwargs)
        return options

    def _guard(self, item: pytest.Item) -> tuple[RecordedGuard, str]:
        options = self._options(item)
        fail_on = check_fail_on(options.pop("fail_on", self.fail_on), "the marker's fail_on")
        config = _config_of(options.pop("config", None), item)
        detectors = options.pop("detectors", None)
        guard = RecordedGuard(
            config if config is not None else self.base_config(),
            detectors=_detectors(detectors),
            store=options.pop("store", None) or MemoryStore(),
            **options,
        )
        return guard, fail_on

    def _deriver(self, guard: RecordedGuard, item: pytest.Item) -> Any:
        """How an adapter built in the test with keywords of its own gets its guard:
        the test's configuration (and pinned detectors) with the keywords on top,
        reporting to the test's record."""
        pinned = self._options(item).get("detectors")

        def derive(options: dict[str, Any]) -> RecordedGuard:
            return RecordedGuard(
                guard.config,
                record=guard.record,
                detectors=_detectors(pinned),
                store=options.pop("store", None) or MemoryStore(),
                **options,
            )

        return derive

    # -- the hooks -----------------------------------------------------------------------
    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> Generator[None, None, None]:
        refused: BaseException | None = None
        if item.stash.get(_WATCH, None) is None and self.wants(item):
            try:
                self.begin(item)
            except pytest.fail.Exception as exc:
                refused = exc
        # raised after pytest's own setup, not instead of it: its teardown expects it
        result = yield
        if refused is not None:
            raise refused
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        watch = item.stash.get(_WATCH, None)
        if watch is None:
            return (yield)
        try:
            result = yield
        except BaseException:
            self._settle(item, watch, raised=True)
            raise
        self._settle(item, watch, raised=False)
        return result

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, None, None]:
        try:
            result = yield
        finally:
            watch = item.stash.get(_WATCH, None)
            if watch is not None:
                del item.stash[_WATCH]
                watch.exit.close()
        if watch is not None and not watch.settled:
            # watched from inside the call (request.getfixturevalue): too late to fail
            # the call, not too late to say so
            self._settle(item, watch, raised=False)
        return result

    def _settle(self, item: pytest.Item, watch: _Watch, raised: bool) -> None:
        """After the test's call: fail it if a run reached ``fail_on``; keep what fired
        for the summary, in a user property (which also reaches a JUnit XML report)."""
        watch.settled = True
        verdict = watch.record.verdict
        if verdict == "ok":
            return
        fired = f"{verdict}: {', '.join(watch.record.detectors())}"
        item.user_properties.append((_PROPERTY, fired))
        report = watch.record.report(watch.fail_on)
        if raised or not reaches(verdict, watch.fail_on):
            # the test's own failure is reported as it is; the evidence comes along
            item.add_report_section("call", "loopwatch", report)
            return
        pytest.fail(report, pytrace=False)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "call":
            return
        for name, value in report.user_properties:
            if name == _PROPERTY:
                (self.failed if report.failed else self.warned)[report.nodeid] = str(value)

    def pytest_report_header(self, config: pytest.Config) -> str:
        scope = "every test" if self.watch_all else "tests that ask (fixture or marker)"
        return f"loopwatch: watching {scope}, fail_on={self.fail_on}"

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.watched and not self.failed and not self.warned:
            return
        terminalreporter.write_sep("-", "loopwatch")
        write = terminalreporter.write_line
        if self.failed:
            write(f"loopwatch: {_tests(len(self.failed))} failed on a loop: {_listed(self.failed)}")
        if self.warned:
            write(f"loopwatch: {_tests(len(self.warned))} had warnings: {_listed(self.warned)}")
        if self.watched and not (self.failed or self.warned):
            write(f"loopwatch: {_tests(self.watched)} watched, no loops")


def _config_of(given: Any, item: pytest.Item) -> Config | None:
    """The marker's ``config=``: a Config, a path (relative to the test's file), or a
    mapping of keys as in loopwatch.toml."""
    if given is None or isinstance(given, Config):
        return given
    if isinstance(given, (str, Path)):
        file = Path(item.path).parent / given
        if not file.is_file():
            raise ConfigError(f"the marker's config: {file}: no such file")
        return Config.load(file)
    if isinstance(given, dict):
        return Config.from_mapping(given, source="the loopwatch marker")
    raise TypeError(
        "the marker's config must be a Config, a path or a dict of loopwatch.toml keys, "
        f"not {type(given).__name__}"
    )


def _detectors(given: Any) -> Iterable[Detector] | None:
    if given is None:
        return None
    if not isinstance(given, (list, tuple)) or not all(isinstance(d, Detector) for d in given):
        raise TypeError("the marker's detectors must be a list of detectors")
    return list(given)


def _tests(count: int) -> str:
    return f"{count} test" if count == 1 else f"{count} tests"


def _listed(tests: dict[str, str]) -> str:
    named = [f"{nodeid} ({fired})" for nodeid, fired in list(tests.items())[:_LISTED]]
    more = len(tests) - _LISTED
    return ", ".join(named) + (f", and {more} more" if more > 0 else "")
