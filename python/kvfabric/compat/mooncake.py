"""A drop-in for the Mooncake transfer engine's Python API.

``kvfabric.compat.mooncake.TransferEngine`` has the method names, arguments
and integer return codes that vLLM's ``MooncakeConnector`` and SGLang's
mooncake backend call, so they run on kvfabric unchanged: 0 for success and
a negative value for failure; batch ids, with 0 (async batch calls) or a
negative value (``transfer_submit_write``) for failure; ``transfer_check_status``
gives 1 done, 0 running, -1 failed, -2 timed out. Failures are logged with
the engine's message on the ``kvfabric.compat.mooncake`` logger, never raised.

Under ``P2PHANDSHAKE`` a peer is named ``host:rpc_port``, where the port is
what the peer's ``get_rpc_port()`` returns.
"""

from __future__ import annotations

import ctypes
import enum
import json
import logging
import mmap
import threading
from typing import Callable, List, Optional

from ..engine import Engine, Op, Request, State
from ..errors import KvfabricError

log = logging.getLogger(__name__)

PROTOCOLS = {"efa": "efa", "tcp": "tcp", "rdma": "verbs", "verbs": "verbs", "shm": "shm", "auto": "auto"}


class TransferOpcode(enum.IntEnum):
    READ = 0
    WRITE = 1


class TransferNotify:
    """A short message delivered to the target with a transfer."""

    def __init__(self, name: str = "", msg: str = ""):
        self.name = name
        self.msg = msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"


def parse_metadata(metadata_server: str, metadata_type: str = "") -> str:
    """The kvfabric metadata string for a Mooncake one, or raises ValueError.

    ``P2PHANDSHAKE`` -> p2p; ``etcd://h:p[,h:p]`` and ``http://h:p/path`` as
    they are; a bare ``host:port[,host:port]`` is etcd, as in Mooncake (or
    http when ``metadata_type`` says so)."""
    m = metadata_server.strip()
    kind = metadata_type.strip().lower()
    if m.upper() in ("P2PHANDSHAKE", "P2P") or kind == "p2p":
        return "p2p"
    if m.startswith(("etcd://", "http://")):
        return m
    if "://" in m:
        raise ValueError(f"metadata server '{metadata_server}': use P2PHANDSHAKE, etcd://host:port or http://host:port/path")
    if not m or ":" not in m:
        raise ValueError(f"metadata server '{metadata_server}' is not host:port")
    return ("http://" if kind == "http" else "etcd://") + m


