"""Stores for per-run guard state, chosen by URL like the ``limits`` library does.

Each store registers the URL schemes it serves in :data:`SCHEMES` (the module and
class that implement it, and how it is used); the class is imported only when a URL
asks for it, so an install without redis-py can still use the memory and SQLite
stores, and a missing extra names itself (:mod:`loopwatch.extras`).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any, Final, NamedTuple
from urllib.parse import urlparse

from .base import State, Store
from .memory import MemoryStore

__all__ = [
    "SCHEMES",
    "MemoryStore",
    "State",
    "Store",
    "StoreKind",
    "scheme_of",
    "store_from_url",
]


class StoreKind(NamedTuple):
    """Where a scheme's store lives, and what it needs."""

    module: str  # relative to loopwatch.stores
    cls: str
    shared: bool  # state shared by processes: every run must expire (ttl_seconds set)
    takes_max_runs: bool  # bounds the number of runs it keeps


_MEMORY: Final = StoreKind(".memory", "MemoryStore", False, True)
_REDIS: Final = StoreKind(".redis", "RedisStore", True, False)  # needs the redis extra
_SQLITE: Final = StoreKind(".sqlite", "SqliteStore", True, True)

SCHEMES: Final[dict[str, StoreKind]] = {
    "memory": _MEMORY,
    "redis": _REDIS,
    "rediss": _REDIS,
    "redis+unix": _REDIS,
    "valkey": _REDIS,
    "valkeys": _REDIS,
    "unix": _REDIS,
    "redis+cluster": _REDIS,  # redis+cluster://host:port[,host:port...]
    "rediss+cluster": _REDIS,
    "valkey+cluster": _REDIS,
    "valkeys+cluster": _REDIS,
    "sqlite": _SQLITE,
}


def scheme_of(url: str) -> str:
    """The lower-cased scheme of a store URL ("" when it has none)."""
    return urlparse(url).scheme.lower() if "://" in url else ""


def store_from_url(url: str, **options: Any) -> Store:
    """Build a store from a URL: ``memory://`` (default), ``redis://host:port/db``,
    ``redis+cluster://host:port,host:port`` (a Redis / Valkey cluster) or
    ``sqlite:///path/state.db`` (``sqlite://`` alone: the user's state directory).

    Query parameters and keyword options are passed to the store
    (``memory://?max_runs=1000&ttl_seconds=600``).
    """
    kind = SCHEMES.get(scheme_of(url))
    if kind is None:
        raise ValueError(
            f"unknown store URL {url!r}: use one of {', '.join(f'{s}://' for s in SCHEMES)}"
        )
    module = import_module(kind.module, __name__)  # a missing extra names itself
    store: Store = getattr(module, kind.cls).from_url(url, **options)
    return store
