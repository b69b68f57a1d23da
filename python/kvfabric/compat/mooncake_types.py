"""The values ``mooncake.store`` hands its callers: error codes, put options,
replica descriptors, buffer handles and the host allocator, with Mooncake's
names, defaults and checks (``mooncake-integration/store/store_py.cpp``)."""

from __future__ import annotations

import enum
import mmap
import operator
import threading
from typing import Any, Callable, List, Optional

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


def mooncake_code(result: int) -> int:
    """A kvfabric per-key result (>= 0, or a negated status code) as Mooncake answers it."""
    return result if result >= 0 else _CODES.get(-result, INTERNAL_ERROR)


class SoftPinAction(enum.IntEnum):
    """Mooncake's soft-pin transition for a put; kvfabric has no soft pins and keeps the value only."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


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


def _refuse(name: str, value: Any, wanted: str) -> TypeError:
    return TypeError(f"ReplicateConfig.{name}: {value!r} ({type(value).__name__}) is not {wanted}")


def _unsigned64(name: str, value: Any) -> int:
    """An unsigned 64-bit integer as the binding's size_t and uint64_t take one (no float, no str)."""
    if isinstance(value, float):
        raise _refuse(name, value, "an unsigned 64-bit integer")
    try:
        n = operator.index(value)
    except TypeError:
        raise _refuse(name, value, "an unsigned 64-bit integer") from None
    if not 0 <= n < 1 << 64:
        raise _refuse(name, value, "an unsigned 64-bit integer")
    return n


def _flag(name: str, value: Any) -> bool:
    if isinstance(value, (bool, int, float)) or type(value).__name__ == "bool_":
        return bool(value)
    raise _refuse(name, value, "a bool")


def _text(name: str, value: Any) -> str:
    if not isinstance(value, str):
        raise _refuse(name, value, "a str")
    return value


def _texts(name: str, value: Any) -> List[str]:
    if isinstance(value, (str, bytes)) or not all(isinstance(s, str) for s in value):
        raise _refuse(name, value, "a list of str")
    return list(value)


def _member(kind: type) -> Callable[[str, Any], Any]:
    def check(name: str, value: Any):
        if not isinstance(value, kind):
            raise _refuse(name, value, f"a {kind.__name__}")
        return value

    return check


def _optional(check: Callable[[str, Any], Any]) -> Callable[[str, Any], Any]:
    return lambda name, value: None if value is None else check(name, value)


# ReplicateConfig's fields: (default, check). Assigning a value of the wrong
# type raises TypeError, as the binding's def_readwrite fields do.
_FIELDS = {
    "replica_num": (1, _unsigned64),
    "nof_replica_num": (0, _unsigned64),
    "dfs_replica_num": (0, _unsigned64),
    "soft_pin_action": (SoftPinAction.PRESERVE, _member(SoftPinAction)),
    "soft_pin_ttl_ms": (None, _optional(_unsigned64)),
    "with_hard_pin": (False, _flag),
    "preferred_segments": ([], _texts),
    "preferred_nof_segments": ([], _texts),
    "preferred_segment": ("", _text),
    "prefer_alloc_in_same_node": (False, _flag),
    "data_type": (ObjectDataType.UNKNOWN, _member(ObjectDataType)),
    "group_ids": (None, _optional(_texts)),
}


