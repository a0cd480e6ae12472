"""One hook call: payload on stdin -> events -> guard (state in SQLite) -> the agent's answer.

The guard's state lives between hook processes in a SQLite file:
``$LOOPWATCH_STORE`` (any store URL), else the ``store`` of the project's
``loopwatch.toml`` when it names a shared store, else
``sqlite://`` at ``$LOOPWATCH_STATE`` / ``$XDG_STATE_HOME/loopwatch/state.db``.

A hook never blocks the agent because of its own failure: any error (bad
payload, locked or broken state file, a bug) lets the call through and appends one
line to ``hook.log`` beside the state file. A configuration that cannot be loaded
lets every call through too, and the user is told once per session through the
agent's own channel for messages to the user (the protocol's ``notice``).

Turns: a hook sees tool calls and results but not the model's text. A tool call
that follows a result or a prompt starts a new model turn, so the hook records an
empty ``model`` event first, as the transcript readers do for the assistant
message that made the call: calls made together in one message stay one decision
for the detectors, and a replayed session scans the same either way.

A stop stops. Once the guard stops a session, every later tool call of that
session is denied before it runs, until the user's next prompt; protocols that can
end the agent's turn do so (``Outcome.after_stop``). And a call whose stop is
already certain before it runs (the stop would hold whatever its result is: the
third no-op in a row) is denied before it runs (:func:`foresee`).

What that takes (the kind of the run's last hook event, a warning held for the
call's result where the pre-tool hook has no context channel, the stop, whether the
user was told about a broken configuration) is a small record kept in the same
store under ``<session id>\\x00hook-turn``.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Mapping
from importlib import import_module
from typing import Any, NamedTuple, final

from ..state import DetectorState, RunState
from ._log import log_call, log_failure

__all__ = ["Answer", "Outcome", "foresee", "handle", "let_through", "main", "respond", "run_hook"]

# agent name on the command line -> module with its protocol
_PROTOCOLS = {
    "claude-code": "claude_code",
    "claude": "claude_code",
    "codex": "codex",
    "gemini-cli": "gemini_cli",
    "gemini": "gemini_cli",
    "copilot-cli": "copilot_cli",
    "copilot": "copilot_cli",
    "opencode": "opencode",
    "qwen-code": "qwen_code",
    "qwen": "qwen_code",
    "cursor": "cursor",
}
_SEVERITY = {"ok": 0, "warn": 1, "skip": 2, "stop": 3}
_TURN_SUFFIX = "\x00hook-turn"  # the store key of a run's turn marker
_AFTER_STOP = " Nothing runs in this session until the user's next message."
_USAGE = """usage: loopwatch hook AGENT [EVENT] < payload.json

Answer one coding-agent hook call: the agent runs this command around each tool
call, with the call as JSON on stdin, and reads loopwatch's answer (allow, warn,
deny, stop) in its own protocol. `loopwatch install AGENT` writes it into the
agent's settings; `loopwatch doctor` checks it.

positional arguments:
  AGENT    {agents}
  EVENT    the hook event, for an agent whose payload does not name it

options:
  -h, --help  show this help message and exit
"""
_DOCTOR = "loopwatch_doctor"  # a payload with this key asks the hook to say what it is


class Answer(NamedTuple):
    """What the hook process prints and exits with. (A named tuple, not a dataclass:
    building a dataclass at import costs a hook process about a millisecond.)"""

    exit_code: int = 0
    stdout: str = ""
    stderr: str = ""


class Outcome(NamedTuple):
    """The guard's answer for one hook call, reduced to what a protocol needs.

    ``after_stop``: the session was stopped before this call (deny it, and end the
    turn where the agent can). ``notice``: a message for the user, not the model
    (the configuration could not be loaded), shown once per session.
    """

    action: str  # ok | warn | skip | stop
    message: str
    after_stop: bool = False
    notice: str = ""


ALLOW = Outcome("ok", "")


def _never(payload: Mapping[str, Any]) -> bool:
    return False


def supported() -> str:
    """The agent names ``loopwatch hook`` accepts, for messages."""
    from . import AGENTS

    return ", ".join(AGENTS)


def protocol(agent: str) -> Any:
    """The module implementing an agent's hook protocol."""
    name = _PROTOCOLS.get(agent)
    if name is None:
        raise ValueError(f"unknown agent {agent!r}; supported: {supported()}")
    return import_module(f"{__package__}.{name}")


def _store_url(config: Any) -> str:
    url = os.environ.get("LOOPWATCH_STORE")
    if url:
        return url
    configured = str(getattr(config, "store", "") or "")
    if configured and not configured.startswith("memory"):
        return configured
    from ..stores.sqlite import default_state_path

    return f"sqlite://{default_state_path()}?timeout=2"


