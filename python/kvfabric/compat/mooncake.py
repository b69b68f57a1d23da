"""A drop-in for the Mooncake transfer engine's Python API (``mooncake.engine``).

``kvfabric.compat.mooncake.TransferEngine`` has the names, keywords, defaults
and integer return codes of Mooncake's binding
(``mooncake-integration/transfer_engine/transfer_engine_py.cpp``), so vLLM's
MooncakeConnector, SGLang's Mooncake wrapper and checkpoint-engine run on
kvfabric unchanged:

- ``initialize``, register, sync transfers, ``get_batch_transfer_status``:
  0 ok, negative on failure; ``send_probe``: 0 reachable, non-zero otherwise.
- ``batch_transfer_async*`` and ``transfer_submit_write``: a batch id, **0**
  on failure (never -1: callers test ``!= 0``).
- ``transfer_check_status``: 1 completed, 0 pending, -1 failed, -2 timed out.
- ``register_memory(addr, length, location="*")``: ``"*"`` asks the CUDA
  driver whether the pointer is device memory, so raw CUDA tensor pointers
  register as ``cuda:N``.

Failures are logged with the engine's message (one log stream with the C++
engine, under ``KVF_LOG_LEVEL``), never raised, except where Mooncake raises
(the ``*_on_cuda`` calls). Batch calls hand their lists to C++ in one step and
release the GIL. What still differs from Mooncake is listed in docs/python.md.
"""

from __future__ import annotations

import ctypes
import enum
import json
import mmap
import os
import random
import socket
import threading
import time
from typing import Callable, List, NamedTuple, Optional, Sequence

from ..engine import Engine, OpCode, TaskState, buffer_address, unsigned
from ..errors import InvalidArgumentError, KvfabricError
from ..units import latency_bound

# Module attributes Mooncake's binding sets from its build flags. kvfabric
# reaches EFA and CUDA memory at run time; the vendor transports it lacks.
SUPPORT_EFA = True
SUPPORT_CUDA = True
SUPPORT_HIP = False
SUPPORT_MNNVL = False
SUPPORT_MUSA = False
SUPPORT_INTRA_NVLINK = False

# Mooncake protocol name -> kvfabric protocol. "rdma" is the RDMA fabric the
# host has (efa on EFA hosts, else verbs: the engine says which).
PROTOCOLS = {"rdma": "rdma", "efa": "efa", "tcp": "tcp", "verbs": "verbs", "shm": "shm", "auto": "auto"}
# Mooncake transports that are not libfabric fabrics: refused with the reason.
VENDOR_PROTOCOLS = ("nvlink", "nvlink_intra", "hip", "musa", "ascend", "cxl", "barex", "xgmi", "cxi", "ubshmem")


class PortRange(NamedTuple):
    """Where an engine for a bare host name takes its port: the variables that bound it, and their defaults."""

    low_var: str
    high_var: str
    low: int
    high: int


# The transfer engine's RPC range, and the range a store client (setup) takes its port from.
RPC_PORTS = PortRange("MC_MIN_RPC_PORT", "MC_MAX_RPC_PORT", 15000, 17000)
STORE_CLIENT_PORTS = PortRange("MC_STORE_CLIENT_MIN_PORT", "MC_STORE_CLIENT_MAX_PORT", 12300, 14300)
# What a call turns into Mooncake's failure codes (AttributeError: no engine).
_FAILURES = (KvfabricError, ValueError, TypeError, OverflowError, AttributeError)


def _log(level: str, message: str) -> None:
    from .. import _core

    _core.log(level, f"mooncake compat: {message}")


class TransferOpcode(enum.IntEnum):
    """Mooncake's ``TransferOpcode`` (``Read``/``Write``); ``READ``/``WRITE`` alias them."""

    Read = 0
    Write = 1
    READ = 0
    WRITE = 1


# pybind11's export_values(): the members are module attributes too.
Read = TransferOpcode.Read
Write = TransferOpcode.Write

# Mooncake numbers its opcodes as kvfabric does, so a caller's TransferOpcode
# (or int) goes to the engine as it is.
if (int(TransferOpcode.Read), int(TransferOpcode.Write)) != (OpCode.READ, OpCode.WRITE):
    raise ImportError("Mooncake's TransferOpcode and kvfabric.OpCode number READ and WRITE differently")
# The engine's numbers, as plain ints for the batch paths; the results of
# transfer_check_status and get_batch_transfer_status stay Mooncake's.
_READ, _WRITE = int(OpCode.READ), int(OpCode.WRITE)
_PENDING, _COMPLETED, _TIMEOUT = int(TaskState.PENDING), int(TaskState.COMPLETED), int(TaskState.TIMEOUT)


