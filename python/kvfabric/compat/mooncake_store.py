"""A stand-in for Mooncake Store's Python API (``mooncake.store``) over kvfabric's store.

``MooncakeDistributedStore`` has the names, positional forms and integer
return codes of Mooncake's binding (``mooncake-integration/store/store_py.cpp``)
for the calls SGLang's HiCache and embedding stores and vLLM's store
connectors make (``../shared/reference/frameworks.md``): failures are
Mooncake's negative ``ErrorCode`` numbers, never exceptions, and a batch
answers per key, in order. Underneath is ``kvfabric.Store``: no master, the
key decides its node, and every page read into host memory is checked
against its checksum.

What differs from Mooncake (docs/python.md says it at length):

- There is no master: ``master_server_addr`` is accepted and ignored (one
  info line). The members come from the metadata backend (etcd, http) or,
  with ``P2PHANDSHAKE``, from ``KVF_STORE_MEMBERS`` (control addresses); a
  process that gives memory (``global_segment_size`` > 0) is a member itself.
- A put of a key that exists replaces its page (Mooncake keeps the first and
  answers 0 too); for keys that name their content the two are the same.
- ``ReplicateConfig`` is accepted and its fields kept, but each key has one
  copy, where placement puts it (no replicas, soft pins, preferred segments).
- Ranged session reads go straight to the pages (``kvfabric.Store.batch_locate``):
  the member keeps a page whole for ``KVF_STORE_READ_WINDOW_MS`` from the
  session's start (Mooncake's lease), and parts are not checksummed.
- ``setup_dummy`` (Mooncake's standalone mode) makes this process a store
  client with no pool, of ``KVF_STORE_MEMBERS`` or else the node at its
  ``server_address`` (a ``kvfabric store-node``).
- Ranged put sessions (``batch_put_session_start``, ``..._ranges``, ``..._end``,
  ``..._revoke``) gather a page's ranges in host memory this process registers
  and put it whole at the end: one copy more than Mooncake's, which writes the
  ranges into the page's replica.
"""

from __future__ import annotations

import enum
import mmap
import operator
import os
import threading
import time
from typing import Any, List, Optional, Sequence

from ..engine import Op, Request, TaskState
from ..errors import KvfabricError
from ..store import Store
from ..units import parse_bytes, runs_within
from .mooncake import TransferEngine, _log, split_local_name, start_engine

# Mooncake's ErrorCode values (mooncake-store/include/types.h).
INTERNAL_ERROR = -1
NO_AVAILABLE_HANDLE = -200
INVALID_PARAMS = -600
ILLEGAL_CLIENT = -601
OBJECT_NOT_FOUND = -704
OBJECT_ALREADY_EXISTS = -705
LEASE_EXPIRED = -707
TRANSFER_FAIL = -800
RPC_FAIL = -900
RPC_TIMEOUT = -901

# kvfabric status code (kvfabric/codes.h) -> Mooncake ErrorCode.
_CODES = {
    1: INVALID_PARAMS,  # InvalidArgument: bad key, unregistered or too small buffer
    2: OBJECT_NOT_FOUND,  # NotFound: a miss (absent, evicted, or did not verify)
    3: INVALID_PARAMS,  # OutOfRange
    4: NO_AVAILABLE_HANDLE,  # Busy: the pool is full of pages in use
    5: RPC_TIMEOUT,  # Timeout
    6: TRANSFER_FAIL,  # FabricError
    7: RPC_FAIL,  # NetworkError
    8: RPC_FAIL,  # ProtocolError
    9: NO_AVAILABLE_HANDLE,  # Unavailable: no member with a pool
    10: INTERNAL_ERROR,  # Internal
    11: ILLEGAL_CLIENT,  # PermissionDenied
    12: INVALID_PARAMS,  # Closed
}


def _mooncake_code(result: int) -> int:
    """A kvfabric per-key result (>= 0, or a negated status code) as Mooncake answers it."""
    return result if result >= 0 else _CODES.get(-result, INTERNAL_ERROR)


