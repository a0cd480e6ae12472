"""The client side of ``loopwatch hook``: what a hook process runs when the hook daemon
(:mod:`loopwatch.hooks.daemon`) answers, and the few things both need (the daemon's
key, its socket, the framing).

Why a top-level module: a hook process must not import the ``loopwatch`` package (its
``__init__`` is the whole public API) nor much of the standard library. This module
imports nothing at its top but ``os`` and ``sys`` (loaded with the interpreter);
``ask_daemon`` imports ``_socket``, the C module under :mod:`socket`, whose own
imports (enum, selectors) would cost more than the call. It sends stdin, argv and the
working folder, and writes back what the daemon answers. Anything short of a daemon
that took the request (none, a stale one, a slow or broken one,
``LOOPWATCH_HOOK_DAEMON=0``, no unix sockets) is answered in-process by the caller,
:mod:`_loopwatch_entry`, as before the daemon existed.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # typing's own costs a hook call milliseconds
if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

__all__ = [
    "ask_daemon",
    "bare_package",
    "daemon_key",
    "daemon_socket",
    "start_daemon",
    "via_daemon",
]

# What the client sends and the daemon answers (see loopwatch.hooks.daemon).
PROTOCOL = b"LWHD1"
# The agent names `loopwatch hook` accepts (hooks._dispatch._PROTOCOLS; a test pins
# them equal): any other argument is answered in-process, without reading stdin.
AGENTS = frozenset(("claude-code", "claude", "codex", "gemini-cli", "gemini", "copilot-cli",
                     "copilot", "opencode", "qwen-code", "qwen", "cursor"))  # fmt: skip
# The environment a hook call's answer depends on: the state file's and the store's
# location, the build, the home folder, Copilot CLI running Claude's hooks, the
# import path. A daemon serves only callers whose values are its own.
_KEY_ENV = ("HOME", "XDG_STATE_HOME", "COPILOT_CLI", "PYTHONPATH", "PYTHONHOME", "TZ")
_CONNECT_TIMEOUT = 0.05  # seconds: a daemon that does not accept at once is not used
_GREETING_TIMEOUT = 0.5  # until the daemon says who it is: past it, answered here
_ANSWER_TIMEOUT = 30.0  # once the request is sent, it is the daemon's (never answered twice)
_MAX_SOCKET_PATH = 100  # AF_UNIX paths are limited to 107 bytes on Linux


def bare_package() -> None:
    """Make ``loopwatch`` importable as a package whose ``__init__`` has not run."""
    if "loopwatch" in sys.modules:
        return
    import types

    spec = _find_spec("loopwatch")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("loopwatch is not installed")
    package = types.ModuleType("loopwatch", "loopwatch (bare: loaded for a hook call)")
    package.__path__ = list(spec.submodule_search_locations)
    package.__file__ = spec.origin
    package.__package__ = "loopwatch"
    package.__spec__ = spec
    sys.modules["loopwatch"] = package


def _find_spec(name: str) -> ModuleSpec | None:
    """``importlib.util.find_spec`` for a top-level name, without importing
    ``importlib.util`` (and contextlib with it: 2 ms of a hook call): ask the import
    system's finders in order, as the import statement would."""
    for finder in sys.meta_path:
        find = getattr(finder, "find_spec", None)
        spec = find(name, None) if find is not None else None
        if spec is not None:
            return spec  # type: ignore[no-any-return]
    return None


def daemon_wanted() -> bool:
    """Whether hook calls go to the daemon: unix sockets, and not turned off."""
    off = os.environ.get("LOOPWATCH_HOOK_DAEMON", "").strip().lower()
    return os.name == "posix" and off not in ("0", "false", "no", "off") and hasattr(os, "fork")


