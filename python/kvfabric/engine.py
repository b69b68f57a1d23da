"""The Pythonic engine: buffers in, exceptions out, the GIL released while bytes move."""

from __future__ import annotations

import asyncio
import math
import numbers
import operator
import threading
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence, Union

from . import _core
from . import errors
from .errors import InvalidArgumentError, TransferTimeoutError, error_for

errors.register(_core)  # ImportError when the classes differ from the engine's codes

# DLPack device types (dlpack.h): the ones the engine knows.
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST = 1, 2, 3


# The engine's enums, generated from include/kvfabric/codes.h: IntEnums, so a
# member equals the number the C API and the C++ engine use (TaskState.FAILED == 2).
TaskState = _core.TaskState  # PENDING, COMPLETED, FAILED, TIMEOUT
OpCode = _core.OpCode  # READ, WRITE
# Shorter names of the same classes.
State = TaskState
Op = OpCode


@dataclass(frozen=True)
class Segment:
    """An opened peer segment (or this engine's own)."""

    name: str
    handle: int


@dataclass(frozen=True)
class RemoteBuffer:
    """A buffer a peer registered: its address in the peer's process."""

    addr: int
    length: int
    location: str


@dataclass(frozen=True)
class Request:
    """One READ or WRITE: ``local`` is an int address or a buffer object.
    ``notice`` (1-65535, WRITE only) tells the target's engine when every
    byte has landed: its ``take_notices()`` returns the value once."""

    op: Op
    local: Any
    remote_addr: int
    length: int | None = None
    segment: Union[Segment, str, None] = None
    notice: int = 0


@dataclass(frozen=True)
class Status:
    state: State
    transferred_bytes: int
    error: str  # the engine's message when FAILED or TIMEOUT, else ""
    code: int = 0  # its status code (see kvfabric.errors)


Local = Any  # int address, or an object with the buffer protocol or DLPack

# The largest wait the engine takes in milliseconds (its argument is an
# int64_t); longer ones, and float("inf"), wait without limit.
_MAX_WAIT_MS = (1 << 63) - 1


def unsigned(value: Any, what: str, limit: int = 1 << 64) -> int:
    """``value`` as an int in [0, limit), or InvalidArgumentError saying what is
    wrong with it. Ints and integer types (numpy) only: a float or a str would
    be truncated or parsed, never what the caller meant."""
    if isinstance(value, bool):
        raise InvalidArgumentError(f"{what} must be an integer, not a bool ({value!r})")
    try:
        n = operator.index(value)
    except TypeError:
        raise InvalidArgumentError(f"{what} must be an integer, not {type(value).__name__} {value!r}") from None
    if not 0 <= n < limit:
        raise InvalidArgumentError(f"{what} {n} is out of range: give 0 to {limit - 1}")
    return n


def timeout_ms(timeout: Any) -> int:
    """The engine's wait in milliseconds for a timeout in seconds. None and
    float("inf") are -1 (no limit); a wait longer than the engine can count
    (2^63 - 1 ms) is clamped, and the engine waits without limit; a negative
    or NaN timeout, or one that is not a number, is an InvalidArgumentError."""
    if timeout is None:
        return -1
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise InvalidArgumentError(
            f"timeout must be a number of seconds or None, not {type(timeout).__name__} {timeout!r}"
        )
    if isinstance(timeout, numbers.Integral):
        seconds = int(timeout)
        ms = seconds * 1000
    else:
        seconds = float(timeout)
        if math.isnan(seconds):
            raise InvalidArgumentError("timeout is NaN: give a number of seconds >= 0, or None to wait without limit")
        ms = seconds * 1000.0
    if seconds < 0:
        raise InvalidArgumentError(
            f"timeout {timeout!r} s is negative: give seconds >= 0, or None to wait without limit"
        )
    if seconds == math.inf:
        return -1
    return _MAX_WAIT_MS if ms >= _MAX_WAIT_MS else math.ceil(ms)


def notify_payload(message: Any) -> bytes:
    """The bytes a notification carries: bytes-like objects as they are, a str
    as UTF-8."""
    if isinstance(message, str):
        try:
            return message.encode("utf-8")
        except UnicodeEncodeError as e:
            raise InvalidArgumentError(
                f"the message is a str that UTF-8 cannot encode ({e.reason} at index "
                f"{e.start}); pass bytes to send arbitrary bytes"
            ) from None
    if isinstance(message, (bytes, bytearray, memoryview)):
        return bytes(message)
    raise InvalidArgumentError(f"a notification is bytes or str, not {type(message).__name__}")