class SoftPinAction(enum.IntEnum):
    """Mooncake's soft-pin choice; kvfabric has no soft pins and keeps the value only."""

    PRESERVE = 0


class ObjectDataType(enum.IntEnum):
    """Mooncake's object classification (``ReplicateConfig.data_type``); kvfabric keeps the value only."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicateConfig:
    """Mooncake's put options, with its defaults. kvfabric keeps the fields (callers
    set and probe them) and stores one copy per key where placement puts it."""

    def __init__(self) -> None:
        self.replica_num = 1
        self.nof_replica_num = 0
        self.dfs_replica_num = 0
        self.soft_pin_action = SoftPinAction.PRESERVE
        self.soft_pin_ttl_ms: Optional[int] = None
        self.with_hard_pin = False
        self.preferred_segments: List[str] = []
        self.preferred_nof_segments: List[str] = []
        self.preferred_segment = ""
        self.prefer_alloc_in_same_node = False
        self.data_type = ObjectDataType.UNKNOWN
        self.group_ids: Optional[List[int]] = None

    def __str__(self) -> str:
        return (f"ReplicateConfig(replica_num={self.replica_num}, with_hard_pin={self.with_hard_pin}, "
                f"preferred_segment={self.preferred_segment!r})")


class ReplicaDescriptor:
    """One copy of a key's page, as Mooncake's ``batch_get_replica_desc`` describes it;
    kvfabric's is always in a member's memory."""

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ReplicaDescriptor(memory)"


class MooncakeHostMemAllocator:
    """Page-aligned host memory, as Mooncake's allocator hands it out (an int address)."""

    def __init__(self) -> None:
        self._maps: dict[int, mmap.mmap] = {}
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int:
        if not isinstance(size, int) or size <= 0:
            raise RuntimeError(f"MooncakeHostMemAllocator.alloc: {size!r} is not a positive size")
        try:
            m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        except OSError as e:
            raise RuntimeError(f"MooncakeHostMemAllocator.alloc({size}): {e}") from e
        from .. import _core

        addr = _core.buffer_info(m)[0]
        with self._lock:
            self._maps[addr] = m
        return addr

    def free(self, ptr: int) -> int:
        with self._lock:
            m = self._maps.pop(ptr, None)
        if m is None:
            return -1
        try:
            m.close()
        except BufferError:  # still exported (registered): keep it mapped rather than crash
            with self._lock:
                self._maps[ptr] = m
            return -1
        return 0


def _ranges_fit(ptrs: Sequence[int], sizes: Sequence[int], offsets: Sequence[int], length: int) -> bool:
    """Whether the ranges (a pointer, a size and an offset each) are well formed and all
    inside a page of ``length`` bytes."""
    return len(ptrs) == len(sizes) == len(offsets) and all(
        o >= 0 and n > 0 and o + n <= length for o, n in zip(offsets, sizes))


class _PutArena:
    """The host memory of one batch_put_session_start: registered with the engine,
    its keys' ranges written into it, unregistered when its last key ends."""

    def __init__(self, engine, nbytes: int, keys: int) -> None:
        from .. import _core

        self._buffer = bytearray(nbytes)
        self.address = _core.buffer_info(self._buffer)[0]
        engine.register(self.address, nbytes)
        self._open = keys

    def release(self, engine) -> None:
        self._open -= 1
        if self._open == 0 and engine is not None:
            try:
                engine.unregister(self.address)
            except KvfabricError as e:
                _log("warning", f"put session memory at {self.address:#x}: {e}")


