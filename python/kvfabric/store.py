"""kvfabric.Store: the KV-cache store from Python, batch calls first.

A node gives a pool of host memory (``pool_bytes``); a client gives none.
Pages are put from, and got into, memory registered with the engine: a key's
page is one buffer or several (a layer's k and v), given as objects with the
buffer protocol or DLPack, or as ``(address, length)`` pairs. Each batch call
converts its arguments with the GIL held, then runs in C++ with it released.

Per-key results follow Mooncake's convention: ``batch_put`` and
``batch_remove`` give 0 for success, ``batch_get`` the page's length, and a
failure is the negated status code (``-kvfabric.NotFoundError.code`` for a
miss). ``last_errors`` holds the messages of the failed keys of the calling
thread's most recent call.

>>> with kvfabric.Engine(protocol="tcp") as e:
...     store = kvfabric.Store(e, members="127.0.0.1:7400")
...     page = bytearray(128 << 10); e.register(page)
...     store.batch_put(["k"], [page])          # [0]
...     store.batch_get(["k"], [page])          # [131072]
"""

from __future__ import annotations

import threading
from typing import Any, Mapping, Sequence

from . import _core
from .engine import Engine, buffer_address
from .errors import InvalidArgumentError, error_for

__all__ = ["Store", "StoreError"]


class StoreError:
    """One failed key of a batch: its index, key, status code and message."""

    __slots__ = ("index", "key", "code", "message")

    def __init__(self, index: int, key: str, code: int, message: str):
        self.index, self.key, self.code, self.message = index, key, code, message

    def exception(self):
        """The kvfabric exception for this failure (not raised)."""
        return error_for(self.code, self.message)

    def __repr__(self) -> str:
        return f"StoreError({self.index}, {self.key!r}, {self.code}, {self.message!r})"


def _key(key: Any, i: int) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8")
    if not isinstance(key, str):
        raise InvalidArgumentError(f"key {i} is a {type(key).__name__}; keys are str")
    return key


def _piece(buf: Any, writable: bool) -> tuple[int, int]:
    if isinstance(buf, tuple):
        if len(buf) != 2:
            raise InvalidArgumentError(f"a buffer as a tuple is (address, length), not {buf!r}")
        addr, length, _ = buffer_address(buf[0], buf[1], writable=writable)
    else:
        addr, length, _ = buffer_address(buf, writable=writable)
    return addr, length