class TransferEngine:
    """The Mooncake ``TransferEngine`` API on a kvfabric engine."""

    def __init__(self) -> None:
        self._engine: Optional[Engine] = None
        self._lock = threading.Lock()
        self._regions: dict[int, int] = {}  # registered or managed: address -> length
        self._managed: dict[int, tuple[mmap.mmap, ctypes.Array]] = {}
        self._async: dict[int, object] = {}  # batch id -> kvfabric Transfer
        self._next_id = 1

    # -- helpers --------------------------------------------------------
    def _run(self, what: str, fn: Callable[[], object], failure: int = -1):
        if self._engine is None:
            log.error("%s: the engine is not initialized; call initialize() first", what)
            return failure
        try:
            out = fn()
            return 0 if out is None else out
        except (KvfabricError, ValueError, TypeError, OverflowError) as e:
            log.error("%s: %s", what, e)
            return failure

    def _track(self, transfer) -> int:
        with self._lock:
            bid = self._next_id
            self._next_id += 1
            self._async[bid] = transfer
        return bid

    def _inside(self, addr: int, length: int) -> bool:
        return any(a <= addr and addr + length <= a + n for a, n in self._regions.items())

    # -- set-up ---------------------------------------------------------
    def initialize(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str) -> int:
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "")

    def initialize_ext(
        self, local_hostname: str, metadata_server: str, protocol: str, device_name: str, metadata_type: str
    ) -> int:
        if self._engine is not None:
            log.error("initialize: already initialized as %s", self._engine.name)
            return -1
        try:
            metadata = parse_metadata(metadata_server, metadata_type)
            proto = PROTOCOLS.get(protocol.lower())
            if proto is None:
                raise ValueError(f"protocol '{protocol}': use one of {', '.join(sorted(PROTOCOLS))}")
            host = local_hostname or "127.0.0.1"
            if host.count(":") != 1:  # no port given: pick one (an IPv6 literal is not supported)
                host = f"{host}:0"
            self._engine = Engine(host, metadata, proto, device_name or "")
            return 0
        except (KvfabricError, ValueError) as e:
            log.error("initialize: %s", e)
            return -1

    def get_rpc_port(self) -> int:
        if self._engine is None:
            return -1
        return int(self._engine.name.rsplit(":", 1)[1])

    def get_local_hostname(self) -> str:
        return self._engine.name if self._engine is not None else ""

    def get_engine(self) -> Optional[Engine]:
        """The kvfabric engine underneath."""
        return self._engine

    # -- memory ---------------------------------------------------------
    def register_memory(self, buffer_addr: int, capacity: int) -> int:
        def go():
            self._engine.register(int(buffer_addr), int(capacity))
            self._regions[int(buffer_addr)] = int(capacity)

        return self._run("register_memory", go)

    def unregister_memory(self, buffer_addr: int) -> int:
        def go():
            self._engine.unregister(int(buffer_addr))
            self._regions.pop(int(buffer_addr), None)

        return self._run("unregister_memory", go)

    def batch_register_memory(self, buffer_addresses: List[int], capacities: List[int]) -> int:
        def go():
            if len(buffer_addresses) != len(capacities):
                raise ValueError(f"{len(buffer_addresses)} addresses but {len(capacities)} capacities")
            pairs = [(int(a), int(n)) for a, n in zip(buffer_addresses, capacities)]
            self._engine.register_many(pairs)
            self._regions.update(pairs)

        return self._run("batch_register_memory", go)

    def batch_unregister_memory(self, buffer_addresses: List[int]) -> int:
        def go():
            self._engine.unregister_many([int(a) for a in buffer_addresses])
            for a in buffer_addresses:
                self._regions.pop(int(a), None)

        return self._run("batch_unregister_memory", go)

    def allocate_managed_buffer(self, length: int) -> int:
        """A page-aligned buffer, registered; its address, or 0 on failure."""

        def go():
            mm = mmap.mmap(-1, int(length))
            view = (ctypes.c_char * int(length)).from_buffer(mm)
            addr = ctypes.addressof(view)
            try:
                self._engine.register(addr, int(length))
            except BaseException:
                del view
                mm.close()
                raise
            self._managed[addr] = (mm, view)
            self._regions[addr] = int(length)
            return addr

        return self._run("allocate_managed_buffer", go, failure=0)

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        def go():
            if int(buffer_addr) not in self._managed or self._regions.get(int(buffer_addr)) != int(length):
                raise ValueError(f"no managed buffer of {length} bytes at {int(buffer_addr):#x}")
            self._engine.unregister(int(buffer_addr))
            del self._regions[int(buffer_addr)]
            mm, view = self._managed.pop(int(buffer_addr))
            del view  # the last export of the mapping: now it can close
            mm.close()

        return self._run("free_managed_buffer", go)

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        def go():
            if length > len(src_ptr):
                raise ValueError(f"length {length} exceeds the {len(src_ptr)} bytes given")
            if not self._inside(int(dest_address), int(length)):
                raise ValueError(f"[{int(dest_address):#x}, +{length}) is not inside a registered or managed buffer")
            ctypes.memmove(int(dest_address), src_ptr, int(length))

        return self._run("write_bytes_to_buffer", go)

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        if not self._inside(int(source_address), int(length)):
            log.error("read_bytes_from_buffer: [%#x, +%d) is not inside a registered or managed buffer",
                      int(source_address), int(length))
            return b""
        return ctypes.string_at(int(source_address), int(length))

    # -- transfers ------------------------------------------------------
    @staticmethod
    def _requests(op: Op, buffers, peer_addresses, lengths) -> list:
        if not (len(buffers) == len(peer_addresses) == len(lengths)):
            raise ValueError(
                f"{len(buffers)} buffers, {len(peer_addresses)} peer addresses and {len(lengths)} lengths differ"
            )
        return [Request(op, int(b), int(p), int(n)) for b, p, n in zip(buffers, peer_addresses, lengths)]

    def _notify(self, target: str, notify: Optional[TransferNotify]) -> None:
        if notify is not None:
            self._engine.notify(target, json.dumps({"name": notify.name, "msg": notify.msg}))

    def transfer_sync_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int) -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, TransferOpcode.WRITE)

    def transfer_sync_read(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int) -> int:
        return self.transfer_sync(target_hostname, buffer, peer_buffer_address, length, TransferOpcode.READ)

    def transfer_sync(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int, opcode, notify=None
    ) -> int:
        return self.batch_transfer_sync(target_hostname, [buffer], [peer_buffer_address], [length], opcode, notify)

    def batch_transfer_sync_write(self, target_hostname: str, buffers, peer_buffer_addresses, lengths) -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.WRITE)

    def batch_transfer_sync_read(self, target_hostname: str, buffers, peer_buffer_addresses, lengths) -> int:
        return self.batch_transfer_sync(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.READ)

    def batch_transfer_sync(
        self, target_hostname: str, buffers, peer_buffer_addresses, lengths, opcode, notify=None
    ) -> int:
        def go():
            reqs = self._requests(Op(int(opcode)), buffers, peer_buffer_addresses, lengths)
            if reqs:
                self._engine.transfer(reqs, target_hostname)
            self._notify(target_hostname, notify)

        return self._run("batch_transfer_sync", go)

    def batch_transfer_async_write(self, target_hostname: str, buffers, peer_buffer_addresses, lengths) -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.WRITE)

    def batch_transfer_async_read(self, target_hostname: str, buffers, peer_buffer_addresses, lengths) -> int:
        return self.batch_transfer_async(target_hostname, buffers, peer_buffer_addresses, lengths, TransferOpcode.READ)

    def batch_transfer_async(self, target_hostname: str, buffers, peer_buffer_addresses, lengths, opcode) -> int:
        """A batch id (never 0), or 0 on failure."""

        def go():
            reqs = self._requests(Op(int(opcode)), buffers, peer_buffer_addresses, lengths)
            if not reqs:
                raise ValueError("an empty batch")
            return self._track(self._engine.submit(reqs, target_hostname))

        return self._run("batch_transfer_async", go, failure=0)

    def get_batch_transfer_status(self, batch_ids: List[int]) -> int:
        """Waits for every batch; 0 when all completed, -1 when any failed."""
        rc = 0
        for bid in batch_ids:
            with self._lock:
                t = self._async.pop(int(bid), None)
            if t is None:
                log.error("get_batch_transfer_status: unknown batch id %s", bid)
                rc = -1
                continue
            try:
                t.wait()
            except KvfabricError as e:
                log.error("get_batch_transfer_status: batch %s: %s", bid, e)
                rc = -1
        return rc

    def transfer_submit_write(self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int) -> int:
        """A batch id (positive), or a negative value on failure."""

        def go():
            reqs = self._requests(Op.WRITE, [buffer], [peer_buffer_address], [length])
            return self._track(self._engine.submit(reqs, target_hostname))

        return self._run("transfer_submit_write", go, failure=-1)

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 still running, -1 failed (or unknown id), -2 timed out."""
        with self._lock:
            t = self._async.get(int(batch_id))
        if t is None:
            log.error("transfer_check_status: unknown batch id %s", batch_id)
            return -1
        st = t.status()
        if st.state == State.PENDING:
            return 0
        with self._lock:
            self._async.pop(int(batch_id), None)
        if st.state == State.COMPLETED:
            return 1
        log.error("transfer_check_status: batch %s: %s", batch_id, st.error)
        return -2 if st.state == State.TIMEOUT else -1

    # -- segments, peers, notifications -----------------------------------
    def get_first_buffer_address(self, segment_name: str) -> int:
        def go():
            bufs = self._engine.buffers(segment_name)
            return bufs[0].addr if bufs else 0

        return self._run("get_first_buffer_address", go, failure=0)

    def warmup_efa_segment(self, segment_name: str) -> int:
        return self._run("warmup_efa_segment", lambda: self._engine.warmup(segment_name))

    def send_probe(self, peer_server_name: str) -> int:
        return self._run("send_probe", lambda: self._engine.probe(peer_server_name))

    def get_notifies(self) -> List[TransferNotify]:
        if self._engine is None:
            return []
        out = []
        for text in self._engine.notifies():
            try:
                d = json.loads(text)
                out.append(TransferNotify(str(d.get("name", "")), str(d.get("msg", ""))))
            except (ValueError, AttributeError):
                out.append(TransferNotify("", text))
        return out

    def close(self) -> None:
        """Not in Mooncake's API: stops the engine and frees managed buffers."""
        if self._engine is not None:
            self._engine.close()
            self._engine = None
        while self._managed:
            _, (mm, view) = self._managed.popitem()
            del view
            mm.close()
        self._regions.clear()
