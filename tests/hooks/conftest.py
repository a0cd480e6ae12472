"""The hook tests run ``loopwatch hook`` commands, which start hook daemons (one per
state folder): those started here exit a few seconds after their test's last call
instead of the default ten minutes."""

from __future__ import annotations

import pytest


@pytest.fixture(autouse=True)
def short_lived_hook_daemons(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWATCH_HOOK_DAEMON_IDLE", "5")
