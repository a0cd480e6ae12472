"""The hook daemon: one process per user and configuration that answers hook calls.

Why: a coding agent runs ``loopwatch hook AGENT`` in a fresh process around every tool
call, and most of such a process's time is importing loopwatch and opening the state
file. The daemon does both once and keeps them; the hook process becomes a client
that imports nothing (:mod:`_loopwatch_hook`), sends the call over a unix socket and
writes back the answer.

Where: ``hookd-<key digest>.sock`` in loopwatch's state folder (the folder of the
state file and the logs; 0700, the socket 0600). The key (``daemon_key``) is what an
answer depends on besides the payload: this loopwatch's files and interpreter, the
``LOOPWATCH_*`` variables, ``HOME`` and the state folder's variables. Callers with
another key have another daemon. The project's configuration is read per call,
from the payload's ``cwd`` as in-process, and kept only as long as its file is
unchanged (path, size, modification time), so an edited ``loopwatch.toml`` applies
to the next call. The state is in the store, as before: a daemon that exits or dies
loses nothing.

Started on demand: a hook call that finds no daemon answers in its own process, and
starts one (detached). Two calls doing so at once start two; one takes the lock
file (``.lock`` beside the socket) and the other exits. The daemon exits after
``LOOPWATCH_HOOK_DAEMON_IDLE`` seconds without a call (default 600), at once when
its socket file is removed or replaced, and when the loopwatch files it runs change
(an upgrade, an edit of an editable install): it refuses the call it noticed that
on, and the next call starts a current one. ``LOOPWATCH_HOOK_DAEMON=0`` keeps every
call in-process.

One request per connection, each on a thread of its own (the guard and the SQLite
store are thread-safe; two processes, or two threads, updating a run take turns on
the store's lock as hook processes always did). The protocol and its one rule (the
daemon judges only a request it received whole; once the client sent it, the client
never judges it again) are in :func:`_loopwatch_hook.ask_daemon`. A daemon that
dies while judging a call leaves that call let through (the client logs it), and
the call counted or not depending on whether its step was committed: never twice.

Peers of another user are refused (``SO_PEERCRED``, where the platform has it); the
socket's folder is private anyway.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import sys
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

from _loopwatch_hook import PROTOCOL, daemon_key, daemon_socket, daemon_wanted

from ._dispatch import Answer, _store_url, config_start, respond
from ._log import log_failure, served_by

__all__ = ["GuardCache", "serve", "status"]

_IDLE_DEFAULT: Final = 600.0  # seconds without a call before the daemon exits
_TICK: Final = 1.0  # seconds between checks for idleness and a removed socket
_REQUEST_TIMEOUT: Final = 10.0  # a client that greeted sends its request at once
_MAX_REQUEST: Final = 64 << 20  # bytes: a hook payload is far smaller
_OURS: Final = ("loopwatch", "_loopwatch_entry", "_loopwatch_hook")  # and loopwatch.*


def idle_seconds() -> float:
    """``LOOPWATCH_HOOK_DAEMON_IDLE`` (seconds), else the default; a value that is not
    a positive number is the default."""
    try:
        value = float(os.environ.get("LOOPWATCH_HOOK_DAEMON_IDLE", ""))
    except ValueError:
        return _IDLE_DEFAULT
    return value if value > 0 else _IDLE_DEFAULT


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("loopwatch")
    except Exception:
        return "unknown"


def _stamp(path: Path | None) -> tuple[int, int, int] | None:
    if path is None:
        return None
    try:
        info = path.stat()
    except OSError:
        return None
    return info.st_ino, info.st_size, info.st_mtime_ns


class GuardCache:
    """A guard per configuration file, kept while the file is unchanged: the guard's
    modules and its store's connection are what a hook process spent its time on.
    A configuration that does not load is loaded (and refused) again on every call,
    as in-process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._guards: dict[str, tuple[Any, Any]] = {}

    def guard(self, payload: Mapping[str, Any], cwd: str) -> Any:
        from ..config import Config, find_config_file
        from ..guard import Guard

        start = config_start(payload, cwd)
        path = find_config_file(start)
        stamp = _stamp(path)
        with self._lock:
            known = self._guards.get(str(path))
        if known is not None and known[0] == stamp:
            return known[1]
        config = Config.load(path) if path is not None else Config()
        guard = Guard(config, store=_store_url(config))
        with self._lock:
            self._guards[str(path)] = (stamp, guard)
        return guard

    def close(self) -> None:
        with self._lock:
            guards, self._guards = list(self._guards.values()), {}
        for _, guard in guards:
            with contextlib.suppress(Exception):
                guard.close()


