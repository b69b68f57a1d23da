"""An SGLang HiCache storage backend over ``kvfabric.Store``.

SGLang loads it with its dynamic backend configuration (docs/sglang.md has
the flags)::

    --hicache-storage-backend dynamic
    --hicache-storage-backend-extra-config '{"backend_name": "kvfabric",
        "module_path": "kvfabric.integrations.sglang", "class_name": "HiCacheKvfabric",
        "interface_v1": 1, "metadata_server": "etcd://10.0.0.1:2379", "global_segment_size": "8gb"}'

SGLang makes it with ``HiCacheKvfabric(storage_config, kwargs)`` in each TP
rank, then calls ``register_mem_pool_host(host_pool)`` once: the host pool's
buffers are registered with the engine there, and every page after that moves
between the host pool and the store's pools with no copy (``batch_get_v1``,
``batch_set_v1``). Each page is one store key holding all its buffers (MHA's
k and v): a page is present whole or absent. A page read back is checked
against its checksum, and a GET returns True only when it filled the page's
buffers exactly: anything else is a miss, never wrong bytes.

Failures of the store (a miss, a dead node, a checksum mismatch, a full pool)
are per page: False from the batch calls, a shorter prefix from
``batch_exists``. Calls raise only on errors of the backend itself or of
its caller (a host pool it does not understand, a closed backend), so that
SGLang's threads log them instead of reading None.

This module imports SGLang: it is importable only where SGLang is installed.
"""

from __future__ import annotations

import ctypes
import logging
import threading
import time
from collections import Counter
from typing import Any, List, Optional

from sglang.srt.mem_cache.hicache_storage import HiCacheStorage, HiCacheStorageExtraInfo

from ..compat.mooncake import start_engine
from ..engine import buffer_address
from ..errors import NotFoundError, error_for
from ..store import Store
from ..units import runs_within
from .hicache_layout import BackendConfig, PoolPresence, key_scheme, page_buffers, pool_hits

__all__ = ["HiCacheKvfabric"]

logger = logging.getLogger(__name__)

# The host pool attributes that hold its memory (SGLang's MHA, MLA and split
# pools); get_hybrid_pool_buffer(), where a pool has it, lists the rest.
_POOL_BUFFERS = ("kv_buffer", "k_buffer", "v_buffer", "index_k_buffer", "index_k_scale_buffer")


class _Stats:
    """SGLang's StorageMetrics fields, when SGLang's own class cannot be imported."""

    def __init__(self) -> None:
        self.prefetch_pgs: List[int] = []
        self.backup_pgs: List[int] = []
        self.prefetch_bandwidth: List[float] = []
        self.backup_bandwidth: List[float] = []


def _storage_metrics():
    try:
        from sglang.srt.observability.metrics_collector import StorageMetrics
    except ImportError:
        return _Stats()
    return StorageMetrics()


def _tag(name: Any) -> str:
    """A pool's name as text: SGLang's PoolName members ("kv", "mamba", ...) or a plain string."""
    return str(getattr(name, "value", name))


def _logical(pool: Any) -> bool:
    """A KV pool that holds no bytes (DeepSeek V4's anchor: its side pools, through
    the v2 calls, carry the data)."""
    return hasattr(pool, "kv_buffer") and pool.kv_buffer is None