def _notify_field(value, what: str) -> bytes:
    """What Mooncake's std::string field takes: a str (as UTF-8) or bytes. A
    str read from a received notification (see TransferNotify) encodes back
    to the bytes received."""
    if isinstance(value, str):
        try:
            return value.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError as e:
            raise ValueError(
                f"TransferNotify.{what}: UTF-8 cannot encode this str ({e.reason} at index {e.start}); pass bytes"
            ) from None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    raise TypeError(f"TransferNotify.{what} is str or bytes, not {type(value).__name__}")


class TransferNotify:
    """A short message delivered to the target with a transfer.

    As in Mooncake, ``name`` and ``msg`` take str or bytes and read as str
    (UTF-8). Any bytes go through: bytes that are not UTF-8 read with
    ``surrogateescape`` (so reading never raises, and ``TransferNotify(n.name,
    n.msg)`` sends the same bytes again); ``name_bytes`` and ``msg_bytes``
    (not in Mooncake) give them exactly."""

    __slots__ = ("_name", "_msg")

    def __init__(self, name="", msg=""):
        self._name = _notify_field(name, "name")
        self._msg = _notify_field(msg, "msg")

    @property
    def name(self) -> str:
        return self._name.decode("utf-8", "surrogateescape")

    @name.setter
    def name(self, value) -> None:
        self._name = _notify_field(value, "name")

    @property
    def msg(self) -> str:
        return self._msg.decode("utf-8", "surrogateescape")

    @msg.setter
    def msg(self, value) -> None:
        self._msg = _notify_field(value, "msg")

    @property
    def name_bytes(self) -> bytes:
        return self._name

    @property
    def msg_bytes(self) -> bytes:
        return self._msg

    def __repr__(self) -> str:
        return f"TransferNotify(name={self.name!r}, msg={self.msg!r})"

    # The shim's notification on the wire: JSON {"name", "msg"}, ASCII; bytes
    # that are not UTF-8 travel as surrogate escapes (\udcXX) and come back
    # exactly. A message that is not such JSON (a kvfabric.Engine.notify),
    # exactly these two keys, arrives whole as msg, with an empty name.
    def _payload(self) -> bytes:
        return json.dumps({"name": self.name, "msg": self.msg}).encode("ascii")

    @classmethod
    def _from_payload(cls, body: bytes) -> "TransferNotify":
        try:
            d = json.loads(body)
            if isinstance(d, dict) and d.keys() == {"name", "msg"} and all(isinstance(v, str) for v in d.values()):
                return cls(d["name"], d["msg"])
        except (ValueError, RecursionError):  # not JSON, not UTF-8, a lone surrogate, nested too deep
            pass
        return cls("", body)


def _bad_number(**lists) -> Optional[str]:
    """Why a list argument cannot go to the engine (the first entry that is
    not an integer in [0, 2^64)), or None. Only called after the binding
    refused the lists, so the batch paths pay nothing for it."""
    for what, values in lists.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            return f"{what} must be a list of integers, not {type(values).__name__}"
        for i, v in enumerate(values):
            try:
                unsigned(v, f"{what}[{i}]")
            except InvalidArgumentError as e:
                return str(e)
    return None


def _why(e: Exception, target, **lists) -> str:
    """The message of a failed call: for a binding's refusal of its arguments
    (TypeError, OverflowError), what is wrong with them."""
    if isinstance(e, (TypeError, OverflowError)):
        if not isinstance(target, str):
            return f"the target must be a str (host:port), not {type(target).__name__}"
        reason = _bad_number(**lists)
        if reason is not None:
            return reason
    return str(e)


def _opcode(opcode) -> int:
    n = unsigned(opcode, "opcode", 1 << 32)
    if n not in (0, 1):
        raise InvalidArgumentError(f"opcode {n}: use TransferOpcode.Read (0) or TransferOpcode.Write (1)")
    return n


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
        raise ValueError(
            f"metadata server '{metadata_server}': use P2PHANDSHAKE, etcd://host:port or http://host:port/path"
        )
    if not m or ":" not in m:
        raise ValueError(f"metadata server '{metadata_server}' is not host:port")
    return ("http://" if kind == "http" else "etcd://") + m


