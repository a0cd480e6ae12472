"""Stores for per-run guard state, chosen by URL like the ``limits`` library does."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qs, urlparse

from .base import State, Store
from .memory import MemoryStore

__all__ = ["MemoryStore", "State", "Store", "store_from_url"]


def store_from_url(url: str, **options: Any) -> Store:
    """Build a store from a URL: ``memory://`` (default), ``redis://host:port/db`` or
    ``sqlite:///path/state.db`` (``sqlite://`` alone: the user's state directory).

    Query parameters and keyword options are passed to the store
    (``memory://?max_runs=1000&ttl_seconds=600``).
    """
    parsed = urlparse(url)
    scheme = parsed.scheme.lower()
    query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
    if scheme == "memory":
        opts: dict[str, Any] = {}
        if "max_runs" in query:
            opts["max_runs"] = int(query["max_runs"])
        if "ttl_seconds" in query:
            opts["ttl_seconds"] = float(query["ttl_seconds"])
        opts.update(options)
        return MemoryStore(**opts)
    if scheme in ("redis", "rediss", "redis+unix", "valkey", "valkeys", "unix"):
        try:
            from .redis import RedisStore  # type: ignore[import-not-found,unused-ignore]
        except ImportError as exc:  # pragma: no cover - depends on the install
            raise ImportError(
                f"the store {url!r} needs the Redis extra: pip install 'loopwatch[redis]'"
            ) from exc
        store: Store = RedisStore.from_url(url, **options)
        return store
    if scheme == "sqlite":
        from .sqlite import SqliteStore

        return SqliteStore.from_url(url, **options)
    raise ValueError(f"unknown store URL {url!r}: use memory:// or redis://host:port/db")