class Store:
    """A store node over ``engine`` (which must outlive it).

    ``pool_bytes`` > 0 makes this process a node that holds pages; 0 a client.
    ``members`` is the static member list (control addresses "host:port",
    comma-separated) used with p2p metadata; with etcd or http metadata the
    members come from there. ``settings`` takes any KVF_STORE_* setting by
    name (``{"KVF_STORE_DEADLINE_MS": 2000}`` or ``{"store_deadline_ms": ...}``).
    """

    def __init__(
        self,
        engine: Engine,
        pool_bytes: int = 0,
        members: str | Sequence[str] | None = None,
        listen: str | None = None,
        settings: Mapping[str, Any] | None = None,
    ):
        sets = {k: str(int(v) if isinstance(v, bool) else v) for k, v in (settings or {}).items()}
        if pool_bytes:
            sets["KVF_STORE_POOL_BYTES"] = str(int(pool_bytes))
        if members is not None:
            sets["KVF_STORE_MEMBERS"] = members if isinstance(members, str) else ",".join(members)
        if listen is not None:
            sets["KVF_STORE_LISTEN"] = listen
        self._engine = engine  # kept alive with the store
        self._core = _core.Store(engine._core, sets)
        self._errors = threading.local()  # each thread's last_errors (calls run in threads at once)

    def close(self) -> None:
        """Leaves the store and stops serving (idempotent)."""
        self._core.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def name(self) -> str:
        """This node's control address ("host:port"); "" for a client."""
        return self._core.name

    @property
    def last_errors(self) -> list[StoreError]:
        """The failed keys of this thread's most recent batch call, with their messages."""
        return getattr(self._errors, "last", [])

    def members(self) -> list[str]:
        """The members now in placement (reachable, with a pool)."""
        return self._core.members()

    # -- batch calls ------------------------------------------------------
    def _lists(self, keys: Sequence[Any], buffers: Sequence[Any], writable: bool):
        keys = [_key(k, i) for i, k in enumerate(keys)]
        if len(buffers) != len(keys):
            raise InvalidArgumentError(f"{len(keys)} keys but {len(buffers)} buffers: one buffer (or list) per key")
        addrs, lengths = [], []
        for b in buffers:
            pieces = [_piece(p, writable) for p in b] if isinstance(b, list) else [_piece(b, writable)]
            addrs.append([a for a, _ in pieces])
            lengths.append([n for _, n in pieces])
        return keys, addrs, lengths

    def _results(self, keys: list[str], got) -> list[int]:
        codes, failed = got
        self._errors.last = [StoreError(i, keys[i], code, message) for i, code, message in failed]
        return codes

    def batch_put(self, keys: Sequence[str], buffers: Sequence[Any], copies: int = 1) -> list[int]:
        """Stores each key's page (its buffers' bytes in order), ``copies`` copies of it on the
        members placement ranks first for the key (at most KVF_STORE_MAX_COPIES: a GET reads the
        next copy when a member fails). Per key: 0 once every copy is stored, or a negated status
        code."""
        keys, addrs, lengths = self._lists(keys, buffers, writable=False)
        if isinstance(copies, bool) or not isinstance(copies, int) or not 0 < copies < 1 << 32:
            raise InvalidArgumentError(f"copies {copies!r} is not a positive count")
        return self._results(keys, self._core.batch_put(keys, addrs, lengths, copies))

    def batch_get(self, keys: Sequence[str], buffers: Sequence[Any]) -> list[int]:
        """Reads each key's page into its buffers. Per key: the page's length, or a negated status code
        (-NotFoundError.code for a miss)."""
        keys, addrs, lengths = self._lists(keys, buffers, writable=True)
        return self._results(keys, self._core.batch_get(keys, addrs, lengths))

    def batch_exists(self, keys: Sequence[str]) -> list[bool]:
        """Whether each key has a page (an unreachable member's keys count as absent)."""
        return self._core.batch_exists([_key(k, i) for i, k in enumerate(keys)])[0]

    def exists_prefix(self, keys: Sequence[str]) -> int:
        """How many keys, from the first, all have a page."""
        return self._core.batch_exists([_key(k, i) for i, k in enumerate(keys)])[1]

    def batch_locate(self, keys: Sequence[str]) -> tuple[list[int], list[tuple[str, int, int, int]]]:
        """Where each key's page is now, for READs of parts of it with the engine: per key a
        code (0, or a negated status code) and (segment, address, length, valid_ms). The member
        keeps the page's slot for valid_ms (its KVF_STORE_READ_WINDOW_MS) from this call: READs
        ending within it see the page whole; parts are not checksummed."""
        keys = [_key(k, i) for i, k in enumerate(keys)]
        got, pages = self._core.batch_locate(keys)
        return self._results(keys, got), pages

    def _key_op(self, op: str, keys: Sequence[str]) -> list[int]:
        keys = [_key(k, i) for i, k in enumerate(keys)]
        return self._results(keys, self._core.key_op(op, keys))

    def batch_remove(self, keys: Sequence[str]) -> list[int]:
        """Per key: 0 (removed) or -NotFoundError.code (there was none), or the member's failure."""
        return self._key_op("remove", keys)

    def batch_pin(self, keys: Sequence[str]) -> list[int]:
        """Keeps the pages from eviction until unpinned (counted)."""
        return self._key_op("pin", keys)

    def batch_unpin(self, keys: Sequence[str]) -> list[int]:
        """Ends one pin per key, on the member this store's pin went to (even if the
        key's home moved since). Per key: 0, or -NotFoundError.code (not pinned: a member
        that restarted since the pin has none), or the member's failure."""
        return self._key_op("unpin", keys)

    def remove_all(self) -> int:
        """Removes every page of every member; returns how many."""
        return self._core.remove_all()

    def stats(self) -> dict[str, int]:
        """This process's counters (calls, hits, misses by reason) and its pool's."""
        return self._core.stats()
