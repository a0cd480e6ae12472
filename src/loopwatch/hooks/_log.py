"""What the hooks leave for ``loopwatch doctor``: the last calls and the errors.

Two small files beside the state file: ``hook.log`` (one line per failure, the call
let through) and ``calls.log`` (one JSON line per hook call: when, which agent and
event, the session, the answer, how long it took, ``via: daemon`` when the hook daemon
answered it). Each is rotated to ``<name>.1``
past 512 KB, so neither grows without bound. Writing never raises: a hook that
cannot log still answers.
"""

from __future__ import annotations

import json
import os
import time
from collections import deque
from pathlib import Path
from typing import Any, Final

__all__ = ["CALLS", "FAILURES", "log_call", "log_failure", "state_dir", "tail"]

FAILURES: Final = "hook.log"
CALLS: Final = "calls.log"
_ROTATE_AT: Final = 512 * 1024
# "daemon" in the hook daemon's process (set by it): its calls.log lines say so
_SERVED_BY: list[str] = [""]


def served_by(name: str) -> None:
    """Mark this process's calls.log lines as answered by ``name`` (the hook daemon)."""
    _SERVED_BY[0] = name


def state_dir() -> Path:
    """The folder of the default state file (``$LOOPWATCH_STATE``'s, else
    ``$XDG_STATE_HOME/loopwatch``), where the logs go whatever the store."""
    from ..stores.sqlite import default_state_path

    return default_state_path().parent


def _append(name: str, line: str) -> None:
    """Append a line to a log in loopwatch's folder, both private (0700 / 0600,
    whatever the umask): the logs name sessions and quote errors."""
    try:
        from ..stores.sqlite import open_private, private_folder

        folder = state_dir()
        private_folder(folder)
        path = folder / name
        try:
            if path.stat().st_size > _ROTATE_AT:
                os.replace(path, folder / f"{name}.1")
        except OSError:
            pass
        fd = open_private(path, os.O_WRONLY | os.O_APPEND)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")
    except Exception:
        pass


def log_failure(agent: str, what: str) -> None:
    """One line in ``hook.log``: what went wrong (secrets redacted: an error may quote
    a payload or a store URL); the call was let through."""
    from ..redact import redact

    stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
    line = redact(" ".join(what.split())[:2000])
    _append(FAILURES, f"{stamp} loopwatch hook {agent}: {line}; call let through")


def log_call(agent: str, event: str, session: str, answer: str, started: float) -> None:
    """One JSON line in ``calls.log`` for a hook call answered ``answer``."""
    record = {
        "at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "agent": agent,
        "event": event,
        "session": session,
        "answer": answer,
        "ms": round((time.perf_counter() - started) * 1000, 1),
    }
    if _SERVED_BY[0]:
        record["via"] = _SERVED_BY[0]
    _append(CALLS, json.dumps(record))


def tail(name: str, n: int) -> list[str]:
    """The last ``n`` lines of a log (fewer, or none, when it is shorter or absent)."""
    path = state_dir() / name
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            last: deque[str] = deque(fh, maxlen=n)
    except OSError:
        return []
    return [line.rstrip("\n") for line in last]


def parse_call(line: str) -> dict[str, Any] | None:
    """A ``calls.log`` line back as a dict (None if it is not one)."""
    try:
        record = json.loads(line)
    except ValueError:
        return None
    return record if isinstance(record, dict) else None