def buffer_address(buf: Local, length: int | None = None, writable: bool = False) -> tuple[int, int, str]:
    """(address, nbytes, location) of ``buf``; ``length`` caps or, for an int
    address, gives the size. ``writable`` refuses read-only objects (bytes)."""
    if isinstance(buf, bool):
        raise InvalidArgumentError(f"a bool is not a buffer: {buf!r}")
    if isinstance(buf, numbers.Integral) and not isinstance(buf, int):
        buf = operator.index(buf)  # a numpy integer is an address, not a one-element array
    elif isinstance(buf, numbers.Number) and not isinstance(buf, int):
        raise InvalidArgumentError(f"an address must be an integer, not {type(buf).__name__} {buf!r}")
    if length is not None:
        if isinstance(length, bool) or not hasattr(type(length), "__index__"):
            raise InvalidArgumentError(f"length {length!r} is not a positive byte count (an integer)")
        length = operator.index(length)
        if not 0 < length < 1 << 63:
            raise InvalidArgumentError(f"length {length} is not a positive byte count")
    if isinstance(buf, int):
        if length is None:
            raise InvalidArgumentError("an int address needs a length")
        if not 0 < buf < 1 << 64 or buf + length > 1 << 64:
            raise InvalidArgumentError(f"address {buf:#x} with length {length} is outside the address space")
        return buf, length, "*"  # the engine asks the CUDA driver: host or cuda:N
    try:
        addr, nbytes, dev_type, dev_id, readonly = _core.buffer_info(buf)
    except TypeError:
        span = _tensor_span(buf)
        if span is None:
            raise
        addr, nbytes, dev_type, dev_id, readonly = span
    if readonly and writable:
        raise InvalidArgumentError(
            f"a read-only {type(buf).__name__} cannot be registered: peers could write into it; "
            "use a bytearray or a writable array"
        )
    if dev_type in (_DL_CPU, _DL_CUDA_HOST):
        location = "*"  # host memory: the engine finds its NUMA node
    elif dev_type == _DL_CUDA:
        location = f"cuda:{dev_id}"
    else:
        raise InvalidArgumentError(f"memory on DLPack device type {dev_type} is not supported (CPU or CUDA only)")
    if length is not None:
        if length > nbytes:
            raise InvalidArgumentError(f"length {length} exceeds the buffer's {nbytes} bytes")
        nbytes = length
    return addr, nbytes, location


def _tensor_span(buf: Any):
    """buffer_info's answer for an object that offers only torch's ``data_ptr()``,
    ``numel()`` and ``element_size()`` (a contiguous tensor-like, as SGLang's host
    pools may hand over); None for anything else. Its device, when it names one
    (``device.type`` "cuda", ``device.index``), says where the memory is."""
    if not all(callable(getattr(buf, name, None)) for name in ("data_ptr", "numel", "element_size")):
        return None
    if callable(getattr(buf, "is_contiguous", None)) and not buf.is_contiguous():
        raise InvalidArgumentError(f"a {type(buf).__name__} that is not contiguous has no one span of memory")
    device = getattr(buf, "device", None)
    cuda = getattr(device, "type", "cpu") == "cuda"
    return (
        int(buf.data_ptr()),
        int(buf.numel()) * int(buf.element_size()),
        _DL_CUDA if cuda else _DL_CPU,
        int(getattr(device, "index", 0) or 0) if cuda else 0,
        False,
    )


def _pin(buf: Local):
    """What keeps a registered object's memory in place until it is
    unregistered: a buffer export where the object has one (a bytearray
    cannot be resized, nor a numpy array resized in place, while it exists),
    else the object itself (kept alive)."""
    try:
        return memoryview(buf)
    except TypeError:
        return buf


def _unpin(kept) -> None:
    if isinstance(kept, memoryview):
        kept.release()


def _opcode(op: Any) -> int:
    n = unsigned(op, "opcode", 1 << 32)
    if n not in (int(OpCode.READ), int(OpCode.WRITE)):
        raise InvalidArgumentError(
            f"opcode {n}: use OpCode.READ ({int(OpCode.READ)}) or OpCode.WRITE ({int(OpCode.WRITE)})"
        )
    return n


