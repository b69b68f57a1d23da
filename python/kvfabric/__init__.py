"""kvfabric: one-sided READ/WRITE of registered memory between processes and
hosts over libfabric (EFA, tcp, shm, verbs), for KV-cache and weight transfer.

>>> import kvfabric
>>> with kvfabric.Engine(protocol="tcp", local_server_name="10.0.0.3:0") as e:
...     buf = bytearray(1 << 20)
...     e.register(buf)
...     peer = e.open("10.0.0.2:15000")          # the peer's e.name
...     remote = e.buffers(peer)[0].addr         # the first buffer it registered
...     e.write(peer, buf, remote)               # GIL released while it runs
...     t = e.read_async(peer, buf, remote)
...     t.wait()                                  # or: await t

README.md ("Using the engine") has a target and an initiator that run as printed.
"""

from typing import TYPE_CHECKING

from .errors import (
    BusyError,
    ClosedError,
    FabricError,
    InternalError,
    InvalidArgumentError,
    KvfabricError,
    NetworkError,
    NotFoundError,
    OutOfRangeError,
    PermissionDeniedError,
    ProtocolError,
    TransferTimeoutError,
    UnavailableError,
)

__version__ = "0.1.0"

# The engine (and with it libfabric) loads on first use, so importing the
# package, or its Mooncake shim at interpreter start, costs nothing.
_ENGINE_NAMES = (
    "Engine",
    "Op",
    "OpCode",
    "RemoteBuffer",
    "Request",
    "Segment",
    "State",
    "Status",
    "TaskState",
    "Transfer",
    "buffer_address",
)

if TYPE_CHECKING:
    from .engine import (
        Engine,
        Op,
        OpCode,
        RemoteBuffer,
        Request,
        Segment,
        State,
        Status,
        TaskState,
        Transfer,
        buffer_address,
    )
    from .store import Store, StoreError


def __getattr__(name: str):
    if name in ("Store", "StoreError"):
        from . import store

        return getattr(store, name)
    if name in _ENGINE_NAMES:
        from . import engine

        return getattr(engine, name)
    raise AttributeError(f"module 'kvfabric' has no attribute {name!r}")


__all__ = [
    "Engine",
    "Store",
    "StoreError",
    "Op",
    "OpCode",
    "RemoteBuffer",
    "Request",
    "Segment",
    "State",
    "Status",
    "TaskState",
    "Transfer",
    "buffer_address",
    "KvfabricError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "BusyError",
    "TransferTimeoutError",
    "FabricError",
    "NetworkError",
    "ProtocolError",
    "UnavailableError",
    "InternalError",
    "PermissionDeniedError",
    "ClosedError",
]