def daemon_key() -> bytes:
    """Who a daemon may answer for: this loopwatch (this module's path and
    modification time, the interpreter) and the environment its answers depend on
    (``LOOPWATCH_*`` and ``_KEY_ENV``; the working folder too when the state's
    location is relative to it). Two callers with the same key get the same answer
    from a daemon as in their own process."""
    env = os.environ
    here = __file__
    try:
        stamp = os.stat(here).st_mtime_ns
    except OSError:
        stamp = 0
    parts = [PROTOCOL.decode(), sys.executable, here, str(stamp)]
    for name in sorted(env):
        if name.startswith("LOOPWATCH_") or name in _KEY_ENV:
            parts.append(f"{name}={env[name]}")
    state, store = env.get("LOOPWATCH_STATE", ""), env.get("LOOPWATCH_STORE", "")
    relative = (state and not state.startswith(("/", "~"))) or (
        store.startswith("sqlite://") and not store.startswith(("sqlite:///", "sqlite://?"))
        and store != "sqlite://"
    )  # fmt: skip
    if relative:
        parts.append(f"cwd={os.getcwd()}")
    return "\x00".join(parts).encode("utf-8", "surrogateescape")


def _digest(data: bytes) -> str:
    """A 64-bit FNV-1a of ``data`` in hex: names the socket of a key (the full key is
    compared in the greeting; hashlib's import costs more than this loop)."""
    value = 0xCBF29CE484222325
    for byte in data:
        value = ((value ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return f"{value:016x}"


def state_folder() -> str:
    """loopwatch's folder for the state file and the logs (as
    ``loopwatch.stores.sqlite.default_state_path``'s parent; a test pins them equal)."""
    explicit = os.environ.get("LOOPWATCH_STATE")
    if explicit:
        return os.path.dirname(os.path.abspath(os.path.expanduser(explicit)))
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return os.path.join(base, "loopwatch")


def daemon_socket(key: bytes | None = None) -> str:
    """The socket of the daemon for ``key`` (default: this process's)."""
    return os.path.join(
        state_folder(), f"hookd-{_digest(daemon_key() if key is None else key)}.sock"
    )


def _private(folder: str) -> bool:
    """Whether only this user can put a socket in ``folder``: a daemon there is one of
    ours, not someone else's answering for loopwatch."""
    try:
        info = os.stat(folder)
    except OSError:
        return False
    return info.st_uid == os.getuid() and not info.st_mode & 0o022


def _read_exact(sock: object, n: int, buffer: bytearray) -> bytes | None:
    """``n`` bytes from ``buffer`` then the socket; None at end of stream."""
    while len(buffer) < n:
        want = min(max(65536, n - len(buffer)), 1 << 20)
        chunk = sock.recv(want)  # type: ignore[attr-defined]
        if not chunk:
            return None
        buffer += chunk
    data = bytes(buffer[:n])
    del buffer[:n]
    return data


def _read_line(sock: object, buffer: bytearray, limit: int = 1 << 16) -> bytes | None:
    """A line (without its newline) from ``buffer`` then the socket."""
    while True:
        end = buffer.find(b"\n")
        if end >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            return line
        if len(buffer) > limit:
            return None
        chunk = sock.recv(65536)  # type: ignore[attr-defined]
        if not chunk:
            return None
        buffer += chunk


def ask_daemon(
    args: list[str], raw: bytes, key: bytes, path: str
) -> tuple[int, bytes, bytes] | None:
    """The daemon's answer to a hook call: (exit code, stdout, stderr), or None when
    the daemon provably did not take the request (then the caller answers it: the
    call is never judged twice). Raises ``ConnectionError`` (``FileNotFoundError``,
    ``ConnectionRefusedError``) when no daemon listens, so the caller starts one.

    Protocol (one request per connection): the daemon greets with
    ``LWHD1 <pid> <version> <key length>\\n<key>``; the client compares the key with
    its own and, only if it is the same, sends ``<argv length> <cwd length> <stdin
    length>\\n`` and the three; the daemon answers ``<exit> <stdout length> <stderr
    length>\\n`` and the two. Until the request is sent, the client may walk away (a
    slow greeting, a different key): the daemon never judges a request it did not
    receive whole. Once it is sent, the client waits for the answer and, if the
    daemon dies or takes longer than ``_ANSWER_TIMEOUT``, lets the call through
    (fail-open) rather than judge it a second time here.
    """
    import _socket

    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.settimeout(_CONNECT_TIMEOUT)
        sock.connect(path)
        sock.settimeout(_GREETING_TIMEOUT)
        buffer = bytearray()
        try:
            greeting = _read_line(sock, buffer)
            fields = greeting.split() if greeting else []
            if len(fields) != 4 or fields[0] != PROTOCOL or not fields[3].isdigit():
                return None
            if int(fields[3]) != len(key):
                return None
            if _read_exact(sock, int(fields[3]), buffer) != key:
                return None
            argv = "\x00".join(args[1:]).encode("utf-8", "surrogateescape")
            cwd = os.getcwd().encode("utf-8", "surrogateescape")
            sock.sendall(b"%d %d %d\n" % (len(argv), len(cwd), len(raw)) + argv + cwd + raw)
        except OSError:  # nothing was sent whole: the daemon did not take it
            return None
        sock.settimeout(_ANSWER_TIMEOUT)
        try:
            head = _read_line(sock, buffer)
            code, out_len, err_len = (int(n) for n in head.split()) if head else (0, -1, -1)
            out = _read_exact(sock, out_len, buffer) if out_len >= 0 else None
            err = _read_exact(sock, err_len, buffer) if out is not None else None
        except Exception:  # the request is the daemon's now: never judged here
            out = err = None
        if out is None or err is None:
            return _lost(args, raw)
        return code, out, err
    finally:
        sock.close()


def _lost(args: list[str], raw: bytes) -> tuple[int, bytes, bytes]:
    """The daemon took the request and gave no answer (it died, or took too long): the
    call is let through (the agent's own answer for that, judged by no one) and the
    loss written to ``hook.log``, as any failure of a hook call."""
    try:
        bare_package()
        from loopwatch.hooks._dispatch import let_through

        answer = let_through(args[1:], raw, "the hook daemon took the call and gave no answer")
        return answer.exit_code, answer.stdout.encode(), answer.stderr.encode()
    except Exception:
        return 0, b"", b""


def start_daemon(key: bytes) -> None:
    """Start the daemon for ``key`` detached from this process (a session of its own,
    stdio on /dev/null: the agent waits for the hook's pipes to close, never for the
    daemon), with fork and exec only (``subprocess`` costs a hook call 5-10 ms). The
    daemon's process waits for this one to end (the end of a pipe this process
    holds) before it even starts Python, so that the call this process answers does
    not share the CPU with the daemon's start. It binds the socket itself; if two
    calls start one each, one of them takes the lock and the other exits."""
    code = (
        "import sys; del sys.path[0]; import _loopwatch_hook as h; h.bare_package(); "
        "from loopwatch.hooks.daemon import serve; serve(sys.argv[1])"
    )
    ended, holding = os.pipe()  # `holding` stays open in this process until it exits
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child ends in exec or _exit
        try:
            os.setsid()
            if os.fork() == 0:
                os.close(holding)
                null = os.open(os.devnull, os.O_RDWR)
                for fd in (0, 1, 2):
                    os.dup2(null, fd)
                os.read(ended, 1)  # returns when the hook process has exited
                os.execv(sys.executable, [sys.executable, "-c", code, _digest(key)])
        finally:
            os._exit(0)
    os.close(ended)
    os.waitpid(pid, 0)


def _start(key: bytes) -> None:
    """Start a daemon if this process can (a sandbox may forbid fork): the call is
    answered here either way."""
    try:  # noqa: SIM105 - contextlib's import would cost every hook call
        start_daemon(key)
    except Exception:
        pass


def via_daemon(args: list[str]) -> bytes | None:
    """Answer a hook call through the daemon and end the process; when it must be
    answered here instead (after starting a daemon if none listens), return stdin if
    it was read (None if not)."""
    key = daemon_key()
    path = daemon_socket(key)
    if len(path.encode()) > _MAX_SOCKET_PATH:
        return None
    if not _private(os.path.dirname(path)):
        if not os.path.exists(os.path.dirname(path)):
            _start(key)  # it creates the folder, private
        return None
    try:
        raw = sys.stdin.buffer.read()
    except Exception:
        return None  # answered here, which logs it
    try:
        answer = ask_daemon(args, raw, key, path)
    except (FileNotFoundError, ConnectionRefusedError):
        _start(key)
        return raw
    except Exception:  # no unix sockets here (a sandbox), a daemon that did not accept
        return raw
    if answer is None:
        return raw
    code, out, err = answer
    if out:
        sys.stdout.buffer.write(out)
        sys.stdout.buffer.flush()
    if err:
        sys.stderr.buffer.write(err)
        sys.stderr.buffer.flush()
    os._exit(code)