def config_start(payload: Mapping[str, Any], cwd: str | None = None) -> str | None:
    """Where the project's configuration is looked for: the payload's ``cwd``, else
    the caller's working folder (``cwd``; None: this process's)."""
    where = payload.get("cwd")
    return where if isinstance(where, str) and os.path.isdir(where) else cwd or None


def load_config(payload: Mapping[str, Any]) -> Any:
    """The project's configuration, found from the payload's ``cwd``
    (:class:`~loopwatch.config.ConfigError` when it is broken)."""
    from ..config import Config

    return Config.load(start=config_start(payload))


def make_guard(payload: Mapping[str, Any]) -> Any:
    """A guard with the project's configuration and a store shared by every hook
    process."""
    from ..guard import Guard

    config = load_config(payload)
    return Guard(config, store=_store_url(config))


@final
class HookTurn(DetectorState):
    """What the hook processes of one session remember between them: the kind of the
    last hook event (a tool call after a result or a prompt starts a model turn), a
    count, a warning held for the next result (Gemini CLI, Copilot CLI), the stop
    message while the session is stopped, and whether the user was told that the
    configuration could not be loaded."""

    __slots__ = ("last", "n", "stopped", "told", "warn")

    def __init__(self) -> None:
        self.last: str | None = None
        self.n = 0
        self.warn = ""
        self.stopped = ""
        self.told = False

    @classmethod
    def load(cls, data: Any) -> HookTurn:
        if isinstance(data, list) and len(data) == 3:  # written by loopwatch before the stop
            data = [data[0], data[1], "", False, data[2]]
        marker: HookTurn = super().load(data)
        return marker


def _marker(store: Any, run_id: str, step: Callable[[HookTurn], Any]) -> Any:
    return store.apply(run_id + _TURN_SUFFIX, lambda s: step(s.slot("hook", HookTurn)), RunState)


def new_turn(guard: Any, run_id: str, kind: str, first: str = "") -> tuple[bool, str, str]:
    """Record this hook event's kind (of its last event; ``first``: of its first, when
    it brings several, as Cursor's afterFileEdit brings a call and its result) in the
    run's marker. Returns whether a tool call here starts a new model turn (the
    previous hook event was a result or a prompt, or there was none); on a result, the
    warning deferred to it (see
    :func:`defer_warning`), taken out of the marker; and the stop message if the
    session is stopped (a user prompt lifts the stop)."""

    def step(marker: HookTurn) -> tuple[bool, str, str]:
        last, marker.last = marker.last, kind or marker.last
        marker.n += 1
        deferred = ""
        if kind == "tool_result":
            deferred, marker.warn = marker.warn, ""
        elif kind == "user":
            marker.stopped = ""
        return (first or kind) == "tool_call" and last != "tool_call", deferred, marker.stopped

    result: tuple[bool, str, str] = _marker(guard.store, run_id, step)
    return result


def defer_warning(guard: Any, run_id: str, message: str) -> None:
    """Keep a warning for the call's result: an agent whose pre-tool hook has no
    context channel (Gemini CLI) shows the model what its post-tool hook adds."""

    def step(marker: HookTurn) -> None:
        marker.warn = message

    _marker(guard.store, run_id, step)


def remember_stop(guard: Any, run_id: str, message: str) -> None:
    """The session is stopped: later calls are denied until the user's next prompt."""

    def step(marker: HookTurn) -> None:
        marker.stopped = message

    _marker(guard.store, run_id, step)


def foresee(guard: Any, run_id: str, call: Mapping[str, Any]) -> Outcome | None:
    """The stop this call would get whatever its result, if any: the guard's verdict
    on the call's result with the result unknown (so it counts as no evidence either
    way), tried on a copy of the run's state and then forgotten. A stop-severity
    finding there (three no-ops in a row: the third is futile before it runs) is
    decided as if found on the call, so ``on_loop`` applies (stop, or skip: deny
    this call only); ``on_loop = "warn"`` never blocks. The stop is earned as every
    stop is (policy.escalate): the first time, the call is denied and the agent told;
    the same call again stops the session."""
    from ..events import TOOL_CALL, Event
    from ..findings import Severity

    if guard.policy.on_loop == "warn":
        return None
    try:
        state = guard.store.get(run_id)
        if not isinstance(state, RunState):
            return None
        probe = RunState.from_bytes(state.to_bytes())
        result: dict[str, Any] = {"kind": "tool_result", "name": call.get("name") or "",
                                  "unknown": ["text"]}  # fmt: skip
        if call.get("id") is not None:
            result["id"] = call["id"]
        step = probe.n
        found = guard.engine.step(probe, Event.from_dict(result))
        stops = [f for f in found if f.severity is Severity.STOP]
        if not stops:
            return None

        def decide(live: RunState) -> Any:
            # on the run's own state: a stop the agent was not told about yet is told
            # now (this call denied), and the telling is remembered, so that the same
            # call again is stopped (policy.escalate)
            return guard.policy.decide(step, TOOL_CALL, stops, live)

        verdict = guard.store.apply(run_id, decide, RunState)
    except Exception:
        return None
    return Outcome(str(verdict.action), verdict.message or "")


