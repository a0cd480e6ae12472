"""One hook call: payload on stdin -> events -> guard (state in SQLite) -> the agent's answer.

The guard's state lives between hook processes in a SQLite file:
``$LOOPWATCH_STORE`` (any store URL), else the ``store`` of the project's
``loopwatch.toml`` when it names a shared store, else
``sqlite://`` at ``$LOOPWATCH_STATE`` / ``$XDG_STATE_HOME/loopwatch/state.db``.

A hook never blocks the agent because of its own failure: any error (bad
payload, unreadable config, locked or broken state file, a bug) lets the call
through and appends one line to ``hook.log`` beside the state file.

Turns: a hook sees tool calls and results but not the model's text. A tool call
that follows a result or a prompt starts a new model turn, so the hook records an
empty ``model`` event first, as the transcript readers do for the assistant
message that made the call: calls made together in one message stay one decision
for the detectors, and a replayed session scans the same either way. What that
takes (the kind of the run's last hook event, and a warning held for the call's
result where the pre-tool hook has no context channel) is a small dict kept in the
same store under ``<session id>\x00hook-turn``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from typing import Any, final

from ..state import DetectorState, RunState

__all__ = ["Answer", "handle", "main", "run_hook"]

# agent name on the command line -> module with its protocol
_PROTOCOLS = {
    "claude-code": "claude_code",
    "claude": "claude_code",
    "codex": "codex",
    "gemini-cli": "gemini_cli",
    "gemini": "gemini_cli",
}
_SEVERITY = {"ok": 0, "warn": 1, "skip": 2, "stop": 3}
_TURN_SUFFIX = "\x00hook-turn"  # the store key of a run's turn marker


@dataclass(frozen=True, slots=True)
class Answer:
    """What the hook process prints and exits with."""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


@dataclass(frozen=True, slots=True)
class Outcome:
    """The guard's answer for one hook call, reduced to what a protocol needs."""

    action: str  # ok | warn | skip | stop
    message: str


def protocol(agent: str) -> Any:
    """The module implementing an agent's hook protocol."""
    name = _PROTOCOLS.get(agent)
    if name is None:
        raise ValueError(f"unknown agent {agent!r}; known: claude-code, codex, gemini-cli")
    return import_module(f"{__package__}.{name}")


def state_dir() -> Path:
    from ..stores.sqlite import default_state_path

    return default_state_path().parent


def _log_failure(agent: str, what: str) -> None:
    """One line in ``hook.log`` beside the state file (0600, secrets redacted: an
    error may quote a payload or a store URL); never raises."""
    try:
        from ..redact import redact
        from ..stores.sqlite import open_private, private_folder

        folder = state_dir()
        private_folder(folder)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        line = redact(" ".join(what.split())[:2000])
        fd = open_private(folder / "hook.log", os.O_WRONLY | os.O_APPEND)
        with open(fd, "a", encoding="utf-8") as fh:
            fh.write(f"{stamp} loopwatch hook {agent}: {line}; call let through\n")
    except Exception:
        pass


def _store_url(config: Any) -> str:
    url = os.environ.get("LOOPWATCH_STORE")
    if url:
        return url
    configured = str(getattr(config, "store", "") or "")
    if configured and not configured.startswith("memory"):
        return configured
    from ..stores.sqlite import default_state_path

    return f"sqlite://{default_state_path()}?timeout=2"


def make_guard(payload: Mapping[str, Any]) -> Any:
    """A guard with the project's configuration (found from the payload's ``cwd``)
    and a store shared by every hook process."""
    from ..config import Config
    from ..guard import Guard

    cwd = payload.get("cwd")
    config = Config.load(start=cwd if isinstance(cwd, str) and os.path.isdir(cwd) else None)
    return Guard(config, store=_store_url(config))


@final
class HookTurn(DetectorState):
    """What the hook processes of one session remember between them: the kind of the
    last hook event (a tool call after a result or a prompt starts a model turn), a
    count, and a warning held for the next result (Gemini CLI)."""

    __slots__ = ("last", "n", "warn")

    def __init__(self) -> None:
        self.last: str | None = None
        self.n = 0
        self.warn = ""