class ReplicateConfig:
    """Mooncake's put options, with its defaults and its type checks. kvfabric stores
    ``replica_num`` copies of each page, on the members placement ranks first for
    the key (at most KVF_STORE_MAX_COPIES); the other fields are kept for callers
    that set and read them."""

    __slots__ = tuple("_" + name for name in _FIELDS)

    def __init__(self) -> None:
        for name, (default, _) in _FIELDS.items():
            object.__setattr__(self, "_" + name, list(default) if isinstance(default, list) else default)

    def __getattr__(self, name: str) -> Any:
        if name in _FIELDS:
            return object.__getattribute__(self, "_" + name)
        raise AttributeError(f"'ReplicateConfig' object has no attribute '{name}'")

    def __setattr__(self, name: str, value: Any) -> None:
        if name not in _FIELDS:
            raise AttributeError(f"'ReplicateConfig' object has no attribute '{name}'")
        object.__setattr__(self, "_" + name, _FIELDS[name][1](name, value))

    def __copy__(self) -> "ReplicateConfig":
        out = ReplicateConfig()
        for name in _FIELDS:
            value = getattr(self, name)
            object.__setattr__(out, "_" + name, list(value) if isinstance(value, list) else value)
        return out

    def __deepcopy__(self, memo: dict) -> "ReplicateConfig":
        return self.__copy__()

    def __str__(self) -> str:
        return (
            f"ReplicateConfig(replica_num={self.replica_num}, with_hard_pin={self.with_hard_pin}, "
            f"soft_pin_action={self.soft_pin_action.name}, preferred_segment={self.preferred_segment!r})"
        )


def copies_asked(config: Optional[ReplicateConfig]) -> int:
    """The copies a put's config asks for (1 without one)."""
    return 1 if config is None else int(config.replica_num)


def config_refused(config: Any) -> Optional[str]:
    """Why a put's ``config`` is refused (Mooncake's INVALID_PARAMS), or None."""
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        return f"config is a {type(config).__name__}, not a ReplicateConfig"
    if config.replica_num == 0:
        return "config.replica_num is 0: a put stores at least one copy"
    if config.soft_pin_ttl_ms is not None and config.soft_pin_action != SoftPinAction.ENABLE:
        return (
            f"config.soft_pin_ttl_ms is set with soft_pin_action {config.soft_pin_action.name}: "
            "a soft-pin TTL goes with ENABLE only"
        )
    return None


class ReplicaDescriptor:
    """One copy of a key's page, as Mooncake's ``batch_get_replica_desc`` describes it;
    kvfabric's are always in a member's memory."""

    def is_memory_replica(self) -> bool:
        return True

    def is_disk_replica(self) -> bool:
        return False

    def is_local_disk_replica(self) -> bool:
        return False

    def __repr__(self) -> str:
        return "ReplicaDescriptor(memory)"


class BufferHandle(bytearray):
    """A page read by ``get_buffer``: its bytes (any buffer-protocol consumer reads
    them: ``memoryview``, ``numpy.frombuffer``, ``torch.frombuffer``), with
    Mooncake's ``ptr()`` and ``size()``."""

    def ptr(self) -> int:
        from .. import _core

        return _core.buffer_info(self)[0] if len(self) else 0

    def size(self) -> int:
        return len(self)

    def __repr__(self) -> str:
        return f"BufferHandle(size={len(self)})"


class HostMemory:
    """Page-aligned anonymous mappings handed out by address; ``free`` unmaps one
    unless it is still exported (then it stays mapped and free answers -1)."""

    def __init__(self) -> None:
        self._maps: dict[int, mmap.mmap] = {}
        self._lock = threading.Lock()

    def alloc(self, size: int) -> int:
        """The address of ``size`` new zeroed bytes; raises OSError or ValueError."""
        if not isinstance(size, int) or size <= 0:
            raise ValueError(f"{size!r} is not a positive size")
        m = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
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

    def addresses(self) -> List[int]:
        with self._lock:
            return list(self._maps)

    def holds(self, ptr: int, size: int) -> bool:
        """Whether [ptr, ptr + size) lies in one mapping handed out here."""
        with self._lock:
            return any(a <= ptr and ptr + size <= a + len(m) for a, m in self._maps.items())


class MooncakeHostMemAllocator:
    """Page-aligned host memory, as Mooncake's allocator hands it out (an int address)."""

    def __init__(self) -> None:
        self._memory = HostMemory()

    def alloc(self, size: int) -> int:
        try:
            return self._memory.alloc(size)
        except (OSError, ValueError) as e:
            raise RuntimeError(f"MooncakeHostMemAllocator.alloc({size!r}): {e}") from e

    def free(self, ptr: int) -> int:
        return self._memory.free(ptr)