def _judge(
    guard: Any, proto: Any, agent: str, run_id: str, events: list[Any], resumes: bool
) -> Outcome:
    kind = events[-1]["kind"] if events else ""
    turn, deferred, stopped = new_turn(guard, run_id, kind, events[0]["kind"] if events else "")
    if not events:  # the agent going on with its turn (Qwen Code's continuation)
        return Outcome("stop", stopped, after_stop=True) if stopped and resumes else ALLOW
    if turn:
        # a hook never sees what the model said: the turn's output is unknown
        events = [{"kind": "model", "unknown": ["text"]}, *events]
    worst = ALLOW
    for event in events:
        verdict = guard.observe(run_id, event)
        if not verdict.state_available or "error" in verdict.extra:
            log_failure(agent, verdict.message or "state unavailable")
        action = str(verdict.action)
        if _SEVERITY[action] > _SEVERITY[worst.action]:
            worst = Outcome(action, verdict.message or "")
    if stopped and kind == "tool_call":
        return Outcome("stop", stopped + _AFTER_STOP, after_stop=True)
    if kind == "tool_call" and _SEVERITY[worst.action] < _SEVERITY["skip"]:
        ahead = foresee(guard, run_id, events[-1])
        if ahead is not None:
            worst = ahead
    if deferred:
        message = " ".join(m for m in (deferred, worst.message) if m)
        worst = Outcome("warn" if worst.action == "ok" else worst.action, message)
    if worst.action == "stop":
        remember_stop(guard, run_id, worst.message)
    elif (
        worst.action == "warn" and kind == "tool_call" and getattr(proto, "WARN_AFTER_TOOL", False)
    ):
        defer_warning(guard, run_id, worst.message)
    return worst


def _notice_once(proto: Any, payload: Mapping[str, Any], run_id: str, problem: str) -> str:
    """The message telling the user that this session is not watched, the first time
    in the session that the agent can show one (``proto.shows_notice``); "" after."""
    shows = getattr(proto, "shows_notice", None)
    if shows is not None and not shows(payload):
        return ""
    message = (
        f"[loopwatch] Not watching this session for loops: {problem}. "
        "Every tool call is let through; `loopwatch doctor` shows what is wrong."
    )
    try:
        from ..stores import store_from_url

        store = store_from_url(_store_url(None))
        try:

            def step(marker: HookTurn) -> bool:
                told, marker.told = marker.told, True
                return told

            told: bool = _marker(store, run_id, step)
        finally:
            store.close()
    except Exception:
        told = False  # no state to remember it in: better told twice than never
    return "" if told else message


def handle(
    agent: str,
    payload: Mapping[str, Any],
    guard_factory: Callable[[Mapping[str, Any]], Any] = make_guard,
    close: bool = True,
) -> Answer:
    """Answer one hook payload (the whole hook, minus stdin/stdout); never raises.

    ``guard_factory``: the guard for a payload (the hook daemon keeps one per
    configuration). ``close=False`` leaves the store's connection open: the hook
    process exits right after (or the daemon keeps the guard), and closing the last
    connection to a WAL file checkpoints and deletes the WAL (about 15 ms, then 5
    more for the next process to create it again).
    """
    started = time.perf_counter()
    proto: Any = None
    outcome = ALLOW
    run_id: str | None = None
    try:
        proto = protocol(agent)
        run_id = proto.run_id(payload)
        events = proto.events(payload)
        resumes = bool(getattr(proto, "resumes", _never)(payload))
        notices = bool(getattr(proto, "shows_notice", _never)(payload))
        if not run_id or not (events or resumes or notices):
            allow: Answer = proto.answer(payload, ALLOW)
            return allow
        from ..config import ConfigError

        try:
            guard = guard_factory(payload)
        except ConfigError as exc:  # an invalid loopwatch.toml: let it through, say so
            log_failure(agent, f"configuration: {exc}")
            outcome = Outcome("ok", "", notice=_notice_once(proto, payload, run_id, str(exc)))
            unwatched: Answer = proto.answer(payload, outcome)
            return unwatched
        try:
            outcome = _judge(guard, proto, agent, run_id, events, resumes)
        finally:
            if close:
                guard.close()
        answer: Answer = proto.answer(payload, outcome)
        return answer
    except Exception as exc:
        log_failure(agent, f"{type(exc).__name__}: {exc}")
        outcome = ALLOW
        if proto is not None:
            try:
                fallback: Answer = proto.answer(payload, ALLOW)
                return fallback
            except Exception:
                pass
        return Answer()
    finally:
        if run_id:
            label = "after-stop" if outcome.after_stop else outcome.action
            if outcome.notice:
                label = "notice"
            event = str(payload.get("hook_event_name") or "")
            log_call(agent, event, run_id, label, started)