def new_turn(guard: Any, run_id: str, kind: str) -> tuple[bool, str]:
    """Record this hook event's kind in the run's marker. Returns whether a tool call
    here starts a new model turn (the previous hook event was a result or a prompt,
    or there was none), and, on a result, the warning deferred to it (see
    :func:`defer_warning`), taken out of the marker."""

    def step(state: RunState) -> tuple[bool, str]:
        marker = state.slot("hook", HookTurn)
        last, marker.last = marker.last, kind
        marker.n += 1
        deferred = ""
        if kind == "tool_result":
            deferred, marker.warn = marker.warn, ""
        return kind == "tool_call" and last != "tool_call", deferred

    result: tuple[bool, str] = guard.store.apply(run_id + _TURN_SUFFIX, step, RunState)
    return result


def defer_warning(guard: Any, run_id: str, message: str) -> None:
    """Keep a warning for the call's result: an agent whose pre-tool hook has no
    context channel (Gemini CLI) shows the model what its post-tool hook adds."""

    def step(state: RunState) -> None:
        state.slot("hook", HookTurn).warn = message

    guard.store.apply(run_id + _TURN_SUFFIX, step, RunState)


def handle(
    agent: str,
    payload: Mapping[str, Any],
    guard_factory: Callable[[Mapping[str, Any]], Any] = make_guard,
    close: bool = True,
) -> Answer:
    """Answer one hook payload (the whole hook, minus stdin/stdout); never raises.

    ``close=False`` leaves the store's connection open: the hook process exits right
    after, and closing the last connection to a WAL file checkpoints and deletes the
    WAL (about 15 ms, then 5 more for the next process to create it again).
    """
    proto: Any = None
    try:
        proto = protocol(agent)
        run_id = proto.run_id(payload)
        events = proto.events(payload)
        if not events or not run_id:
            allow: Answer = proto.answer(payload, Outcome("ok", ""))
            return allow
        guard = guard_factory(payload)
        try:
            kind = events[-1]["kind"]
            turn, deferred = new_turn(guard, run_id, kind)
            if turn:
                # a hook never sees what the model said: the turn's output is unknown
                events = [{"kind": "model", "unknown": ["text"]}, *events]
            worst = Outcome("ok", "")
            for event in events:
                verdict = guard.observe(run_id, event)
                if not verdict.state_available or "error" in verdict.extra:
                    _log_failure(agent, verdict.message or "state unavailable")
                action = str(verdict.action)
                if _SEVERITY[action] > _SEVERITY[worst.action]:
                    worst = Outcome(action, verdict.message or "")
            if deferred:
                message = " ".join(m for m in (deferred, worst.message) if m)
                worst = Outcome("warn" if worst.action == "ok" else worst.action, message)
            if (
                worst.action == "warn"
                and kind == "tool_call"
                and getattr(proto, "WARN_AFTER_TOOL", False)
            ):
                defer_warning(guard, run_id, worst.message)
        finally:
            if close:
                guard.close()
        answer: Answer = proto.answer(payload, worst)
        return answer
    except Exception as exc:
        _log_failure(agent, f"{type(exc).__name__}: {exc}")
        if proto is not None:
            try:
                fallback: Answer = proto.answer(payload, Outcome("ok", ""))
                return fallback
            except Exception:
                pass
        return Answer()


def run_hook(agent: str, raw: bytes, close: bool = True) -> Answer:
    """Decode stdin and answer; a payload that is not JSON is let through."""
    try:
        import orjson

        payload = orjson.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError(f"the payload is a JSON {type(payload).__name__}, not an object")
    except Exception as exc:
        _log_failure(agent, f"unreadable payload: {exc}")
        payload = {}
    return handle(agent, payload, close=close)


def main(argv: list[str] | None = None, exit_now: bool = False) -> int:
    """``loopwatch hook AGENT`` / ``python -m loopwatch.hooks AGENT``.

    ``exit_now`` (the hook entry script) ends the process as soon as the answer is
    written, skipping interpreter teardown and the WAL checkpoint on close: the
    step is committed, and the next hook process reads it from the WAL.
    """
    args = sys.argv[1:] if argv is None else argv
    agent = args[0] if args else ""
    if agent not in _PROTOCOLS:
        print(
            "usage: loopwatch hook {claude-code,codex,gemini-cli} < payload.json",
            file=sys.stderr,
        )
        return 0  # still never block the agent on a misconfigured command
    try:
        raw = sys.stdin.buffer.read()
    except Exception as exc:
        _log_failure(agent, f"cannot read stdin: {exc}")
        raw = b""
    answer = run_hook(agent, raw, close=not exit_now)
    if answer.stdout:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
    if answer.stderr:
        sys.stderr.write(answer.stderr)
        sys.stderr.flush()
    if exit_now:
        os._exit(answer.exit_code)
    return answer.exit_code