class HiCacheKvfabric(HiCacheStorage):
    """SGLang's ``HiCacheStorage`` over a kvfabric store: one engine and one
    store per rank; with ``global_segment_size`` > 0 the rank is a node too."""

    def __init__(self, storage_config: Any, kwargs: Optional[dict] = None):
        self.storage_config = storage_config
        extra = getattr(storage_config, "extra_config", None) or {}
        self.config = BackendConfig.resolve(extra)
        self.zero_copy = bool(extra.get("interface_v1", 0))
        self.scheme = key_scheme(storage_config, self.config.key_prefix, flat=not self.zero_copy)
        # For MLA, SGLang has one rank write (is_storage_writer; before it, rank 0); the others only read.
        writer = getattr(storage_config, "is_storage_writer", None)
        if writer is None:
            writer = not getattr(storage_config, "is_mla_model", False) or getattr(storage_config, "tp_rank", 0) == 0
        self.writer = bool(writer)
        self.metrics_on = bool(getattr(storage_config, "enable_storage_metrics", False))
        self.mem_pool_host = None
        self._lock = threading.Lock()  # metrics, counters, registrations
        self._staging_lock = threading.Lock()  # the copying calls' staging buffer
        self._metrics = _Stats()
        self._failures: Counter = Counter()  # failed pages by kvfabric error name
        self._registered: list[tuple[int, int]] = []  # (address, end) of registered pool memory
        self._staging: Optional[bytearray] = None
        cfg = self.config
        self.engine, self.protocol = start_engine(
            cfg.local_hostname, cfg.metadata_server, cfg.protocol, cfg.device_name, settings=cfg.settings
        )
        try:
            self.store = Store(self.engine, pool_bytes=cfg.global_segment_size, settings=cfg.settings)
        except BaseException:
            self.engine.close()
            raise
        logger.info(
            "kvfabric HiCache backend: engine %s (%s), %s, keys %s<hash>%s, %s",
            self.engine.name,
            self.protocol,
            f"a node with {cfg.global_segment_size} bytes of pool" if cfg.global_segment_size else "a client",
            self.scheme.prefix,
            self.scheme.suffix,
            "zero-copy (interface_v1)" if self.zero_copy else "copying calls (interface_v1 is off)",
        )

    # -- host pools ---------------------------------------------------------
    def register_mem_pool_host(self, mem_pool_host: Any) -> None:
        super().register_mem_pool_host(mem_pool_host)
        self._register_pool(mem_pool_host)

    def register_mem_host_pool_v2(self, host_pool: Any, host_pool_name: Any) -> None:
        super().register_mem_host_pool_v2(host_pool, host_pool_name)
        if _tag(host_pool_name) == "kv" and self.mem_pool_host is None:
            self.mem_pool_host = host_pool  # a KV pool handed over through v2 alone serves v1's calls too
        self._register_pool(host_pool)

    def _register_pool(self, pool: Any) -> None:
        """Registers the pool's memory with the engine once: each buffer not
        inside one registered already."""
        tensors = [getattr(pool, name, None) for name in _POOL_BUFFERS]
        if hasattr(pool, "get_hybrid_pool_buffer"):
            tensors += list(pool.get_hybrid_pool_buffer())
        spans = []
        for t in tensors:
            if t is None:
                continue
            addr, nbytes, _ = buffer_address(t)
            if nbytes:
                spans.append((addr, addr + nbytes, t))
        spans.sort(key=lambda s: (s[0], -s[1]))
        with self._lock:
            for addr, end, t in spans:
                if any(a <= addr and end <= e for a, e in self._registered):
                    continue
                self.engine.register(t)
                self._registered.append((addr, end))
        if not spans and not _logical(pool):
            raise ValueError(
                f"kvfabric HiCache backend: the host pool {type(pool).__name__} has none of "
                f"{', '.join(_POOL_BUFFERS)} nor get_hybrid_pool_buffer(): nothing to register"
            )

    def _pages(self, keys: List[str], host_indices: Any) -> list:
        if self.mem_pool_host is None:
            raise RuntimeError("kvfabric HiCache backend: register_mem_pool_host() was not called")
        ptrs, sizes = self.mem_pool_host.get_page_buffer_meta(host_indices)
        return page_buffers(ptrs, sizes, len(keys))

    # -- zero-copy calls (interface_v1) ---------------------------------------
    def batch_get_v1(
        self, keys: List[str], host_indices: Any, extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> List[bool]:
        """Reads each page into the host pool; True where the page came back
        whole (its buffers filled exactly, checksum verified)."""
        if not keys:
            return []
        if _logical(self.mem_pool_host):
            return [True] * len(keys)
        pages = self._pages(keys, host_indices)
        t0 = time.perf_counter()
        got = self.store.batch_get(self.scheme.keys(keys), pages)
        done = [r == sum(n for _, n in page) for r, page in zip(got, pages)]
        self._account(False, keys, pages, done, time.perf_counter() - t0)
        return done

    def batch_set_v1(
        self, keys: List[str], host_indices: Any, extra_info: Optional[HiCacheStorageExtraInfo] = None
    ) -> List[bool]:
        """Stores each page from the host pool, skipping pages the store has;
        True where the page is in the store. A rank that is not SGLang's
        storage writer (MLA: all but one) writes nothing and answers True."""
        if not keys:
            return []
        if not self.writer or _logical(self.mem_pool_host):
            return [True] * len(keys)
        return self._put_missing(self.scheme.keys(keys), self._pages(keys, host_indices), keys)

    def _put_missing(self, store_keys: List[str], pages: list, names: List[str]) -> List[bool]:
        """Puts the pages the store lacks, or holds at another size (one lookup, one put
        call); True where the page is stored at this size."""
        codes, places = self.store.batch_locate(store_keys)
        done = [c == 0 and place[2] == sum(n for _, n in page) for c, place, page in zip(codes, places, pages)]
        todo = [i for i, d in enumerate(done) if not d]
        if todo:
            t0 = time.perf_counter()
            put = self.store.batch_put([store_keys[i] for i in todo], [pages[i] for i in todo])
            for i, r in zip(todo, put):
                done[i] = r == 0
            self._account(
                True,
                [names[i] for i in todo],
                [pages[i] for i in todo],
                [done[i] for i in todo],
                time.perf_counter() - t0,
            )
        return done

    def batch_exists(self, keys: List[str], extra_info: Optional[HiCacheStorageExtraInfo] = None) -> int:
        """How many pages, from the first, the store has (one control exchange per node)."""
        if not keys:
            return 0
        return self.store.exists_prefix(self.scheme.keys(keys))

    def exists(self, key: str) -> bool:
        return self.batch_exists([key]) == 1

    # -- pool calls (v2: hybrid models' extra pools) -----------------------------
    def _pool(self, name: Any) -> Any:
        if _tag(name) == "kv":
            return self.mem_pool_host
        pools = getattr(self, "registered_pools", {})
        pool = pools.get(name, pools.get(str(name)))
        if pool is None:
            raise ValueError(f"kvfabric HiCache backend: pool {name} was never registered (register_mem_host_pool_v2)")
        return pool

    def _pool_keys(self, name: Any, hashes: List[str]) -> List[str]:
        """The KV pool's keys are v1's; another pool's part of a page is its own key, "@pool" after it."""
        keys = self.scheme.keys(hashes)
        return keys if _tag(name) == "kv" else [f"{k}@{_tag(name)}" for k in keys]

    def _transfer_pages(self, transfers: list) -> tuple[list, list, list]:
        """Every transfer's store keys and page buffers, in one list, with (transfer, page) of each."""
        keys, pages, owners = [], [], []
        for t, transfer in enumerate(transfers):
            hashes = list(transfer.keys or [])
            if not hashes:
                continue
            pool = self._pool(transfer.name)
            if _logical(pool):
                continue
            ptrs, sizes = pool.get_page_buffer_meta(transfer.host_indices)
            pages += page_buffers(ptrs, sizes, len(hashes))
            keys += self._pool_keys(transfer.name, hashes)
            owners += [(t, j) for j in range(len(hashes))]
        return keys, pages, owners

    def _unanswered(self, transfers: list) -> dict:
        return {t.name: [_logical(self._pool(t.name))] * len(t.keys or []) for t in transfers}

    def batch_exists_v2(
        self,
        keys: List[str],
        pool_transfers: Optional[list] = None,
        extra_info: Optional[HiCacheStorageExtraInfo] = None,
    ) -> Any:
        """The usable prefix across the KV pool and the extra pools, by each pool's hit policy
        (all_pages, trailing_pages), in one exists call for every pool's keys."""
        from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransferResult

        transfers = list(pool_transfers or [])
        n = len(keys)
        logical = _logical(self.mem_pool_host)  # no KV pages to ask for: its side pools decide
        asked = [] if logical else self.scheme.keys(keys)
        for transfer in transfers:
            asked += self._pool_keys(transfer.name, keys)
        present = self.store.batch_exists(asked) if asked and n else [False] * len(asked)
        kv = [True] * n if logical else present[:n]
        at = 0 if logical else n
        pools = []
        for transfer in transfers:
            pools.append(
                PoolPresence(
                    _tag(transfer.name), _tag(transfer.hit_policy), len(transfer.keys or []), present[at : at + n]
                )
            )
            at += n
        pages, hits, restorable = pool_hits(kv, pools)
        names = {_tag(t.name): t.name for t in transfers}
        names["kv"] = PoolName.KV
        return PoolTransferResult(pages, {names[k]: v for k, v in hits.items()}, restorable)

    def batch_get_v2(self, transfers: list, extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        """Reads each transfer's pages into its pool: per pool name, True where a page came back whole
        (always for a pool that holds no bytes)."""
        out = self._unanswered(transfers)
        keys, pages, owners = self._transfer_pages(transfers)
        if keys:
            t0 = time.perf_counter()
            got = self.store.batch_get(keys, pages)
            done = [r == sum(n for _, n in page) for r, page in zip(got, pages)]
            self._account(False, keys, pages, done, time.perf_counter() - t0)
            for (t, j), ok in zip(owners, done):
                out[transfers[t].name][j] = ok
        return out

    def batch_set_v2(self, transfers: list, extra_info: Optional[HiCacheStorageExtraInfo] = None) -> dict:
        """Stores each transfer's pages the store lacks: per pool name, True where a page is stored."""
        if not self.writer:
            return {transfer.name: [True] * len(transfer.keys or []) for transfer in transfers}
        out = self._unanswered(transfers)
        keys, pages, owners = self._transfer_pages(transfers)
        if keys:
            for (t, j), ok in zip(owners, self._put_missing(keys, pages, keys)):
                out[transfers[t].name][j] = ok
        return out

    # -- copying calls (SGLang without interface_v1) ----------------------------
    def _staging_area(self) -> tuple[int, int]:
        if self._staging is None:
            self._staging = bytearray(self.config.staging_bytes)
            self.engine.register(self._staging)
        return buffer_address(self._staging)[:2]

    @staticmethod
    def _host_span(t: Any, what: str) -> tuple[int, int]:
        addr, nbytes, loc = buffer_address(t)
        if loc.startswith("cuda"):
            raise ValueError(
                f"kvfabric HiCache backend: {what} is {loc} memory; the copying calls take host "
                "memory (use interface_v1 for zero-copy)"
            )
        return addr, nbytes

    def _chunks(self, sizes: List[int]):
        """Runs of indices whose sizes fit the staging buffer together (ValueError for one that never fits)."""
        return runs_within(
            sizes,
            self.config.staging_bytes,
            "kvfabric HiCache backend: a page of {size} bytes is larger than staging_bytes "
            "({capacity}); "
            "raise staging_bytes or use interface_v1",
        )

    def batch_get(
        self, keys: List[str], target_locations: Optional[Any] = None, target_sizes: Optional[Any] = None
    ) -> List[Any]:
        """Reads each page into its target tensor; per key the target, or None
        for a miss (or a page whose size is not the target's)."""
        if target_locations is None or len(target_locations) != len(keys):
            raise ValueError("kvfabric HiCache backend: batch_get needs one target tensor per key")
        spans = [self._host_span(t, f"the target of key {k!r}") for k, t in zip(keys, target_locations)]
        out: List[Any] = [None] * len(keys)
        store_keys = self.scheme.keys(keys)
        with self._staging_lock:
            base, _ = self._staging_area()
            for run in self._chunks([n for _, n in spans]):
                offs, at = [], base
                for i in run:
                    offs.append(at)
                    at += spans[i][1]
                got = self.store.batch_get(
                    [store_keys[i] for i in run], [[(o, spans[i][1])] for i, o in zip(run, offs)]
                )
                for i, o, r in zip(run, offs, got):
                    if r == spans[i][1]:
                        ctypes.memmove(spans[i][0], o, r)
                        out[i] = target_locations[i]
                    else:
                        self._count_failure(r)
        return out

    def get(self, key: str, target_location: Optional[Any] = None, target_sizes: Optional[Any] = None) -> Any:
        return self.batch_get([key], [target_location] if target_location is not None else None)[0]

    def batch_set(
        self,
        keys: List[str],
        values: Optional[Any] = None,
        target_locations: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        """Stores each value tensor's bytes under its key; True when all are stored."""
        if not self.writer:
            return True
        if values is None or len(values) != len(keys):
            raise ValueError("kvfabric HiCache backend: batch_set needs one value per key")
        spans = [self._host_span(v, f"the value of key {k!r}") for k, v in zip(keys, values)]
        store_keys = self.scheme.keys(keys)
        ok = True
        with self._staging_lock:
            base, _ = self._staging_area()
            for run in self._chunks([n for _, n in spans]):
                offs, at = [], base
                for i in run:
                    ctypes.memmove(at, spans[i][0], spans[i][1])
                    offs.append(at)
                    at += spans[i][1]
                put = self.store.batch_put(
                    [store_keys[i] for i in run], [[(o, spans[i][1])] for i, o in zip(run, offs)]
                )
                for r in put:
                    if r != 0:
                        ok = False
                        self._count_failure(r)
        return ok

    def set(
        self,
        key: str,
        value: Optional[Any] = None,
        target_location: Optional[Any] = None,
        target_sizes: Optional[Any] = None,
    ) -> bool:
        return self.batch_set([key], [value])

    # -- the rest -----------------------------------------------------------------
    def clear(self) -> None:
        """Removes every page of the store (of every member, as SGLang's other backends)."""
        n = self.store.remove_all()
        logger.info("kvfabric HiCache backend: clear removed %d pages", n)

    def get_stats(self):
        """SGLang's StorageMetrics since the last call: pages per call and GB/s
        per call, of gets (prefetch) and puts (backup); recorded only when
        SGLang's storage metrics are on."""
        m = _storage_metrics()
        with self._lock:
            kept, self._metrics = self._metrics, _Stats()
        m.prefetch_pgs.extend(kept.prefetch_pgs)
        m.backup_pgs.extend(kept.backup_pgs)
        m.prefetch_bandwidth.extend(kept.prefetch_bandwidth)
        m.backup_bandwidth.extend(kept.backup_bandwidth)
        return m

    def stats(self) -> dict:
        """kvfabric's own counters: the store's (hits, misses by reason, pool)
        and this backend's failed pages by error."""
        out = dict(self.store.stats())
        with self._lock:
            out.update({f"hicache_failed_{name}": n for name, n in self._failures.items()})
        return out

    def close(self) -> None:
        """Leaves the store and closes the engine (SGLang calls it on detach)."""
        store, self.store = getattr(self, "store", None), None
        if store is not None:
            store.close()
        engine = getattr(self, "engine", None)
        if engine is not None and not engine.closed:
            engine.close()

    # -- bookkeeping ----------------------------------------------------------------
    def _count_failure(self, code: int) -> None:
        # >= 0: a page of another size than its buffers; < 0: a negated status code
        name = "short_page" if code >= 0 else type(error_for(-code, "")).__name__
        with self._lock:
            self._failures[name] += 1

    def _account(self, put: bool, keys: List[str], pages: list, done: List[bool], seconds: float) -> None:
        """Counts the failed pages by error (one warning per call for failures other than
        misses), and records SGLang's metrics when they are on."""
        errors = {e.index: e for e in self.store.last_errors}
        failed = [i for i, ok in enumerate(done) if not ok]
        loud = []
        for i in failed:
            e = errors.get(i)
            self._count_failure(0 if e is None else -e.code)
            if e is not None and e.code != NotFoundError.code:
                loud.append(e)
        if loud:
            logger.warning(
                "kvfabric HiCache backend: %s of %d of %d pages failed (not misses), first: page %s: %s",
                "put" if put else "get",
                len(loud),
                len(keys),
                keys[loud[0].index],
                loud[0].message,
            )
        if self.metrics_on and keys:
            nbytes = sum(n for page in pages for _, n in page)
            with self._lock:
                if put:
                    self._metrics.backup_pgs.append(len(keys))
                    self._metrics.backup_bandwidth.append(nbytes / max(seconds, 1e-9) / 1e9)
                else:
                    self._metrics.prefetch_pgs.append(len(keys))
                    self._metrics.prefetch_bandwidth.append(nbytes / max(seconds, 1e-9) / 1e9)

    def __repr__(self) -> str:
        return f"HiCacheKvfabric({self.engine.name if getattr(self, 'engine', None) else 'closed'})"