class Transfer:
    """A submitted batch: ``wait()``, ``done()``, ``status()``, or ``await`` it."""

    def __init__(self, engine: "Engine", batch: int, lengths: list[int], keep: list):
        self._engine = engine
        self._batch = batch
        self._lengths = lengths  # per request: what a completed task moved
        self._keep = keep  # the buffer objects stay alive while bytes move
        self._final: Status | None = None
        self._tasks: list[Status] = []  # per-task outcome of a batch that did not complete
        self._lock = threading.Lock()

    def _task(self, index: int) -> Status:
        st = self._engine._core.task_status(self._batch, index)
        return Status(State(st[0]), st[1], st[3], st[2])

    def _finish(self, st: tuple) -> Status:
        status = Status(State(st[0]), st[1], st[3], st[2])
        if status.state != State.PENDING:
            with self._lock:
                if self._final is None:
                    # The batch is freed now: keep what task_status() must still answer.
                    if status.state != State.COMPLETED:
                        self._tasks = [self._task(i) for i in range(len(self._lengths))]
                    self._final = status
                    self._engine._core.free_batch(self._batch)
                    self._keep = []
        return status

    def status(self) -> Status:
        """The batch's aggregate status now (never blocks)."""
        if self._final is not None:
            return self._final
        return self._finish(self._engine._core.batch_status(self._batch))

    def task_status(self, index: int) -> Status:
        """The status of request ``index`` of this batch."""
        index = unsigned(index, "task index")
        if self._final is None:
            return self._task(index)
        if not 0 <= index < len(self._lengths):
            raise InvalidArgumentError(f"task {index} of a batch of {len(self._lengths)}")
        if self._final.state == State.COMPLETED:
            return Status(State.COMPLETED, self._lengths[index], "", 0)
        return self._tasks[index]

    def done(self) -> bool:
        return self.status().state != State.PENDING

    def wait(self, timeout: float | None = None) -> int:
        """Blocks (GIL released) until every request ended; returns the bytes
        moved, or raises the first failure. ``timeout`` in seconds (None or
        ``inf``: no limit; 0: a poll); negative or NaN is an InvalidArgumentError."""
        ms = timeout_ms(timeout)
        if self._final is None:
            st = self._finish(self._engine._core.wait_batch(self._batch, ms))
            if st.state == State.PENDING:
                raise TransferTimeoutError(f"transfer still running after {timeout} s")
        final = self._final
        if final.state != State.COMPLETED:
            raise error_for(final.code, final.error)
        return final.transferred_bytes

    def expire(self) -> Status:
        """Ends the requests still running now, as their deadline would
        (TIMEOUT, or FAILED where one had failed already), and returns the
        batch's final status. Over tcp and verbs (unless
        KVF_CLOSE_CONNECTIONS=off) the connections that carry them are closed
        first, so once this returns none of them writes the buffers, which
        may then hold other data (on efa an operation the device still holds
        may complete later). Does nothing to a batch that has ended."""
        if self._final is None:
            self._engine._core.expire_batch(self._batch)
        return self.status()

    def __await__(self):
        loop = asyncio.get_running_loop()
        return loop.run_in_executor(None, self.wait).__await__()