def run_hook(
    agent: str,
    raw: bytes,
    close: bool = True,
    event: str = "",
    guard_factory: Callable[[Mapping[str, Any]], Any] = make_guard,
) -> Answer:
    """Decode stdin and answer; a payload that is not JSON is let through. ``event``:
    the hook event named on the command line (Copilot CLI's payloads do not name it)."""
    payload = _payload(agent, raw, event)
    if payload.get(_DOCTOR):
        return _identify(agent)
    return handle(agent, payload, guard_factory, close=close)


def _payload(agent: str, raw: bytes, event: str) -> dict[str, Any]:
    """stdin as a payload ({} when it is not a JSON object: logged)."""
    try:
        import orjson

        payload = orjson.loads(raw) if raw.strip() else {}
        if not isinstance(payload, dict):
            raise ValueError(f"the payload is a JSON {type(payload).__name__}, not an object")
    except Exception as exc:
        log_failure(agent, f"unreadable payload: {exc}")
        payload = {}
    if event:
        payload.setdefault("hook_event_name", event)
    return payload


def let_through(args: list[str], raw: bytes, why: str) -> Answer:
    """The agent's answer that lets this call through, judged by no one, and ``why``
    in ``hook.log``: for a call the hook daemon took and did not answer (judging it
    here could count it twice)."""
    agent = args[0] if args else ""
    log_failure(agent, why)
    try:
        payload = _payload(agent, raw, args[1] if len(args) > 1 else "")
        allow: Answer = protocol(agent).answer(payload, ALLOW)
        return allow
    except Exception:
        return Answer()


def _identify(agent: str) -> Answer:
    """What ``loopwatch doctor`` asks an installed hook command: which loopwatch runs."""
    import json

    try:
        from importlib.metadata import version

        installed = version("loopwatch")
    except Exception:
        installed = "unknown"
    reply = {"loopwatch": installed, "agent": agent, "python": sys.executable}
    return Answer(0, json.dumps(reply) + "\n")


def respond(
    args: list[str],
    raw: bytes | None,
    close: bool = True,
    guard_factory: Callable[[Mapping[str, Any]], Any] = make_guard,
) -> Answer:
    """The answer to ``loopwatch hook ARGS`` with ``raw`` on stdin (None: read it
    here), as data: what :func:`main` prints and exits with, and what the hook daemon
    sends its client (with its own ``guard_factory``, see :func:`handle`).

    An unknown agent is a usage error (exit 2, naming the supported ones): the
    installer never writes one, so it is a hand-written command to fix. Everything
    else answers in the agent's protocol and exits 0.
    """
    agent = args[0] if args else ""
    if "--help" in args or "-h" in args:  # no agent or event is spelled so
        return Answer(0, _USAGE.format(agents=supported()))
    if agent not in _PROTOCOLS:
        what = f"unknown agent {agent!r}" if agent else "no agent named"
        return Answer(
            2,
            "",
            f"loopwatch hook: {what}; supported: {supported()}\n"
            "usage: loopwatch hook AGENT [EVENT] < payload.json (loopwatch hook --help)\n",
        )
    if raw is None:
        try:
            raw = sys.stdin.buffer.read()
        except Exception as exc:
            log_failure(agent, f"cannot read stdin: {exc}")
            raw = b""
    event = args[1] if len(args) > 1 else ""
    return run_hook(agent, raw, close=close, event=event, guard_factory=guard_factory)


def main(argv: list[str] | None = None, exit_now: bool = False, raw: bytes | None = None) -> int:
    """``loopwatch hook AGENT [EVENT]``; ``raw``: stdin, when the caller read it
    already (it asked the hook daemon first, which did not take the call).

    ``exit_now`` (the hook entry) ends the process as soon as the answer is written,
    skipping interpreter teardown and the WAL checkpoint on close: the step is
    committed, and the next hook process reads it from the WAL.
    """
    args = sys.argv[1:] if argv is None else argv
    # The guard logs to the "loopwatch" logger (an outage, a reset state): a hook's
    # stderr is the agent's, and its own failures go to hook.log.
    from .._logger import quiet

    quiet()
    answer = respond(args, raw, close=not exit_now)
    if answer.stdout:
        sys.stdout.write(answer.stdout)
        sys.stdout.flush()
    if answer.stderr:
        sys.stderr.write(answer.stderr)
        sys.stderr.flush()
    if exit_now:
        os._exit(answer.exit_code)
    return answer.exit_code