class _Sources:
    """The files of the loopwatch modules this process runs, as first seen: when one
    changes, the daemon is stale (its answers would be the old code's)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, int] | None] = {}
        self.changed()

    @staticmethod
    def _of(path: str) -> tuple[int, int] | None:
        try:
            info = os.stat(path)
        except OSError:
            return None
        return info.st_size, info.st_mtime_ns

    def changed(self) -> bool:
        for name, module in list(sys.modules.items()):
            if name in _OURS or name.startswith("loopwatch."):
                path = getattr(module, "__file__", None)
                if path and path not in self._seen:
                    self._seen[path] = self._of(path)
        return any(self._of(path) != stamp for path, stamp in self._seen.items())


def _peer_uid(conn: socket.socket) -> int | None:
    """The connecting process's user id (Linux ``SO_PEERCRED``), None where unknown."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    try:
        _, uid, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, 12))
    except (OSError, struct.error):
        return None
    return int(uid)


def _read_request(conn: socket.socket) -> tuple[list[str], str, bytes] | None:
    """The client's request (argv, working folder, stdin), or None if it did not send
    one whole (it went away: it answers the call itself)."""
    from _loopwatch_hook import _read_exact, _read_line

    buffer = bytearray()
    head = _read_line(conn, buffer)
    try:
        sizes = [int(n) for n in head.split()] if head is not None else []
    except ValueError:
        return None
    if len(sizes) != 3 or min(sizes) < 0 or sum(sizes) > _MAX_REQUEST:
        return None
    parts = [_read_exact(conn, n, buffer) for n in sizes]
    argv, cwd, raw = parts
    if argv is None or cwd is None or raw is None:
        return None
    args = argv.decode("utf-8", "surrogateescape").split("\x00") if argv else []
    return args, cwd.decode("utf-8", "surrogateescape"), raw


def encode(answer: Answer) -> bytes:
    """An answer as the client reads it."""
    out = answer.stdout.encode("utf-8", "surrogateescape")
    err = answer.stderr.encode("utf-8", "surrogateescape")
    return b"%d %d %d\n" % (answer.exit_code, len(out), len(err)) + out + err


class Daemon:
    """The listening socket, its connections, and when to stop."""

    def __init__(self, listener: socket.socket, path: str, key: bytes) -> None:
        self.listener = listener
        self.path = path
        self.key = key
        self.inode = os.stat(path).st_ino
        self.guards = GuardCache()
        self.sources = _Sources()
        self.greeting = (
            b"%s %d %s %d\n" % (PROTOCOL, os.getpid(), _version().encode(), len(key)) + key
        )
        self.uid = os.getuid()
        self._lock = threading.Lock()
        self.active = 0
        self.last = time.monotonic()
        self.stopping = False

    def ours(self) -> bool:
        """Whether the socket file is still this daemon's."""
        try:
            return os.stat(self.path).st_ino == self.inode
        except OSError:
            return False

    def stop(self) -> None:
        """Stop taking calls: the socket file goes first, so that the next call starts
        a new daemon instead of queueing here."""
        with self._lock:
            if self.stopping:
                return
            self.stopping = True
        if self.ours():
            with contextlib.suppress(OSError):
                os.unlink(self.path)

    def run(self) -> None:
        idle = idle_seconds()
        self.listener.settimeout(_TICK)
        while not self.stopping:
            try:
                conn, _ = self.listener.accept()
            except TimeoutError:
                with self._lock:
                    quiet = self.active == 0 and time.monotonic() - self.last >= idle
                if quiet or not self.ours():
                    self.stop()
                continue
            except OSError:
                self.stop()
                break
            uid = _peer_uid(conn)
            if uid is not None and uid != self.uid:
                conn.close()
                continue
            with self._lock:
                self.active += 1
            threading.Thread(target=self.answer, args=(conn,), daemon=True).start()
        self.listener.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # let the calls it took finish
            with self._lock:
                if self.active == 0:
                    break
            time.sleep(0.01)
        self.guards.close()

    def answer(self, conn: socket.socket) -> None:
        try:
            if self.sources.changed() or daemon_key() != self.key:
                self.stop()  # refused before the greeting: the client answers it
                return
            conn.settimeout(_REQUEST_TIMEOUT)
            conn.sendall(self.greeting)
            request = _read_request(conn)
            if request is None:
                return
            args, cwd, raw = request
            try:
                answer = respond(
                    args, raw, close=False, guard_factory=lambda p: self.guards.guard(p, cwd)
                )
            except Exception as exc:  # handle() never raises; this is a last resort
                log_failure(args[0] if args else "", f"hook daemon: {type(exc).__name__}: {exc}")
                answer = Answer()
            conn.sendall(encode(answer))
        except OSError:
            pass  # the client went away; it answered the call itself or let it through
        finally:
            conn.close()
            with self._lock:
                self.active -= 1
                self.last = time.monotonic()


