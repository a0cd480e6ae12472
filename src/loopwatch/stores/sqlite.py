"""Run states in one SQLite file on local disk, shared by every process on the machine.

Why SQLite: coding-agent hooks run as a fresh process per tool call, so a run's state
must outlive the process, and several hook processes of one session may run at the
same time (Codex launches matching hooks concurrently). SQLite in WAL mode gives
that with the standard library only: one table ``runs(run_id, touched, state)``.

Atomicity: :meth:`SqliteStore.apply` runs read, ``fn`` and write inside one
``BEGIN IMMEDIATE`` transaction, which takes the database's write lock before the
read. Two processes updating the same run therefore take turns (the second waits
up to ``timeout`` seconds on SQLite's busy handler); no step is lost or applied to a
stale state. Readers never wait (WAL).

Faults never reach the agent as exceptions other than :class:`StoreUnavailable`
(which the guard turns into "let the step through"): a lock held longer than
``timeout``, a read-only or full disk. A row that does not decode is replaced by a
fresh state and logged; a file that is not a SQLite database is moved aside
(``state.db.corrupt-<time>``) and recreated.

Serialisation lives in :func:`_dump` / :func:`_load` only, so the state's encoding
can change in one place.

Private files (POSIX): the state holds which tools a user's agents ran, with what
(redacted) arguments, so the folder loopwatch creates is 0700 and the database, its
WAL and shared-memory files and ``hook.log`` are 0600, whatever the umask. SQLite
gives the WAL and shm files the database file's mode, so the database is created
(or tightened) first. loopwatch's own folder (``$XDG_STATE_HOME/loopwatch``) found
open to others is tightened, and the change logged; a folder the user chose
(``LOOPWATCH_STATE``, ``sqlite:///path``) is left as it is, its files still 0600.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Final, TypeVar

from .._logger import log
from ..durations import parse_duration
from ..errors import StoreUnavailable
from ..state import RunState
from .base import State, Store

__all__ = ["SqliteStore", "default_state_path", "open_private", "private_folder"]

T = TypeVar("T")

_SCHEMA: Final = (
    "CREATE TABLE IF NOT EXISTS runs ("
    " run_id TEXT PRIMARY KEY,"
    " touched REAL NOT NULL,"
    " state BLOB NOT NULL)"
)
_INDEX: Final = "CREATE INDEX IF NOT EXISTS runs_touched ON runs(touched)"
# Eviction (expired rows, then the least recently used beyond max_runs) runs on about
# one write in this many, so a step usually costs one read and one write.
_SWEEP_EVERY: Final = 64


def _dump(state: State) -> bytes:
    """A run state as bytes for the table (the one place that knows the encoding)."""
    return state.to_bytes()


def _load(blob: bytes) -> State:
    """Bytes from the table back to a run state; raises ValueError (StateError) if
    they are not one of this version's."""
    return RunState.from_bytes(blob)


def default_state_path() -> Path:
    """``$LOOPWATCH_STATE``, else ``$XDG_STATE_HOME/loopwatch/state.db``
    (``~/.local/state/loopwatch/state.db`` when XDG_STATE_HOME is unset)."""
    explicit = os.environ.get("LOOPWATCH_STATE")
    if explicit:
        return Path(explicit).expanduser()
    return _own_folder() / "state.db"


def _own_folder() -> Path:
    """loopwatch's own state folder, ``$XDG_STATE_HOME/loopwatch``."""
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(
        os.path.expanduser("~"), ".local", "state"
    )
    return Path(base) / "loopwatch"


_POSIX: Final = os.name == "posix"
_FOLDER_MODE: Final = 0o700
_FILE_MODE: Final = 0o600


def private_folder(folder: Path) -> None:
    """Create ``folder`` (and its parents) readable by its owner only (0700, whatever
    the umask). If it exists and is loopwatch's own folder, tighten it when others
    can read it (logged); a folder the user chose is left as it is."""
    if not folder.is_dir():
        folder.mkdir(parents=True, exist_ok=True, mode=_FOLDER_MODE)
        if _POSIX:
            os.chmod(folder, _FOLDER_MODE)
        return
    if not _POSIX:
        return
    mode = folder.stat().st_mode & 0o777
    if mode & 0o077 and _same_path(folder, _own_folder()):
        os.chmod(folder, mode & ~0o077)
        log.warning(
            "loopwatch: %s was open to other users (%s); made it private (%s)",
            folder,
            oct(mode),
            oct(mode & ~0o077),
        )


def _same_path(a: Path, b: Path) -> bool:
    try:
        return a.resolve() == b.resolve()
    except OSError:
        return False


