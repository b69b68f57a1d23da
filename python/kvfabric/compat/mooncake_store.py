"""A stand-in for Mooncake Store's Python API (``mooncake.store``) over kvfabric's store.

``MooncakeDistributedStore`` has the names, positional forms and integer
return codes of Mooncake's binding (``mooncake-integration/store/store_py.cpp``)
for the calls SGLang's HiCache and embedding stores, vLLM's store connectors
and LMCache's connector make (``../shared/reference/frameworks.md``), and the
tensor calls: failures are Mooncake's negative ``ErrorCode`` numbers, not
exceptions (except where Mooncake's binding raises too), and a batch answers
per key, in order. The class is this facade (set-up, memory, zero-copy
batches, keys) over mixins by role: ``mooncake_bytes`` (values through the
local buffer), ``mooncake_ranges`` (parts of pages), ``mooncake_tensor``
(torch tensors in Mooncake's layout); ``mooncake_types`` holds the codes
and option types. Underneath is ``kvfabric.Store``: no master, the
key decides its node, and every page read into host memory is checked
against its checksum.

What differs from Mooncake (docs/python.md says it at length):

- There is no master: ``master_server_addr`` is accepted and ignored (one
  info line). The members come from the metadata backend (etcd, http) or,
  with ``P2PHANDSHAKE``, from ``KVF_STORE_MEMBERS`` (control addresses); a
  process that gives memory (``global_segment_size`` > 0) is a member itself.
- A put of a key that exists replaces its page (Mooncake keeps the first and
  answers 0 too); for keys that name their content the two are the same.
- ``ReplicateConfig.replica_num`` copies go on the members placement ranks
  first for the key (at most KVF_STORE_MAX_COPIES, the same on every
  process); soft pins and preferred segments are type-checked and kept, not
  acted on. An upsert is a put.
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

import os
import threading
from typing import Any, List, Optional, Sequence

from ..errors import KvfabricError
from ..store import Store
from ..units import parse_bytes
from .mooncake import STORE_CLIENT_PORTS, TransferEngine, _log, split_local_name, start_engine
from .mooncake_bytes import LocalBufferCalls
from .mooncake_ranges import RangedCalls
from .mooncake_tensor import TensorCalls, deserialize_tensor, serialize_tensor, tensor_metadata_size
from .mooncake_types import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    LEASE_EXPIRED,
    NO_AVAILABLE_HANDLE,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    RPC_FAIL,
    RPC_TIMEOUT,
    TRANSFER_FAIL,
    BufferHandle,
    HostMemory,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicaDescriptor,
    ReplicateConfig,
    SoftPinAction,
    config_refused,
    copies_asked,
    mooncake_code,
)


class MooncakeDistributedStore(LocalBufferCalls, RangedCalls, TensorCalls):
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
        self._pool_memory = HostMemory()  # what alloc_from_mem_pool handed out

    # -- set-up -----------------------------------------------------------
    def setup(
        self,
        local_hostname: Any,
        metadata_server: str = "",
        global_segment_size: Any = 0,
        local_buffer_size: Any = 0,
        protocol: str = "tcp",
        rdma_devices: str = "",
        master_server_addr: str = "",
        engine: Any = None,
        enable_ssd_offload: bool = False,
        ssd_offload_path: str = "",
        tenant_id: str = "default",
        enable_client_http_server: bool = False,
        client_http_port: Any = None,
        **options: Any,
    ) -> int:
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
            return self.setup(
                cfg.pop("local_hostname"),
                cfg.pop("metadata_server"),
                cfg.pop("global_segment_size", 16 << 20),
                cfg.pop("local_buffer_size", 16 << 20),
                cfg.pop("protocol", "tcp"),
                cfg.pop("rdma_devices", cfg.pop("device_name", "")),
                cfg.pop("master_server_address", cfg.pop("master_server_addr", "")),
                **cfg,
            )
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
            _log(
                "info",
                f"setup: master_server_addr {master_server_addr} ignored: kvfabric's store has no master "
                "(members come from the metadata backend, or KVF_STORE_MEMBERS with P2PHANDSHAKE)",
            )
        options.update(
            enable_ssd_offload=enable_ssd_offload,
            ssd_offload_path=ssd_offload_path,
            tenant_id=tenant_id,
            enable_client_http_server=enable_client_http_server,
        )
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
                te.ports = STORE_CLIENT_PORTS  # a store client's port, as Mooncake's setup takes one
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
        _log(
            "info",
            f"setup_dummy: a store client (no pool) of {members}"
            + ("" if os.environ.get("KVF_STORE_MEMBERS") else " (KVF_STORE_MEMBERS names them all)"),
        )
        try:
            engine, _ = start_engine(host, "P2PHANDSHAKE", "auto", ports=STORE_CLIENT_PORTS)
        except (KvfabricError, ValueError, OSError) as e:
            _log("error", f"setup_dummy: {e}")
            return INVALID_PARAMS
        self._te, self._kv_engine, self._own_engine = None, engine, True
        try:
            self._buffer_bytes = parse_bytes(local_buffer_size or 0, "local_buffer_size")
            self._store = Store(engine, members=members)
            if not self._store.members():
                _log(
                    "error",
                    f"setup_dummy: no store node answers at {members} (start one: kvfabric store-node "
                    f"--listen {server_address} --members ...)",
                )
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
        for addr in self._pool_memory.addresses():
            if engine is not None and not engine.closed:
                try:
                    engine.unregister(addr)
                except KvfabricError:
                    pass
            self._pool_memory.free(addr)
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
        if self._pool_memory.holds(int(buffer_ptr), int(size)):
            return 0  # alloc_from_mem_pool registered it already
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
    def _batch(
        self,
        put: bool,
        keys: Sequence[Any],
        ptrs: Sequence[Sequence[int]],
        sizes: Sequence[Sequence[int]],
        copies: int = 1,
    ) -> List[int]:
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        if len(ptrs) != len(keys) or len(sizes) != len(keys) or any(len(p) != len(s) for p, s in zip(ptrs, sizes)):
            _log(
                "error", f"{'put' if put else 'get'}: {len(keys)} keys, {len(ptrs)} pointer and {len(sizes)} size lists"
            )
            return [INVALID_PARAMS] * len(keys)
        try:
            names = [k.decode() if isinstance(k, bytes) else str(k) for k in keys]
            addrs = [[int(p) for p in row] for row in ptrs]
            lengths = [[int(n) for n in row] for row in sizes]
            core = self._store._core
            got = core.batch_put(names, addrs, lengths, copies) if put else core.batch_get(names, addrs, lengths)
            codes = self._store._results(names, got)
        except (KvfabricError, ValueError, TypeError, OverflowError) as e:
            _log("error", f"{'put' if put else 'get'}: {e}")
            return [INVALID_PARAMS] * len(keys)
        return [0 if put and c >= 0 else mooncake_code(c) for c in codes]

    def _put_from(
        self,
        call: str,
        keys: Sequence[Any],
        ptrs: Sequence[Sequence[int]],
        sizes: Sequence[Sequence[int]],
        config: Optional[ReplicateConfig],
    ) -> List[int]:
        why = config_refused(config)
        if why is not None:
            _log("error", f"{call}: {why}")
            return [INVALID_PARAMS] * len(keys)
        return self._batch(True, keys, ptrs, sizes, copies_asked(config))

    def batch_put_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """Per key: 0, or a negative ErrorCode."""
        return self._put_from("batch_put_from", keys, [[p] for p in buffer_ptrs], [[n] for n in sizes], config)

    # An upsert inserts or replaces; kvfabric's put replaces already, so the two are one.
    def batch_upsert_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """batch_put_from, which replaces pages that exist."""
        return self.batch_put_from(keys, buffer_ptrs, sizes, config)

    def upsert_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        """put_from, which replaces a page that exists."""
        return self.put_from(key, buffer_ptr, size, config)

    def batch_get_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        """Per key: the bytes read, or a negative ErrorCode (-704: a miss)."""
        return self._batch(False, keys, [[p] for p in buffer_ptrs], [[n] for n in sizes])

    def batch_put_from_multi_buffers(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        config: Optional[ReplicateConfig] = None,
    ) -> List[int]:
        """A key is its buffers' bytes in order (per-layer k and v). Per key: 0 or negative;
        [] before setup, as Mooncake answers."""
        if self._store is None:
            return []
        return self._put_from("batch_put_from_multi_buffers", keys, all_buffer_ptrs, all_sizes, config)

    def batch_get_into_multi_buffers(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        prefer_alloc_in_same_node: bool = False,
    ) -> List[int]:
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

    # -- one key ------------------------------------------------------------
    def put_from(self, key: str, buffer_ptr: int, size: int, config: Optional[ReplicateConfig] = None) -> int:
        if self._store is None:
            return INVALID_PARAMS
        if size == 0:
            return 0  # Mooncake stores nothing and answers 0
        return self.batch_put_from([key], [buffer_ptr], [size], config)[0]

    def get_into(self, key: str, buffer_ptr: int, size: int) -> int:
        if self._store is None:
            return INVALID_PARAMS
        return self.batch_get_into([key], [buffer_ptr], [size])[0]

    def get_size(self, key: str) -> int:
        """The key's page size in bytes, or a negative ErrorCode (-704: no such key)."""
        if self._store is None:
            return INVALID_PARAMS
        try:
            codes, pages = self._store.batch_locate([key])
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"get_size: {e}")
            return INVALID_PARAMS
        return pages[0][2] if codes[0] == 0 else mooncake_code(codes[0])

    def get_replica_desc(self, key: str) -> list:
        """The key's replicas as Mooncake describes them (batch_get_replica_desc of one key)."""
        return self.batch_get_replica_desc([key])[key]

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

    def is_exist(self, key: str) -> int:
        """1 when the key has a page, 0 when not, a negative ErrorCode on failure."""
        return self.batch_is_exist([key])[0]

    def remove(self, key: str, force: bool = False) -> int:
        """0 (removed), -704 (no such key), or a negative ErrorCode."""
        if self._store is None:
            return INVALID_PARAMS
        try:
            return mooncake_code(self._store.batch_remove([key])[0])
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

    def alloc_from_mem_pool(self, size: int) -> int:
        """Host memory for put_from and get_into, registered with this process's engine:
        its address, or 0 when none can be had. (Mooncake's dummy client takes it from
        memory it shares with its real client; here the process maps it and the engine
        registers it, and close releases it.)"""
        if self._store is None or not isinstance(size, int) or size <= 0:
            _log(
                "error",
                f"alloc_from_mem_pool({size!r}): " + ("not set up" if self._store is None else "not a positive size"),
            )
            return 0
        try:
            addr = self._pool_memory.alloc(size)
        except (OSError, ValueError) as e:
            _log("error", f"alloc_from_mem_pool({size}): {e}")
            return 0
        try:
            self._engine().register(addr, size)
        except KvfabricError as e:
            _log("error", f"alloc_from_mem_pool({size}): {e}")
            self._pool_memory.free(addr)
            return 0
        return addr

    def get_hostname(self) -> str:
        """This process's engine address (host:port)."""
        engine = self._engine()
        return engine.name if engine is not None else ""

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown: nothing left to release to
            pass