def _listen(path: str) -> socket.socket:
    """Bind the socket (0600) at ``path``, replacing a dead daemon's file."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(path)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        listener.bind(path)
    finally:
        os.umask(old)
    os.chmod(path, 0o600)
    listener.listen(128)
    return listener


def _take_lock(path: str, wait: float = 2.0) -> int | None:
    """The daemon's lock file, locked by this process (a daemon that is exiting
    releases it soon), or None when another daemon holds it."""
    import fcntl

    from ..stores.sqlite import open_private

    fd = open_private(Path(path + ".lock"), os.O_RDWR)
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return fd
        except OSError:
            if time.monotonic() >= deadline:
                os.close(fd)
                return None
            time.sleep(0.05)


def _warm() -> None:
    """Import what a call needs before the first one comes."""
    from importlib import import_module

    from .._logger import quiet
    from ._dispatch import _PROTOCOLS

    quiet()
    served_by("daemon")
    for name in set(_PROTOCOLS.values()):
        import_module(f"{__package__}.{name}")
    import_module("loopwatch.guard")
    import_module("loopwatch.config")
    import_module("loopwatch.stores.sqlite")


def serve(expected: str = "") -> None:
    """Run the daemon for this process's key (``expected``: its digest, as the client
    that started it computed it; a daemon that would not be that client's exits)."""
    from _loopwatch_hook import _digest, _private

    from ..stores.sqlite import private_folder

    key = daemon_key()
    if not daemon_wanted() or (expected and _digest(key) != expected):
        return
    path = daemon_socket(key)
    if b"\x00cwd=" not in key:  # nothing is relative to the folder it was started in:
        os.chdir("/")  # hold none (a folder in use cannot be unmounted)
    try:
        private_folder(Path(path).parent)
        if not _private(os.path.dirname(path)):
            return  # a folder others can write to: no socket answers for loopwatch there
        lock = _take_lock(path)
        if lock is None:
            return
        _warm()
        daemon = Daemon(_listen(path), path, key)
    except Exception as exc:
        log_failure("", f"hook daemon did not start: {type(exc).__name__}: {exc}")
        return
    import signal

    signal.signal(signal.SIGTERM, lambda *_: daemon.stop())  # the socket goes with it
    try:
        daemon.run()
    finally:
        daemon.stop()
        os.close(lock)


def status() -> dict[str, Any]:
    """The daemon for this environment, for ``loopwatch doctor``: whether it is
    used, its socket, and, when one answers there, its pid and version."""
    path = daemon_socket()
    info: dict[str, Any] = {"enabled": daemon_wanted(), "socket": path, "running": False}
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except (OSError, AttributeError):
        return info
    try:
        conn.settimeout(1.0)
        conn.connect(path)
        fields = conn.recv(4096).split(b"\n", 1)[0].split()
        if len(fields) == 4 and fields[0] == PROTOCOL:
            info.update(running=True, pid=int(fields[1]), version=fields[2].decode())
    except (OSError, ValueError):
        pass
    finally:
        conn.close()
    return info