def open_private(path: Path, flags: int) -> int:
    """``os.open`` a file loopwatch writes, creating it 0600 (whatever the umask) or
    making it 0600 if it is not; returns the descriptor."""
    fd = os.open(path, flags | os.O_CREAT, _FILE_MODE)
    if _POSIX:
        try:
            if os.fstat(fd).st_mode & 0o777 != _FILE_MODE:  # the umask took from it
                os.fchmod(fd, _FILE_MODE)
        except OSError:
            os.close(fd)
            raise
    return fd


def _tighten(path: Path) -> None:
    """A file of the database (WAL, shm) made 0600 if it exists and is not."""
    if not _POSIX:
        return
    try:
        if path.stat().st_mode & 0o777 != _FILE_MODE:
            os.chmod(path, _FILE_MODE)
    except FileNotFoundError:
        pass


class SqliteStore(Store):
    """Per-run guard state in a SQLite file (``sqlite:///path/state.db``).

    Options: ``ttl_seconds`` (a run idle this long starts afresh; None = never),
    ``max_runs`` (beyond this many runs the least recently used are dropped),
    ``timeout`` (seconds to wait for another process's update of the file before
    giving up with :class:`StoreUnavailable`).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        ttl_seconds: float | None = 3600.0,
        max_runs: int = 10_000,
        timeout: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        if max_runs < 1:
            raise ValueError("max_runs must be at least 1")
        self.path = Path(path) if path is not None else default_state_path()
        self.ttl_seconds = ttl_seconds
        self.max_runs = max_runs
        self.timeout = timeout
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._pid = os.getpid()
        self._writes = 0

    @classmethod
    def from_url(cls, url: str, **options: Any) -> SqliteStore:
        """``sqlite:///abs/path.db``, ``sqlite://relative.db`` or ``sqlite://`` (the
        default location); query options ``ttl_seconds``, ``max_runs``, ``timeout``."""
        from urllib.parse import parse_qsl, unquote, urlsplit

        parts = urlsplit(url)
        raw = unquote(parts.netloc + parts.path)
        opts: dict[str, Any] = {}
        parsers: dict[str, Callable[[str], Any]] = {
            "ttl_seconds": lambda v: None if v in ("", "0", "none") else parse_duration(v),
            "max_runs": int,
            "timeout": float,
        }
        for name, value in parse_qsl(parts.query, keep_blank_values=True):
            if name not in parsers:
                raise TypeError(
                    f"unknown SQLite store option {name!r} in {url!r}; known: {', '.join(parsers)}"
                )
            opts[name] = parsers[name](value)
        opts.update(options)
        return cls(raw or None, **opts)

    # -- the connection ---------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        """This process's connection (opened on first use; again after a fork)."""
        conn = self._conn
        if conn is not None and self._pid == os.getpid():
            return conn
        self._pid = os.getpid()
        self._conn = None  # a connection inherited over fork must not be used
        try:
            conn = self._open()
        except sqlite3.DatabaseError as exc:
            if not _is_corrupt(exc):
                raise
            self._move_aside(exc)
            conn = self._open()
        self._conn = conn
        return conn

    def _open(self) -> sqlite3.Connection:
        try:
            private_folder(self.path.parent)
            # the database first: SQLite creates its WAL and shm files with its mode
            os.close(open_private(self.path, os.O_RDWR))
            for suffix in ("-wal", "-shm"):
                _tighten(self.path.with_name(self.path.name + suffix))
        except OSError as exc:  # a read-only disk, a folder in the way: as SQLite's own
            raise sqlite3.OperationalError(f"cannot open {self.path}: {exc}") from exc
        conn = sqlite3.connect(
            self.path, timeout=self.timeout, isolation_level=None, check_same_thread=False
        )
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
            if mode and str(mode[0]).lower() != "wal":  # pragma: no cover - odd filesystems
                log.warning("loopwatch: %s is not in WAL mode (%s)", self.path, mode[0])
            conn.execute("PRAGMA synchronous = NORMAL")
            conn.execute(_SCHEMA)
            conn.execute(_INDEX)
        except BaseException:
            conn.close()
            raise
        return conn

    def _move_aside(self, exc: BaseException) -> None:
        """The file is not a SQLite database: keep it for inspection, start a new one."""
        target = self.path.with_name(f"{self.path.name}.corrupt-{int(time.time())}")
        log.warning(
            "loopwatch: %s is not a SQLite database (%s); moved to %s", self.path, exc, target
        )
        os.replace(self.path, target)
        for suffix in ("-wal", "-shm"):
            side = self.path.with_name(self.path.name + suffix)
            if side.exists():
                os.replace(side, target.with_name(target.name + suffix))

    def _unavailable(self, exc: BaseException, doing: str) -> StoreUnavailable:
        return StoreUnavailable(f"SQLite store {self.path} failed while {doing}: {exc}")

    # -- the store contract -----------------------------------------------------------
    def apply(self, run_id: str, fn: Callable[[State], T], factory: Callable[[], State]) -> T:
        with self._lock:
            try:
                conn = self._connect()
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._unavailable(exc, f"locking run {run_id!r}") from exc
            try:
                now = self._clock()
                row = conn.execute(
                    "SELECT touched, state FROM runs WHERE run_id = ?", (run_id,)
                ).fetchone()
                state = self._state_of(run_id, row, now, factory)
                result = fn(state)
                conn.execute(
                    "INSERT OR REPLACE INTO runs (run_id, touched, state) VALUES (?, ?, ?)",
                    (run_id, now, _dump(state)),
                )
                self._writes += 1
                if row is None or self._writes % _SWEEP_EVERY == 0:
                    self._sweep(conn, now)
                conn.execute("COMMIT")
            except BaseException as exc:
                _rollback(conn)
                if isinstance(exc, sqlite3.DatabaseError) and _is_corrupt(exc):
                    self._conn = None
                    conn.close()
                    self._move_aside(exc)  # the next update starts a fresh file
                if isinstance(exc, sqlite3.Error):
                    raise self._unavailable(exc, f"updating run {run_id!r}") from exc
                raise
            return result

    def _state_of(self, run_id: str, row: Any, now: float, factory: Callable[[], State]) -> State:
        if row is None:
            return factory()
        touched, blob = row
        ttl = self.ttl_seconds
        if ttl is not None and now - touched > ttl:
            return factory()
        try:
            return _load(blob)
        except (ValueError, TypeError) as exc:
            log.warning(
                "loopwatch: run %r in %s had an unreadable state (%s); starting it afresh",
                run_id,
                self.path,
                exc,
            )
            state = factory()
            state.reset_reason = (
                f"the stored state of run {run_id!r} in {self.path} could not be read "
                f"({exc}); the run started afresh"
            )
            return state

    def _sweep(self, conn: sqlite3.Connection, now: float) -> None:
        """Drop expired runs, then the least recently used beyond ``max_runs``."""
        if self.ttl_seconds is not None:
            conn.execute("DELETE FROM runs WHERE touched < ?", (now - self.ttl_seconds,))
        (count,) = conn.execute("SELECT COUNT(*) FROM runs").fetchone()
        extra = count - self.max_runs
        if extra > 0:
            conn.execute(
                "DELETE FROM runs WHERE run_id IN "
                "(SELECT run_id FROM runs ORDER BY touched LIMIT ?)",
                (extra,),
            )

    def get(self, run_id: str) -> State | None:
        with self._lock:
            try:
                row = (
                    self._connect()
                    .execute("SELECT touched, state FROM runs WHERE run_id = ?", (run_id,))
                    .fetchone()
                )
            except sqlite3.Error as exc:
                raise self._unavailable(exc, f"reading run {run_id!r}") from exc
        if row is None:
            return None
        ttl = self.ttl_seconds
        if ttl is not None and self._clock() - row[0] > ttl:
            return None
        try:
            return _load(row[1])
        except (ValueError, TypeError):
            return None

    def reset(self, run_id: str) -> None:
        with self._lock:
            try:
                self._connect().execute("DELETE FROM runs WHERE run_id = ?", (run_id,))
            except sqlite3.Error as exc:
                raise self._unavailable(exc, f"resetting run {run_id!r}") from exc

    def __len__(self) -> int:
        """Live (unexpired) runs in the file."""
        cutoff = -float("inf") if self.ttl_seconds is None else self._clock() - self.ttl_seconds
        with self._lock:
            try:
                (count,) = (
                    self._connect()
                    .execute("SELECT COUNT(*) FROM runs WHERE touched >= ?", (cutoff,))
                    .fetchone()
                )
            except sqlite3.Error as exc:
                raise self._unavailable(exc, "counting runs") from exc
        return int(count)

    def close(self) -> None:
        with self._lock:
            conn, self._conn = self._conn, None
            if conn is not None and self._pid == os.getpid():
                conn.close()

    def __repr__(self) -> str:
        return (
            f"SqliteStore({str(self.path)!r}, ttl_seconds={self.ttl_seconds}, "
            f"max_runs={self.max_runs})"
        )


def _rollback(conn: sqlite3.Connection) -> None:
    try:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
    except sqlite3.Error:  # pragma: no cover - the connection is already broken
        pass


def _is_corrupt(exc: sqlite3.DatabaseError) -> bool:
    text = str(exc).lower()
    return "not a database" in text or "malformed" in text