def split_local_name(name: str) -> tuple[str, Optional[int]]:
    """(host, port) of a Mooncake ``local_hostname``; port None when absent.

    Accepts ``host``, ``host:port``, ``[v6]``, ``[v6]:port`` and a bare IPv6
    literal (``fe80::1``, what ``get_ip()`` returns on IPv6 hosts). The host
    comes back without brackets."""
    s = name.strip()
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise ValueError(f"local name '{name}': unbalanced '['")
        host, rest = s[1:end], s[end + 1 :]
        if not rest:
            return host, None
        if not rest.startswith(":") or not rest[1:].isdigit():
            raise ValueError(f"local name '{name}': expected [address]:port")
        return host, int(rest[1:])
    if s.count(":") > 1:  # an IPv6 literal: no port can be told apart
        return s, None
    host, sep, port = s.partition(":")
    if not sep:
        return host, None
    if not port.isdigit():
        raise ValueError(f"local name '{name}': port '{port}' is not a number")
    return host, int(port)


def join_host_port(host: str, port: int) -> str:
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"


def segment_name(target: str) -> str:
    """A peer name as the engine knows it: ``[v6]:port`` for an IPv6 peer
    that a caller wrote as ``v6:port`` (f"{get_ip()}:{port}"). The batch
    calls do the same in C++."""
    from .. import _core

    return _core.mooncake_name(target)


def _port_range(ports: PortRange) -> tuple[int, int]:
    lo, hi = ports.low, ports.high
    try:
        lo = int(os.environ.get(ports.low_var, lo))
        hi = int(os.environ.get(ports.high_var, hi))
    except ValueError:
        lo, hi = ports.low, ports.high
    if not (0 < lo <= hi < 65536):
        lo, hi = ports.low, ports.high
    return lo, hi


def _free_ports(host: str, ports: PortRange, tries: int = 32):
    """Ports of a Mooncake range (RPC_PORTS: MC_MIN_RPC_PORT..MC_MAX_RPC_PORT,
    15000-17000 by default) that bind on ``host`` now, from a random start."""
    lo, hi = _port_range(ports)
    start = random.randint(lo, hi)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    found = 0
    for i in range(hi - lo + 1):
        port = lo + (start - lo + i) % (hi - lo + 1)
        with socket.socket(family, socket.SOCK_STREAM) as s:
            try:
                s.bind((host, port))
            except OSError:
                continue
        yield port
        found += 1
        if found == tries:
            return


def _environment_settings(protocol: str) -> tuple[str, dict]:
    """The protocol and KVF_* settings that Mooncake's MC_* variables ask
    for; one info line names each that took effect, one names the rest."""
    settings: dict = {}
    used: list[str] = []
    if os.environ.get("MC_FORCE_TCP"):
        if protocol != "tcp":
            used.append(f"MC_FORCE_TCP -> protocol tcp (instead of {protocol})")
        protocol = "tcp"
    if "MC_TRANSFER_TIMEOUT" in os.environ:
        if "KVF_TRANSFER_TIMEOUT_MS" in os.environ:
            used.append("MC_TRANSFER_TIMEOUT: KVF_TRANSFER_TIMEOUT_MS is set and wins")
        else:
            try:
                # Mooncake's floor, and KVF_TRANSFER_TIMEOUT_MS's ceiling (a day)
                seconds = min(86400, max(5, int(os.environ["MC_TRANSFER_TIMEOUT"])))
                settings["KVF_TRANSFER_TIMEOUT_MS"] = seconds * 1000
                used.append(
                    f"MC_TRANSFER_TIMEOUT={os.environ['MC_TRANSFER_TIMEOUT']} -> "
                    f"KVF_TRANSFER_TIMEOUT_MS={seconds * 1000}"
                )
            except ValueError:
                used.append(f"MC_TRANSFER_TIMEOUT={os.environ['MC_TRANSFER_TIMEOUT']!r} is not a number: ignored")
    ranges = (RPC_PORTS.low_var, RPC_PORTS.high_var, STORE_CLIENT_PORTS.low_var, STORE_CLIENT_PORTS.high_var)
    known = {"MC_FORCE_TCP", "MC_TRANSFER_TIMEOUT", "MC_TE_METRIC", "MC_TE_METRIC_INTERVAL_SECONDS", *ranges}
    for k in ranges:
        if k in os.environ:
            used.append(f"{k}={os.environ[k]}: the port range a bare local host name picks from")
    if _metric_interval() is not None:
        used.append(f"MC_TE_METRIC: a throughput line every {_metric_interval()} s")
    ignored = sorted(k for k in os.environ if k.startswith("MC_") and k not in known)
    for line in used:
        _log("info", line)
    if ignored:
        _log("info", f"no meaning in kvfabric, ignored: {', '.join(ignored)} (docs/python.md lists why)")
    return protocol, settings