class MooncakeDistributedStore:
    """Mooncake's ``MooncakeDistributedStore`` over ``kvfabric.Store``."""

    def __init__(self) -> None:
        self._te: Optional[TransferEngine] = None
        self._kv_engine = None  # the kvfabric Engine underneath (the caller's, or ours when _own_engine)
        self._own_engine = False
        self._store: Optional[Store] = None
        self._buffer: Optional[bytearray] = None  # the local buffer put/get of bytes go through, made at first use
        self._buffer_bytes = 0  # its size (setup's local_buffer_size)
        self._buffer_lock = threading.Lock()  # the local buffer, and the sessions
        self._sessions: dict = {}  # key -> ((segment, address, length), expires): ranged-read sessions
        self._puts: dict = {}  # key -> (_PutArena, offset, size): ranged-write sessions

    # -- set-up -----------------------------------------------------------
    def setup(self, local_hostname: Any, metadata_server: str = "", global_segment_size: Any = 0,
              local_buffer_size: Any = 0, protocol: str = "tcp", rdma_devices: str = "",
              master_server_addr: str = "", engine: Any = None, **options: Any) -> int:
        """Joins the store: this process gives ``global_segment_size`` bytes of pool
        (0: a client only). Also takes Mooncake's dict form, ``setup({...})``.
        Sizes are byte counts or strings as Mooncake writes them ("16MB", "4 GB":
        powers of 1024; "16MiB" too). 0 on success, a negative ErrorCode otherwise
        (an invalid size is INVALID_PARAMS, never an exception)."""
        if isinstance(local_hostname, dict):
            cfg = dict(local_hostname)
            if not cfg.get("local_hostname") or not cfg.get("metadata_server"):
                _log("error", "setup: the config needs local_hostname and metadata_server")
                return INVALID_PARAMS
            return self.setup(cfg.pop("local_hostname"), cfg.pop("metadata_server"),
                              cfg.pop("global_segment_size", 16 << 20), cfg.pop("local_buffer_size", 16 << 20),
                              cfg.pop("protocol", "tcp"), cfg.pop("rdma_devices", cfg.pop("device_name", "")),
                              cfg.pop("master_server_address", cfg.pop("master_server_addr", "")), **cfg)
        if self._store is not None:
            _log("error", "setup: this store is set up already")
            return INVALID_PARAMS
        try:
            pool = parse_bytes(global_segment_size or 0, "global_segment_size")
            buffer_bytes = parse_bytes(local_buffer_size or 0, "local_buffer_size")
        except (ValueError, TypeError) as e:
            _log("error", f"setup: {e}")
            return INVALID_PARAMS
        if master_server_addr:
            _log("info", f"setup: master_server_addr {master_server_addr} ignored: kvfabric's store has no master "
                         "(members come from the metadata backend, or KVF_STORE_MEMBERS with P2PHANDSHAKE)")
        ignored = sorted(k for k, v in options.items() if v not in (None, False, "", "default", 0))
        if ignored:
            _log("info", f"setup: {', '.join(ignored)} accepted and ignored (no tenants, SSD offload or HTTP server)")
        try:
            if engine is not None:
                te = engine if isinstance(engine, TransferEngine) else None
                kv_engine = te.get_engine() if te is not None else engine
                if kv_engine is None:
                    raise ValueError("the engine given is not initialized")
            else:
                te = TransferEngine()
                if te.initialize(local_hostname, metadata_server, protocol, rdma_devices or "") != 0:
                    return INVALID_PARAMS  # initialize logged why
                kv_engine = te.get_engine()
                self._own_engine = True
            self._te, self._kv_engine = te, kv_engine
            self._buffer_bytes = buffer_bytes
            self._store = Store(kv_engine, pool_bytes=pool)
            return 0
        except (KvfabricError, ValueError, TypeError, OSError) as e:
            _log("error", f"setup: {e}")
            self.close()
            return INVALID_PARAMS

    def setup_dummy(self, mem_pool_size: int, local_buffer_size: int, server_address: str) -> int:
        """Mooncake's standalone mode: this process gives no memory and reaches the store
        through a process that does (Mooncake's ``mooncake_client`` at ``server_address``;
        here a ``kvfabric store-node`` listening there). kvfabric has no dummy client:
        this process is a store client of its own, over the members of
        ``KVF_STORE_MEMBERS`` when set, else of the node at ``server_address`` alone.
        ``mem_pool_size`` (the memory Mooncake shares with its real client) is not
        needed. 0; -900 when no member answers; -600 for bad arguments."""
        if self._store is not None:
            _log("error", "setup_dummy: this store is set up already")
            return INVALID_PARAMS
        try:
            host, _ = split_local_name(str(server_address))
        except ValueError as e:
            _log("error", f"setup_dummy: server_address {server_address!r}: {e}")
            return INVALID_PARAMS
        members = os.environ.get("KVF_STORE_MEMBERS") or str(server_address)
        _log("info", f"setup_dummy: a store client (no pool) of {members}"
                     + ("" if os.environ.get("KVF_STORE_MEMBERS") else " (KVF_STORE_MEMBERS names them all)"))
        try:
            engine, _ = start_engine(host, "P2PHANDSHAKE", "auto")
        except (KvfabricError, ValueError, OSError) as e:
            _log("error", f"setup_dummy: {e}")
            return INVALID_PARAMS
        self._te, self._kv_engine, self._own_engine = None, engine, True
        try:
            self._buffer_bytes = parse_bytes(local_buffer_size or 0, "local_buffer_size")
            self._store = Store(engine, members=members)
            if not self._store.members():
                _log("error", f"setup_dummy: no store node answers at {members} (start one: kvfabric store-node "
                              f"--listen {server_address} --members ...)")
                self.close()
                return RPC_FAIL
            return 0
        except (KvfabricError, ValueError, TypeError, OSError) as e:
            _log("error", f"setup_dummy: {e}")
            self.close()
            return INVALID_PARAMS

    def close(self) -> int:
        self._close_puts(list(self._puts))  # their memory unregistered while the engine is open
        store, self._store = self._store, None
        if store is not None:
            store.close()
        engine, self._kv_engine, self._te = self._kv_engine, None, None
        if self._buffer is not None and engine is not None and not engine.closed:
            try:
                engine.unregister(self._buffer)
            except KvfabricError:
                pass
        self._buffer, self._buffer_bytes = None, 0
        if engine is not None and self._own_engine:
            engine.close()
        self._own_engine = False
        return 0

    def _engine(self):
        return self._store._engine if self._store is not None else None

    # -- memory -------------------------------------------------------------
    def register_buffer(self, buffer_ptr: int, size: int) -> int:
        if self._store is None:
            return INVALID_PARAMS
        try:
            self._engine().register(int(buffer_ptr), int(size))
            return 0
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"register_buffer({buffer_ptr:#x}, {size}): {e}")
            return INVALID_PARAMS

    def unregister_buffer(self, buffer_ptr: int, size: Optional[int] = None) -> int:
        if self._store is None:
            return INVALID_PARAMS
        try:
            self._engine().unregister(int(buffer_ptr))
            return 0
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"unregister_buffer({buffer_ptr:#x}): {e}")
            return INVALID_PARAMS

    # -- batches ------------------------------------------------------------
    def _batch(self, put: bool, keys: Sequence[Any], ptrs: Sequence[Sequence[int]],
               sizes: Sequence[Sequence[int]]) -> List[int]:
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        if len(ptrs) != len(keys) or len(sizes) != len(keys) or any(len(p) != len(s) for p, s in zip(ptrs, sizes)):
            _log("error", f"{'put' if put else 'get'}: {len(keys)} keys, {len(ptrs)} pointer and {len(sizes)} size lists")
            return [INVALID_PARAMS] * len(keys)
        try:
            names = [k.decode() if isinstance(k, bytes) else str(k) for k in keys]
            addrs = [[int(p) for p in row] for row in ptrs]
            lengths = [[int(n) for n in row] for row in sizes]
            core = self._store._core
            got = core.batch_put(names, addrs, lengths) if put else core.batch_get(names, addrs, lengths)
            codes = self._store._results(names, got)
        except (KvfabricError, ValueError, TypeError, OverflowError) as e:
            _log("error", f"{'put' if put else 'get'}: {e}")
            return [INVALID_PARAMS] * len(keys)
        return [0 if put and c >= 0 else _mooncake_code(c) for c in codes]

    def batch_put_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int],
                       config: Optional[ReplicateConfig] = None) -> List[int]:
        """Per key: 0, or a negative ErrorCode."""
        return self._batch(True, keys, [[p] for p in buffer_ptrs], [[n] for n in sizes])

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        """Per key: the bytes read, or a negative ErrorCode (-704: a miss)."""
        return self._batch(False, keys, [[p] for p in buffer_ptrs], [[n] for n in sizes])

    def batch_put_from_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     config: Optional[ReplicateConfig] = None) -> List[int]:
        """A key is its buffers' bytes in order (per-layer k and v). Per key: 0 or negative;
        [] before setup, as Mooncake answers."""
        if self._store is None:
            return []
        return self._batch(True, keys, all_buffer_ptrs, all_sizes)

    def batch_get_into_multi_buffers(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                     all_sizes: Sequence[Sequence[int]],
                                     prefer_alloc_in_same_node: bool = False) -> List[int]:
        """Per key: the page's bytes, spread over its buffers in order, or negative."""
        return self._batch(False, keys, all_buffer_ptrs, all_sizes)

    def batch_is_exist(self, keys: Sequence[str]) -> List[int]:
        """Per key: 1 (has a page) or 0; a negative ErrorCode when the call failed."""
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        if not keys:
            return []
        try:
            return [1 if found else 0 for found in self._store.batch_exists(list(keys))]
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"batch_is_exist: {e}")
            return [INVALID_PARAMS] * len(keys)

    # -- ranged reads in a session (layer-wise loads) -------------------------
    def batch_get_session_start(self, keys: Sequence[str]) -> List[int]:
        """Looks the keys' pages up once; the ranged reads then go straight to them.
        Per key 0, or a negative ErrorCode (-704: no page). The pages stay whole for
        KVF_STORE_READ_WINDOW_MS from here (Mooncake's lease); later reads fail with -707."""
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        try:
            codes, pages = self._store.batch_locate(list(keys))
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"batch_get_session_start: {e}")
            return [INVALID_PARAMS] * len(keys)
        started = time.monotonic()
        with self._buffer_lock:
            for key, code, (segment, addr, length, valid_ms) in zip(keys, codes, pages):
                # A little inside the member's window: the last READ must end within it.
                if code == 0:
                    self._sessions[key] = ((segment, addr, length), started + 0.9 * valid_ms / 1000)
        return [_mooncake_code(c) for c in codes]

    def batch_get_into_multi_buffer_ranges(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_src_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Reads byte ranges of each key's page (offsets into the page) into its buffers, in one
        engine batch. Per key the bytes read, or a negative ErrorCode."""
        n = len(keys)
        if self._store is None or not (len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets) == n):
            return [INVALID_PARAMS] * n
        out = [0] * n
        requests, owner = [], []
        now = time.monotonic()
        with self._buffer_lock:
            sessions = [self._sessions.get(k) for k in keys]
        for i, (session, ptrs, sizes, offs) in enumerate(zip(sessions, all_buffer_ptrs, all_sizes, all_src_offsets)):
            if session is None:
                out[i] = OBJECT_NOT_FOUND  # no session for it (never started, or its page missed)
                continue
            (segment, addr, length), expires = session
            if now >= expires:
                out[i] = LEASE_EXPIRED
            elif not _ranges_fit(ptrs, sizes, offs, length):
                out[i] = INVALID_PARAMS
            else:
                for p, n_, o in zip(ptrs, sizes, offs):
                    requests.append(Request(Op.READ, int(p), addr + int(o), int(n_), segment))
                    owner.append(i)
                out[i] = sum(int(x) for x in sizes)
        if requests:
            wait = max(0.0, max(sessions[i][1] for i in owner) - time.monotonic())
            self._run_ranges("batch_get_into_multi_buffer_ranges", requests, owner, wait, out)
        return out

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        """Forgets the sessions of the keys: 0."""
        with self._buffer_lock:
            for k in keys:
                self._sessions.pop(k, None)
        return 0

    # -- ranged writes in a session (layer-wise saves) -----------------------
    def batch_put_session_start(self, keys: Sequence[str], sizes: Sequence[int],
                                config: Optional[ReplicateConfig] = None) -> List[int]:
        """Opens a page of ``size`` bytes per key, written in ranges (a layer at a time)
        and put whole at batch_put_session_end. The ranges gather in host memory this
        process registers (one piece per call, freed when its last key ends), so pages
        of GPU memory are copied by the engine. Per key 0, -600 for a bad size or
        -705 for a key whose session is already open."""
        n = len(keys)
        if self._store is None:
            return [INVALID_PARAMS] * n
        if len(sizes) != n:
            return [INVALID_PARAMS] * n
        out = [0] * n
        with self._buffer_lock:
            opening = {}
            for i, (key, size) in enumerate(zip(keys, sizes)):
                try:
                    size = operator.index(size)
                except TypeError:
                    size = 0
                if key in self._puts or key in opening:
                    out[i] = OBJECT_ALREADY_EXISTS
                elif size <= 0:
                    out[i] = INVALID_PARAMS
                else:
                    opening[key] = size
            if not opening:
                return out
            try:
                arena = _PutArena(self._engine(), sum(opening.values()), len(opening))
            except (KvfabricError, ValueError, MemoryError) as e:
                _log("error", f"batch_put_session_start: {e}")
                return [INVALID_PARAMS if key in opening else c for key, c in zip(keys, out)]
            offset = 0
            for key, size in opening.items():
                self._puts[key] = (arena, offset, size)
                offset += size
        return out

    def batch_put_from_multi_buffer_ranges(self, keys: Sequence[str], all_buffer_ptrs: Sequence[Sequence[int]],
                                           all_sizes: Sequence[Sequence[int]],
                                           all_dst_offsets: Sequence[Sequence[int]]) -> List[int]:
        """Writes byte ranges of each key's open page (offsets into the page) from
        registered buffers, host or GPU, in one engine batch. Per key 0, or a negative
        ErrorCode (-704: no session open for it; -600: a range outside its page)."""
        n = len(keys)
        if self._store is None or not (len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets) == n):
            return [INVALID_PARAMS] * n
        out = [0] * n
        requests, owner = [], []
        with self._buffer_lock:
            sessions = [self._puts.get(k) for k in keys]
        for i, (session, ptrs, sizes, offs) in enumerate(zip(sessions, all_buffer_ptrs, all_sizes, all_dst_offsets)):
            if session is None:
                out[i] = OBJECT_NOT_FOUND
                continue
            arena, offset, size = session
            if not _ranges_fit(ptrs, sizes, offs, size):
                out[i] = INVALID_PARAMS
                continue
            for p, n_, o in zip(ptrs, sizes, offs):
                requests.append(Request(Op.WRITE, int(p), arena.address + offset + int(o), int(n_),
                                        self._engine().name))
                owner.append(i)
        if requests:
            self._run_ranges("batch_put_from_multi_buffer_ranges", requests, owner, None, out)
        return out

    def _run_ranges(self, call: str, requests: list, owner: List[int], timeout: Optional[float],
                    out: List[int]) -> None:
        """Runs the ranged requests in one engine batch (within ``timeout`` seconds, None:
        the engine's own); a key (``owner`` per request) with a request that failed gets
        -800 in ``out``, every key -600 when the engine refused the batch (an
        unregistered buffer)."""
        try:
            transfer = self._engine().submit(requests)
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"{call}: {e}")
            for i in owner:
                out[i] = INVALID_PARAMS
            return
        try:
            transfer.wait(timeout)
        except KvfabricError:
            pass  # which requests failed is read below
        for t, i in enumerate(owner):
            if transfer.task_status(t).state != TaskState.COMPLETED:
                out[i] = TRANSFER_FAIL

    def batch_put_session_end(self, keys: Sequence[str]) -> List[int]:
        """Puts each open page whole, as batch_put_from would, and closes its session.
        Per key 0, or a negative ErrorCode (-704: no session open for it)."""
        n = len(keys)
        if self._store is None:
            return [INVALID_PARAMS] * n
        with self._buffer_lock:
            sessions = [self._puts.get(k) for k in keys]
        ending = [i for i, s in enumerate(sessions) if s is not None]
        out = [OBJECT_NOT_FOUND] * n
        if ending:
            codes = self._batch(True, [keys[i] for i in ending],
                                [[sessions[i][0].address + sessions[i][1]] for i in ending],
                                [[sessions[i][2]] for i in ending])
            for i, code in zip(ending, codes):
                out[i] = code
        self._close_puts([keys[i] for i in ending])
        return out

    def batch_put_session_revoke(self, keys: Sequence[str]) -> List[int]:
        """Closes the sessions of the keys, putting nothing. Per key 0, or -704 when none was open."""
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        with self._buffer_lock:
            out = [0 if k in self._puts else OBJECT_NOT_FOUND for k in keys]
        self._close_puts(keys)
        return out

    def _close_puts(self, keys: Sequence[str]) -> None:
        with self._buffer_lock:
            for k in keys:
                session = self._puts.pop(k, None)
                if session is not None:
                    session[0].release(self._engine())

    # -- one key ------------------------------------------------------------
    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        if self._store is None:
            return INVALID_PARAMS
        if size == 0:
            return 0  # Mooncake stores nothing and answers 0
        return self.batch_put_from([key], [buffer_ptr], [size])[0]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        if self._store is None:
            return INVALID_PARAMS
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    def _local(self, call: str) -> Optional[bytearray]:
        """The local buffer, made and registered at its first use (a 4 GiB default
        costs nothing until then); None, logged, when there is none. _buffer_lock held."""
        if self._store is None:
            return None
        if self._buffer is None:
            if not self._buffer_bytes:
                _log("error", f"{call}: no local buffer (setup's local_buffer_size was 0)")
                return None
            try:
                buffer = bytearray(self._buffer_bytes)
                self._engine().register(buffer)
            except (KvfabricError, MemoryError) as e:
                _log("error", f"{call}: the local buffer of {self._buffer_bytes} bytes: {e}")
                return None
            self._buffer = buffer
        return self._buffer

    def put(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Stores the bytes of ``value`` (any buffer), copied through the local buffer."""
        data = memoryview(value).cast("B")
        with self._buffer_lock:
            buffer = self._local("put")
            if buffer is None:
                return INVALID_PARAMS
            if data.nbytes == 0 or data.nbytes > len(buffer):
                _log("error", f"put: {data.nbytes} bytes; the local buffer holds 1 to {len(buffer)}")
                return INVALID_PARAMS
            buffer[:data.nbytes] = data
            return self._batch(True, [key], [[self._buffer_address()]], [[data.nbytes]])[0]

    def get(self, key: str) -> bytes:
        """The page's bytes, or b"" for a miss or any failure (as Mooncake answers)."""
        with self._buffer_lock:
            buffer = self._local("get")
            if buffer is None:
                return b""
            n = self._batch(False, [key], [[self._buffer_address()]], [[len(buffer)]])[0]
            return bytes(buffer[:n]) if n > 0 else b""

    def _runs(self, sizes: Sequence[int]):
        """Runs of indices whose sizes fit the local buffer together (ValueError for one that never fits)."""
        return runs_within(sizes, self._buffer_bytes,
                           "a value of {size} bytes; the local buffer holds {capacity} (setup's local_buffer_size)")

    def put_batch(self, keys: Sequence[str], values: Sequence[Any], config: Optional[ReplicateConfig] = None) -> int:
        """Stores each value's bytes (any buffer) under its key, copied through the local
        buffer: 0 when every key is stored, else the first failure's ErrorCode."""
        if self._store is None:
            return INVALID_PARAMS
        if len(values) != len(keys):
            _log("error", f"put_batch: {len(keys)} keys but {len(values)} values")
            return INVALID_PARAMS
        try:
            data = [memoryview(v).cast("B") for v in values]
            with self._buffer_lock:
                if self._local("put_batch") is None:
                    return INVALID_PARAMS
                base = self._buffer_address()
                for run in self._runs([d.nbytes for d in data]):
                    ptrs, at = [], 0
                    for i in run:
                        self._buffer[at:at + data[i].nbytes] = data[i]
                        ptrs.append([base + at])
                        at += data[i].nbytes
                    got = self._batch(True, [keys[i] for i in run], ptrs, [[data[i].nbytes] for i in run])
                    failed = [c for c in got if c != 0]
                    if failed:
                        return failed[0]
            return 0
        except (ValueError, TypeError) as e:
            _log("error", f"put_batch: {e}")
            return INVALID_PARAMS

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        """Each key's bytes, b"" for a miss or a failure (as Mooncake answers), read
        through the local buffer."""
        if self._store is None:
            return [b""] * len(keys)
        out = [b""] * len(keys)
        try:
            names = [k.decode() if isinstance(k, bytes) else str(k) for k in keys]
            codes, pages = self._store.batch_locate(names)
            present = [i for i, c in enumerate(codes) if c == 0 and 0 < pages[i][2] <= self._buffer_bytes]
            with self._buffer_lock:
                if self._local("get_batch") is None:
                    return out
                base = self._buffer_address()
                for run in self._runs([pages[i][2] for i in present]):
                    run = [present[j] for j in run]
                    ptrs, at = [], 0
                    for i in run:
                        ptrs.append([base + at])
                        at += pages[i][2]
                    got = self._batch(False, [names[i] for i in run], ptrs, [[pages[i][2]] for i in run])
                    for i, p, n in zip(run, ptrs, got):
                        if n > 0:
                            start = p[0] - base
                            out[i] = bytes(self._buffer[start:start + n])
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"get_batch: {e}")
        return out

    def get_size(self, key: str) -> int:
        """The key's page size in bytes, or a negative ErrorCode (-704: no such key)."""
        if self._store is None:
            return INVALID_PARAMS
        try:
            codes, pages = self._store.batch_locate([key])
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"get_size: {e}")
            return INVALID_PARAMS
        return pages[0][2] if codes[0] == 0 else _mooncake_code(codes[0])

    def batch_get_replica_desc(self, keys: Sequence[str]) -> dict:
        """Per key, its replicas as Mooncake describes them: one memory replica where a
        page is, none where not (kvfabric keeps one copy, in memory)."""
        if self._store is None or not keys:
            return {k: [] for k in keys}
        try:
            found = self._store.batch_exists(list(keys))
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"batch_get_replica_desc: {e}")
            found = [False] * len(keys)
        return {k: ([ReplicaDescriptor()] if f else []) for k, f in zip(keys, found)}

    def _buffer_address(self) -> int:
        from .. import _core

        return _core.buffer_info(self._buffer)[0]

    def is_exist(self, key: str) -> int:
        """1 when the key has a page, 0 when not, a negative ErrorCode on failure."""
        return self.batch_is_exist([key])[0]

    def remove(self, key: str, force: bool = False) -> int:
        """0 (removed), -704 (no such key), or a negative ErrorCode."""
        if self._store is None:
            return INVALID_PARAMS
        try:
            return _mooncake_code(self._store.batch_remove([key])[0])
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"remove: {e}")
            return INVALID_PARAMS

    def remove_all(self, force: bool = False) -> int:
        """How many pages were removed, or a negative ErrorCode."""
        if self._store is None:
            return INVALID_PARAMS
        try:
            return self._store.remove_all()
        except KvfabricError as e:
            _log("error", f"remove_all: {e}")
            return RPC_FAIL

    def get_hostname(self) -> str:
        """This process's engine address (host:port)."""
        engine = self._engine()
        return engine.name if engine is not None else ""

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release to
            pass


__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "SoftPinAction", "ObjectDataType",
           "MooncakeHostMemAllocator", "ReplicaDescriptor"]