# Module functions Mooncake's binding has beside the class (its structured object store uses them).
_serialize_tensor = serialize_tensor
_deserialize_tensor = deserialize_tensor
_tensor_metadata_size = tensor_metadata_size


def _cpu_list(text: str) -> set:
    """The CPUs of a sysfs cpulist ("0-3,8,10-11")."""
    cpus = set()
    for part in text.strip().split(","):
        if part:
            first, _, last = part.partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    return cpus


def bind_to_numa_node(node: int) -> None:
    """Runs the calling thread on the CPUs of NUMA node ``node``, as Mooncake's binding
    does; its memory then comes from that node by first touch. A node this host lacks
    is a warning and changes nothing."""
    path = f"/sys/devices/system/node/node{int(node)}/cpulist"
    try:
        with open(path) as f:
            cpus = _cpu_list(f.read())
        os.sched_setaffinity(0, cpus)
    except (OSError, ValueError) as e:
        _log("warning", f"bind_to_numa_node({node}): not bound ({e}); the thread runs where it ran")


__all__ = [
    "MooncakeDistributedStore",
    "ReplicateConfig",
    "SoftPinAction",
    "ObjectDataType",
    "MooncakeHostMemAllocator",
    "ReplicaDescriptor",
    "BufferHandle",
    "bind_to_numa_node",
    # Mooncake's ErrorCode values the calls answer
    "INTERNAL_ERROR",
    "INVALID_PARAMS",
    "LEASE_EXPIRED",
    "NO_AVAILABLE_HANDLE",
    "OBJECT_ALREADY_EXISTS",
    "OBJECT_NOT_FOUND",
    "RPC_FAIL",
    "RPC_TIMEOUT",
    "TRANSFER_FAIL",
]