def _metric_interval() -> Optional[int]:
    """Seconds between throughput lines when MC_TE_METRIC asks for them."""
    if os.environ.get("MC_TE_METRIC", "").strip().lower() not in ("1", "true", "yes", "on"):
        return None
    try:
        n = int(os.environ.get("MC_TE_METRIC_INTERVAL_SECONDS", "5"))
    except ValueError:
        n = 5
    return n if n > 0 else 5


class _ThroughputLog(threading.Thread):
    """MC_TE_METRIC: every interval, what the engine moved (from its
    counters, Engine.stats()): throughput by op, requests, latency
    percentiles and failures over the interval."""

    def __init__(self, engine: Engine, interval: int):
        super().__init__(name="kvfabric-mc-metric", daemon=True)
        self._engine, self._interval = engine, interval
        self.stop = threading.Event()

    def run(self) -> None:
        from ..metrics import rates

        try:
            last, t0 = self._engine.stats(), time.monotonic()
        except KvfabricError:
            return
        while not self.stop.wait(self._interval):
            try:
                now, t1 = self._engine.stats(), time.monotonic()
            except KvfabricError:
                return  # the engine closed
            r = rates(last, now, t1 - t0)
            write = sum(x["write_rate"] for x in r["rails"])
            read = sum(x["read_rate"] for x in r["rails"])
            if write + read > 0 or r["failures"]:
                lat = "; ".join(
                    "%s latency p50 %s, p99 %s" % (op, latency_bound(v["p50"]), latency_bound(v["p99"]))
                    for op, v in sorted(r["latency"].items())
                    if v["count"]
                )
                _log(
                    "info",
                    "throughput %.1f MB/s (write %.1f, read %.1f) over %.1f s, %.0f requests/s%s%s"
                    % (
                        (write + read) / 1e6,
                        write / 1e6,
                        read / 1e6,
                        t1 - t0,
                        r["requests"],
                        "; " + lat if lat else "",
                        "; %d failed" % r["failures"] if r["failures"] else "",
                    ),
                )
            last, t0 = now, t1


def tcp_devices(device_name: str) -> tuple[str, str]:
    """The names of `device_name` (a comma list) that choose NICs of the tcp provider (an interface, or an
    ibverbs device naming the interface it carries), the others left out with one info line: Mooncake ignores
    device names on tcp, so code that passes its RDMA device list everywhere must still start there. Returns the
    names kept and the info line to log once the engine is up ("" when nothing was left out)."""
    names = [n.strip() for n in device_name.split(",") if n.strip()]
    if not names:
        return "", ""
    from .. import _core

    def chooses(name: str) -> bool:
        try:
            _core.local_topology("tcp", name)  # the engine's own device selection
            return True
        except KvfabricError:
            return False

    have = {d["domain"] for d in _core.fabric_domains("tcp")}
    kept = [n for n in names if chooses(n)]
    dropped = [n for n in names if n not in kept]
    note = ""
    if dropped:
        note = (
            f"device name(s) {', '.join(dropped)} ignored on tcp, as Mooncake ignores them there (tcp's NICs: "
            f"{', '.join(sorted(have)) or 'none'}); " + (f"using {', '.join(kept)}" if kept else "using every NIC")
        )
    return ",".join(kept), note


def start_engine(
    local_hostname: str,
    metadata_server: str,
    protocol: str,
    device_name: str = "",
    metadata_type: str = "",
    settings: Optional[dict] = None,
    ports: PortRange = RPC_PORTS,
) -> tuple[Engine, str]:
    """A kvfabric Engine made as Mooncake's ``initialize`` makes its own: the
    metadata server as Mooncake names it (``P2PHANDSHAKE``, ``etcd://``,
    ``http://``), its protocols (``rdma`` is efa or verbs), its ``MC_*``
    variables, and for a bare host a free port of ``ports``; ``settings``
    (KVF_* by name) go over what the MC_* variables ask. Returns the engine
    and the kvfabric protocol; raises ValueError, OSError or KvfabricError
    saying what is wrong."""
    metadata = parse_metadata(metadata_server or "", metadata_type or "")
    proto = (protocol or "").strip().lower()
    if proto in VENDOR_PROTOCOLS:
        raise ValueError(
            f"protocol '{protocol}' is a Mooncake vendor transport that kvfabric does not "
            "have; kvfabric moves memory over libfabric: use rdma (efa or verbs), efa, tcp or shm"
        )
    if proto not in PROTOCOLS:
        raise ValueError(f"protocol '{protocol}': use one of {', '.join(PROTOCOLS)}")
    proto, from_env = _environment_settings(PROTOCOLS[proto])
    settings = {**from_env, **(settings or {})}
    host, port = split_local_name(local_hostname or "127.0.0.1")
    devices, note = tcp_devices(device_name or "") if proto == "tcp" else (device_name or "", "")
    if port is not None:
        engine = Engine(join_host_port(host, port), metadata, proto, devices, settings)
        if note:
            _log("info", note)  # after the engine's start, under its log level
        return engine, proto
    # A bare host: like Mooncake, a free port of the RPC range; another
    # process may take it between the probe and the bind, so try a few.
    last: Optional[Exception] = None
    for p in _free_ports(host, ports):
        try:
            engine = Engine(join_host_port(host, p), metadata, proto, devices, settings)
            if note:
                _log("info", note)
            return engine, proto
        except KvfabricError as e:
            if "in use" not in str(e).lower():
                raise
            last = e
    lo, hi = _port_range(ports)
    raise OSError(
        f"no free port for {host} in {lo}-{hi} ({ports.low_var}/{ports.high_var})" + (f": {last}" if last else "")
    )