class Engine:
    """One kvfabric engine: registered memory, peers, one-sided READ/WRITE.

    >>> with Engine(protocol="tcp") as e:
    ...     buf = bytearray(1 << 20)
    ...     e.register(buf)
    ...     peer = e.open("10.0.0.2:15000")
    ...     e.write(peer, buf, remote_addr)
    """

    def __init__(
        self,
        local_server_name: str = "127.0.0.1:0",
        metadata: str = "p2p",
        protocol: str = "auto",
        nic_filter: str = "",
        settings: Mapping[str, Any] | None = None,
    ):
        sets = {k: str(int(v) if isinstance(v, bool) else v) for k, v in (settings or {}).items()}
        self._core = _core.Engine(local_server_name, metadata, protocol, nic_filter, sets)
        self._registered: dict[int, Any] = {}
        self._segments: dict[str, Segment] = {}

    # -- life cycle -------------------------------------------------------
    def close(self) -> None:
        """Stops the engine (idempotent); in-flight requests fail."""
        self._core.close()
        for kept in self._registered.values():
            _unpin(kept)
        self._registered.clear()
        self._segments.clear()

    @property
    def closed(self) -> bool:
        return self._core.closed

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def name(self) -> str:
        """The name peers open this engine by: ``host:port``."""
        return self._core.name

    def rails(self) -> list[dict]:
        return self._core.rails()

    def stats(self) -> dict:
        """Everything the engine counted, as the metrics endpoint serves it
        (docs/metrics.md): ``rails`` (bytes and operations by op, errors,
        stalls, in service, queued, credits in use, AV slots), ``peers``
        (requests, bytes and failures per peer segment; ``other`` holds the
        peers past KVF_METRICS_PEER_LABELS, ``self`` local copies),
        ``failures`` (by op and status code), ``latency`` (submit to
        completion by op and size class: ``buckets`` of (upper bound in
        seconds, count)), ``reroutes``, ``registrations`` (by location),
        handshake and metadata errors, ``segments_open``,
        ``notice_messages`` (WRITEs' notices sent as messages: ``sent``,
        ``failed``), and ``metrics_address`` (the endpoint, or "").
        Counters only grow."""
        return self._core.stats()

    def settings(self) -> dict[str, str]:
        return self._core.settings()

    # -- memory -----------------------------------------------------------
    def register(self, buf: Local, length: int | None = None, location: str | None = None) -> int:
        """Registers memory for transfers and remote access; returns its address.

        ``buf`` is an int address (with ``length``), or a bytearray, memoryview,
        numpy array, torch tensor or any DLPack object (kept alive until
        unregistered). ``location`` ("cpu:N", "cuda:N" or "*") defaults to the
        object's DLPack device, and for an int address to "*": the engine asks
        the CUDA driver whether it is device memory (a raw CUDA tensor
        pointer registers as cuda:N), else host memory on its NUMA node.
        """
        addr, nbytes, loc = buffer_address(buf, length, writable=True)
        kept = None if isinstance(buf, numbers.Number) else _pin(buf)
        try:
            self._core.register(addr, nbytes, location or loc)
        except BaseException:
            _unpin(kept)
            raise
        if kept is not None:
            self._registered[addr] = kept
        return addr

    def unregister(self, buf: Local) -> None:
        addr = unsigned(buf, "address") if isinstance(buf, numbers.Number) else buffer_address(buf)[0]
        self._core.unregister(addr)
        _unpin(self._registered.pop(addr, None))

    def register_many(self, bufs: Iterable[Local | tuple[int, int]], location: str | None = None) -> list[int]:
        """Registers several buffers at once (all or none)."""
        entries, objs = [], []
        for b in bufs:
            addr, nbytes, loc = buffer_address(*b) if isinstance(b, tuple) else buffer_address(b, writable=True)
            entries.append((addr, nbytes, location or loc))
            objs.append(None if isinstance(b, tuple) else _pin(b))
        try:
            self._core.register_batch(entries)
        except BaseException:
            for o in objs:
                _unpin(o)
            raise
        for (addr, _, _), o in zip(entries, objs):
            if o is not None:
                self._registered[addr] = o
        return [e[0] for e in entries]

    def unregister_many(self, bufs: Iterable[Local]) -> None:
        addrs = [unsigned(b, "address") if isinstance(b, numbers.Number) else buffer_address(b)[0] for b in bufs]
        self._core.unregister_batch(addrs)
        for a in addrs:
            _unpin(self._registered.pop(a, None))

    # -- segments ---------------------------------------------------------
    def open(self, name: str) -> Segment:
        """Opens a peer's segment by name (``host:port``); cached."""
        seg = self._segments.get(name)
        if seg is None:
            seg = Segment(name, self._core.open_segment(name))
            self._segments[name] = seg
        return seg

    def close_segment(self, segment: Segment | str) -> None:
        seg = self._segment(segment)
        self._core.close_segment(seg.handle)
        self._segments.pop(seg.name, None)

    def buffers(self, segment: Segment | str) -> list[RemoteBuffer]:
        """The peer's registered buffers, fetched now."""
        return [RemoteBuffer(*b) for b in self._core.segment_buffers(self._segment(segment).handle)]

    def warmup(self, segment: Segment | str) -> None:
        """Connects every rail pair of the peer in one round trip (idempotent)."""
        self._core.warmup(segment.name if isinstance(segment, Segment) else segment)

    def probe(self, name: str) -> None:
        """One handshake round trip; raises when the peer's engine does not answer."""
        self._core.probe(name)

    def notify(self, name: str, message: bytes | bytearray | memoryview | str) -> None:
        """Delivers a short message (at most 1 MiB) to a peer's engine, read there
        with ``notifies()``. A message is any bytes; a str is sent as UTF-8. A
        peer holding 4096 unread messages or 64 MiB of them refuses more with
        ``BusyError``; nothing is dropped."""
        self._core.send_notify(name, notify_payload(message))

    def notifies(self) -> list[bytes]:
        """Takes the messages peers sent to this engine, oldest first, as the
        bytes sent (``.decode()`` those known to be text)."""
        return self._core.get_notifies()

    def take_notices(self) -> list[int]:
        """The notices (``Request.notice``) of WRITEs that landed whole in this
        engine's memory since the last call, in the order they did, each once."""
        return self._core.take_notices()

    def wait_notices(self, timeout: float | None = None) -> list[int]:
        """``take_notices()``, waiting up to ``timeout`` seconds (None: no
        limit) for at least one; ``TransferTimeoutError`` (a ``TimeoutError``)
        when none came."""
        return self._core.wait_notices(timeout_ms(timeout))

    def _segment(self, segment: Segment | str) -> Segment:
        return segment if isinstance(segment, Segment) else self.open(segment)

    # -- transfers --------------------------------------------------------
    def _requests(self, reqs: Iterable[Request], default: Segment | str | None):
        out, keep = [], []
        for r in reqs:
            seg = r.segment if r.segment is not None else default
            if seg is None:
                raise InvalidArgumentError("request without a segment")
            op = _opcode(r.op)
            addr, nbytes, _ = buffer_address(r.local, r.length, writable=(op == Op.READ))
            notice = unsigned(r.notice, "notice", 1 << 16)
            out.append((op, addr, self._segment(seg).handle, unsigned(r.remote_addr, "remote address"), nbytes, notice))
            if not isinstance(r.local, int):
                keep.append(r.local)
        return out, keep

    def submit(self, requests: Sequence[Request], segment: Segment | str | None = None) -> Transfer:
        """Submits requests (any mix of READ and WRITE) and returns at once."""
        reqs, keep = self._requests(requests, segment)
        batch = self._core.allocate_batch(max(1, len(reqs)))
        try:
            self._core.submit(batch, reqs)
        except BaseException:
            self._core.free_batch(batch)
            raise
        return Transfer(self, batch, [r[4] for r in reqs], keep)

    def transfer(self, requests: Sequence[Request], segment: Segment | str | None = None) -> None:
        """Submits and waits (GIL released); raises the first failure."""
        reqs, _keep = self._requests(requests, segment)
        self._core.transfer(reqs)

    def write(self, segment: Segment | str, local: Local, remote_addr: int, length: int | None = None) -> None:
        self.transfer([Request(Op.WRITE, local, remote_addr, length)], segment)

    def read(self, segment: Segment | str, local: Local, remote_addr: int, length: int | None = None) -> None:
        self.transfer([Request(Op.READ, local, remote_addr, length)], segment)

    def write_many(self, segment: Segment | str, items: Iterable[tuple]) -> None:
        """``items``: (local, remote_addr[, length]) tuples, one batch."""
        self.transfer([Request(Op.WRITE, *it) for it in items], segment)

    def read_many(self, segment: Segment | str, items: Iterable[tuple]) -> None:
        self.transfer([Request(Op.READ, *it) for it in items], segment)

    def write_async(
        self, segment: Segment | str, local: Local, remote_addr: int, length: int | None = None
    ) -> Transfer:
        return self.submit([Request(Op.WRITE, local, remote_addr, length)], segment)

    def read_async(self, segment: Segment | str, local: Local, remote_addr: int, length: int | None = None) -> Transfer:
        return self.submit([Request(Op.READ, local, remote_addr, length)], segment)

    def write_many_async(self, segment: Segment | str, items: Iterable[tuple]) -> Transfer:
        return self.submit([Request(Op.WRITE, *it) for it in items], segment)

    def read_many_async(self, segment: Segment | str, items: Iterable[tuple]) -> Transfer:
        return self.submit([Request(Op.READ, *it) for it in items], segment)