class TransferEngine:
    """The Mooncake ``TransferEngine`` API on a kvfabric engine."""

    TransferOpcode = TransferOpcode
    ports = RPC_PORTS  # where initialize takes a port for a bare host name

    def __init__(self) -> None:
        self._engine: Optional[Engine] = None
        self._core = None  # self._engine._core: the C++ engine, for the batch calls
        self._protocol = "auto"
        self._lock = threading.Lock()
        self._regions: dict[int, int] = {}  # registered or managed: address -> length
        self._managed: dict[int, tuple[mmap.mmap, ctypes.Array]] = {}
        self._metric: Optional[_ThroughputLog] = None

    # -- helpers --------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], object], failure: int = -1):
        """fn()'s result (0 for None), or `failure` with the reason logged."""
        if self._core is None:
            _log("error", f"{what}: the engine is not initialized; call initialize() first")
            return failure
        try:
            out = fn()
            return 0 if out is None else out
        except (KvfabricError, ValueError, TypeError, OverflowError, OSError, MemoryError) as e:
            _log("error", f"{what}: {e}")
            return failure

    def _inside(self, addr: int, length: int) -> bool:
        return any(a <= addr and addr + length <= a + n for a, n in self._regions.items())

    # -- set-up ---------------------------------------------------------
    def initialize(self, local_hostname: str, metadata_server: str, protocol: str, device_name: str) -> int:
        return self.initialize_ext(local_hostname, metadata_server, protocol, device_name, "")

    def initialize_ext(
        self, local_hostname: str, metadata_server: str, protocol: str, device_name: str, metadata_type: str
    ) -> int:
        if self._engine is not None:
            _log("error", f"initialize: already initialized as {self._engine.name}")
            return -1
        try:
            self._engine, proto = start_engine(
                local_hostname, metadata_server, protocol, device_name, metadata_type, ports=self.ports
            )
            self._core = self._engine._core
            self._protocol = proto
            interval = _metric_interval()
            if interval is not None:
                self._metric = _ThroughputLog(self._engine, interval)
                self._metric.start()
            return 0
        except (KvfabricError, ValueError, OSError) as e:
            _log("error", f"initialize: {e}")
            return -1

    def get_rpc_port(self) -> int:
        if self._engine is None:
            return -1
        return int(self._engine.name.rsplit(":", 1)[1])

    def get_local_hostname(self) -> str:
        """Not in Mooncake's API: this engine's ``host:port``."""
        return self._engine.name if self._engine is not None else ""

    def get_engine(self) -> Optional[Engine]:
        """The kvfabric engine underneath (Mooncake returns its C++ engine)."""
        return self._engine

    def get_engine_ptr(self) -> int:
        """The address of the C++ ``kvfabric::Engine`` (0 before initialize)."""
        return self._core.ptr if self._core is not None else 0

    def get_local_topology(self, device_name: Optional[str] = None) -> str:
        """Mooncake's topology JSON: ``{"cpu:N"|"cuda:N": [[near NICs], [other NICs]]}``."""
        from .. import _core

        return _core.local_topology(self._protocol, device_name or "")

    # -- memory ---------------------------------------------------------
    def register_memory(self, buffer_addr: int, capacity: int, location: str = "*") -> int:
        def go():
            addr, n, _ = buffer_address(unsigned(buffer_addr, "address"), capacity)  # clear errors for bad numbers
            self._core.register(addr, n, location)
            self._regions[addr] = n

        return self._call("register_memory", go)

    def unregister_memory(self, buffer_addr: int) -> int:
        def go():
            addr = unsigned(buffer_addr, "address")
            self._core.unregister(addr)
            self._regions.pop(addr, None)

        return self._call("unregister_memory", go)

    def batch_register_memory(self, buffer_addresses: List[int], capacities: List[int], location: str = "*") -> int:
        def go():
            addrs = [unsigned(a, f"buffer_addresses[{i}]") for i, a in enumerate(buffer_addresses)]
            lengths = list(capacities)
            if len(addrs) != len(lengths):
                raise ValueError(f"{len(addrs)} addresses but {len(lengths)} capacities")
            # clear errors for bad numbers, before anything is registered
            lengths = [buffer_address(a, n)[1] for a, n in zip(addrs, lengths)]
            self._core.register_list(addrs, lengths, location)
            self._regions.update(zip(addrs, lengths))

        return self._call("batch_register_memory", go)

    def batch_unregister_memory(self, buffer_addresses: List[int]) -> int:
        def go():
            addrs = [unsigned(a, f"buffer_addresses[{i}]") for i, a in enumerate(buffer_addresses)]
            self._core.unregister_batch(addrs)
            for a in addrs:
                self._regions.pop(a, None)

        return self._call("batch_unregister_memory", go)

    def allocate_managed_buffer(self, length: int) -> int:
        """A page-aligned buffer, registered; its address, or 0 on failure."""

        def go():
            n = unsigned(length, "length", 1 << 63)
            if n == 0:
                raise ValueError("length 0: give a positive byte count")
            mm = mmap.mmap(-1, n)
            view = (ctypes.c_char * n).from_buffer(mm)
            addr = ctypes.addressof(view)
            try:
                self._core.register(addr, n, "cpu:0")
            except BaseException:
                del view
                mm.close()
                raise
            self._managed[addr] = (mm, view)
            self._regions[addr] = n
            return addr

        return self._call("allocate_managed_buffer", go, failure=0)

    def free_managed_buffer(self, buffer_addr: int, length: int) -> int:
        def go():
            addr, n = unsigned(buffer_addr, "address"), unsigned(length, "length")
            if addr not in self._managed or self._regions.get(addr) != n:
                raise ValueError(f"no managed buffer of {n} bytes at {addr:#x}")
            self._core.unregister(addr)
            del self._regions[addr]
            mm, view = self._managed.pop(addr)
            del view  # the last export of the mapping: now it can close
            mm.close()

        return self._call("free_managed_buffer", go)

    def write_bytes_to_buffer(self, dest_address: int, src_ptr: bytes, length: int) -> int:
        def go():
            dest = unsigned(dest_address, "dest_address")
            n = unsigned(length, "length")
            if n > len(src_ptr):
                raise ValueError(f"length {length}: give 0 to {len(src_ptr)}, the bytes passed")
            if not self._inside(dest, n):
                raise ValueError(f"[{dest:#x}, +{n}) is not inside a registered or managed buffer")
            ctypes.memmove(dest, src_ptr, n)

        return self._call("write_bytes_to_buffer", go)

    def read_bytes_from_buffer(self, source_address: int, length: int) -> bytes:
        try:
            source, n = unsigned(source_address, "source_address"), unsigned(length, "length")
        except InvalidArgumentError as e:
            _log("error", f"read_bytes_from_buffer: {e}")
            return b""
        if not self._inside(source, n):
            _log("error", f"read_bytes_from_buffer: [{source:#x}, +{n}) is not inside a registered or managed buffer")
            return b""
        return ctypes.string_at(source, n)

    # -- transfers ------------------------------------------------------
    # The batch paths stay short: on a 2-core host, after a large transfer
    # every Python frame runs from cold caches (see tools/bench/python_vs_cpp.py).
    def _failed(self, what: str, target: str, e: Exception, failure: int = -1, lists=None) -> int:
        if self._core is None:
            _log("error", f"{what}: the engine is not initialized; call initialize() first")
        else:
            buffers, peers, lengths = lists or ((), (), ())
            _log(
                "error",
                f"{what} to {target}: {_why(e, target, buffers=buffers, peer_buffer_addresses=peers, lengths=lengths)}",
            )
        return failure

    def _sync(self, what: str, target: str, op, buffers, peers, lengths, notify=None) -> int:
        try:
            # A notify that cannot be sent fails the call before anything moves.
            payload = None if notify is None else TransferNotify(notify.name, notify.msg)._payload()
            self._core.transfer_to(target, _opcode(op), buffers, peers, lengths)
            if payload is not None:
                self._core.send_notify(segment_name(target), payload)
        except _FAILURES as e:
            return self._failed(what, target, e, lists=(buffers, peers, lengths))
        return 0

    def _submit(self, what: str, target: str, op, buffers, peers, lengths) -> int:
        """A batch id, or 0 (Mooncake's failure sentinel for batch ids)."""
        try:
            return self._core.submit_to(target, _opcode(op), buffers, peers, lengths)
        except _FAILURES as e:
            return self._failed(what, target, e, failure=0, lists=(buffers, peers, lengths))

    def transfer_sync_write(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int, transport_hint: str = ""
    ) -> int:
        return self._sync("transfer_sync_write", target_hostname, _WRITE, [buffer], [peer_buffer_address], [length])

    def transfer_sync_read(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int, transport_hint: str = ""
    ) -> int:
        return self._sync("transfer_sync_read", target_hostname, _READ, [buffer], [peer_buffer_address], [length])

    def transfer_sync(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        opcode,
        notify: Optional[TransferNotify] = None,
        transport_hint: str = "",
    ) -> int:
        return self._sync("transfer_sync", target_hostname, opcode, [buffer], [peer_buffer_address], [length], notify)

    def batch_transfer_sync_write(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        try:  # inline, not _sync: the path every framework's batch takes (one frame less, from cold caches)
            self._core.transfer_to(target_hostname, _WRITE, buffers, peer_buffer_addresses, lengths)
            return 0
        except _FAILURES as e:
            return self._failed(
                "batch_transfer_sync_write", target_hostname, e, lists=(buffers, peer_buffer_addresses, lengths)
            )

    def batch_transfer_sync_read(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        try:  # inline, as batch_transfer_sync_write
            self._core.transfer_to(target_hostname, _READ, buffers, peer_buffer_addresses, lengths)
            return 0
        except _FAILURES as e:
            return self._failed(
                "batch_transfer_sync_read", target_hostname, e, lists=(buffers, peer_buffer_addresses, lengths)
            )

    def batch_transfer_sync(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        opcode,
        notify: Optional[TransferNotify] = None,
        transport_hint: str = "",
    ) -> int:
        return self._sync(
            "batch_transfer_sync", target_hostname, opcode, buffers, peer_buffer_addresses, lengths, notify
        )

    def batch_transfer_async_write(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        return self._submit(
            "batch_transfer_async_write", target_hostname, _WRITE, buffers, peer_buffer_addresses, lengths
        )

    def batch_transfer_async_read(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        transport_hint: str = "",
    ) -> int:
        return self._submit(
            "batch_transfer_async_read", target_hostname, _READ, buffers, peer_buffer_addresses, lengths
        )

    def batch_transfer_async(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        opcode,
        transport_hint: str = "",
    ) -> int:
        return self._submit("batch_transfer_async", target_hostname, opcode, buffers, peer_buffer_addresses, lengths)

    def transfer_submit_write(
        self, target_hostname: str, buffer: int, peer_buffer_address: int, length: int, transport_hint: str = ""
    ) -> int:
        """A batch id, or 0 on failure (as Mooncake)."""
        return self._submit("transfer_submit_write", target_hostname, _WRITE, [buffer], [peer_buffer_address], [length])

    def get_batch_transfer_status(self, batch_ids: List[int]) -> int:
        """Waits for every batch and frees it; 0 when all completed, -1 when any
        failed, timed out or is unknown."""
        if self._core is None:
            return self._call("get_batch_transfer_status", lambda: None)
        rc = 0
        for bid in batch_ids:
            try:
                st = self._core.wait_batch(unsigned(bid, "batch id"), -1)
                self._core.free_batch(int(bid))
            except (KvfabricError, ValueError, TypeError, OverflowError) as e:
                _log("error", f"get_batch_transfer_status: batch {bid}: {e}")
                rc = -1
                continue
            if st[0] != _COMPLETED:
                _log("error", f"get_batch_transfer_status: batch {bid}: {st[3]}")
                rc = -1
        return rc

    def transfer_check_status(self, batch_id: int) -> int:
        """1 completed, 0 still running, -1 failed (or unknown id), -2 timed out.
        A completed or failed batch is freed (its id is then unknown); a timed
        out one keeps answering -2, as in Mooncake."""
        if self._core is None:
            return self._call("transfer_check_status", lambda: None)
        try:
            state, _, _, error = self._core.batch_status(unsigned(batch_id, "batch id"))
        except (KvfabricError, ValueError, TypeError, OverflowError) as e:
            _log("error", f"transfer_check_status: batch {batch_id}: {e}")
            return -1
        if state == _PENDING:
            return 0
        if state == _TIMEOUT:
            return -2
        self._core.free_batch(int(batch_id))
        if state == _COMPLETED:
            return 1
        _log("error", f"transfer_check_status: batch {batch_id}: {error}")
        return -1

    # -- transfers ordered after a CUDA stream ------------------------------
    def _on_cuda(self, what: str, target: str, op: int, buffers, peers, lengths, stream_ptr: int) -> None:
        """Mooncake enqueues the transfer on the stream; kvfabric waits for the
        stream's work here, then moves the bytes before returning, so work the
        caller queues afterwards sees them (docs/python.md: the caller's
        thread blocks, where Mooncake's returns at once)."""
        from .. import _core

        if self._core is None:
            raise RuntimeError(f"{what}: the engine is not initialized; call initialize() first")
        if not (len(buffers) == len(peers) == len(lengths)):
            raise RuntimeError("buffers, peer_buffer_addresses and lengths have different size")
        reason = _bad_number(buffers=buffers, peer_buffer_addresses=peers, lengths=lengths)
        if reason is not None:
            raise RuntimeError(f"{what} to {target}: {reason}")
        try:
            stream = unsigned(stream_ptr, "stream_ptr")
            device = next((d for d in map(_core.cuda_device_of, buffers) if d >= 0), 0)
            _core.cuda_stream_synchronize(stream, device)
            self._core.transfer_to(target, op, buffers, peers, lengths)
        except (KvfabricError, TypeError) as e:
            raise RuntimeError(f"{what} to {target}: {_why(e, target)}") from e

    def transfer_write_on_cuda(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        stream_ptr: int = 0,
        transport_hint: str = "",
    ) -> None:
        self._on_cuda(
            "transfer_write_on_cuda", target_hostname, _WRITE, [buffer], [peer_buffer_address], [length], stream_ptr
        )

    def transfer_read_on_cuda(
        self,
        target_hostname: str,
        buffer: int,
        peer_buffer_address: int,
        length: int,
        stream_ptr: int = 0,
        transport_hint: str = "",
    ) -> None:
        self._on_cuda(
            "transfer_read_on_cuda", target_hostname, _READ, [buffer], [peer_buffer_address], [length], stream_ptr
        )

    def batch_transfer_write_on_cuda(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        stream_ptr: int = 0,
        transport_hint: str = "",
    ) -> None:
        self._on_cuda(
            "batch_transfer_write_on_cuda", target_hostname, _WRITE, buffers, peer_buffer_addresses, lengths, stream_ptr
        )

    def batch_transfer_read_on_cuda(
        self,
        target_hostname: str,
        buffers: Sequence[int],
        peer_buffer_addresses: Sequence[int],
        lengths: Sequence[int],
        stream_ptr: int = 0,
        transport_hint: str = "",
    ) -> None:
        self._on_cuda(
            "batch_transfer_read_on_cuda", target_hostname, _READ, buffers, peer_buffer_addresses, lengths, stream_ptr
        )

    # -- segments, peers, notifications -----------------------------------
    def get_first_buffer_address(self, segment_name_: str) -> int:
        def go():
            bufs = self._core.segment_buffers(self._core.open_segment(segment_name(segment_name_)))
            return bufs[0][0] if bufs else 0

        return self._call("get_first_buffer_address", go, failure=0)

    def warmup_efa_segment(self, segment_name_: str) -> int:
        return self._call("warmup_efa_segment", lambda: self._core.warmup(segment_name(segment_name_)))

    def send_probe(self, peer_server_name: str) -> int:
        return self._call("send_probe", lambda: self._core.probe(segment_name(peer_server_name)))

    def get_notifies(self) -> List[TransferNotify]:
        if self._core is None:
            return []
        # Each message decodes on its own and none can fail to: a message that
        # is not the shim's JSON is kept whole as msg.
        return [TransferNotify._from_payload(body) for body in self._core.get_notifies()]

    def close(self) -> None:
        """Not in Mooncake's API: stops the engine and frees managed buffers."""
        if self._metric is not None:  # stopped before the engine it reads goes
            self._metric.stop.set()
            self._metric.join()
            self._metric = None
        if self._engine is not None:
            self._engine.close()
            self._engine = None
            self._core = None
        while self._managed:
            _, (mm, view) = self._managed.popitem()
            del view
            mm.close()
        self._regions.clear()
