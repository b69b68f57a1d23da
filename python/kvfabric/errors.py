"""Exceptions raised by kvfabric: one class per engine status code.

Every exception carries the engine's own message (what failed, where, what to
do) and its numeric ``code`` (the C++ ``Status::Code``; the C API returns it
negated). The codes are declared once, in ``include/kvfabric/codes.h``; when
the engine loads, ``register`` checks these classes against that declaration
(``_core.status_codes()``) and refuses to import on any difference.
"""

from __future__ import annotations


class KvfabricError(RuntimeError):
    """Base class of every kvfabric error."""

    code = 10

    def __init__(self, message: str, code: int | None = None):
        super().__init__(message)
        if code is not None:
            self.code = code


class InvalidArgumentError(KvfabricError, ValueError):
    """Bad input from the caller; nothing was changed."""

    code = 1


class NotFoundError(KvfabricError, LookupError):
    """Unknown segment, buffer, batch or peer."""

    code = 2


class OutOfRangeError(KvfabricError, ValueError):
    """A local or remote range outside registered memory."""

    code = 3


class BusyError(KvfabricError):
    """The object still has work in flight."""

    code = 4


class TransferTimeoutError(KvfabricError, TimeoutError):
    """A deadline passed (KVF_TRANSFER_TIMEOUT_MS, or the wait's timeout)."""

    code = 5


class FabricError(KvfabricError):
    """libfabric failed the operation itself (bad key or address)."""

    code = 6


class NetworkError(KvfabricError, ConnectionError):
    """A peer could not be reached, or was lost with work in flight."""

    code = 7


class ProtocolError(KvfabricError):
    """A peer sent a malformed message."""

    code = 8


class UnavailableError(KvfabricError):
    """The provider or feature is not available on this machine."""

    code = 9


class InternalError(KvfabricError):
    """A bug in kvfabric: please report it with the message."""

    code = 10


class PermissionDeniedError(KvfabricError, PermissionError):
    """The peer refused this engine (auth token), or a WRITE into read-only memory."""

    code = 11


class ClosedError(KvfabricError):
    """The engine is closed (``close()``), or this process is a fork of the one
    that created it: the copy belongs to the parent; create a new Engine."""

    code = 12


_CLASSES = (
    InvalidArgumentError,
    NotFoundError,
    OutOfRangeError,
    BusyError,
    TransferTimeoutError,
    FabricError,
    NetworkError,
    ProtocolError,
    UnavailableError,
    InternalError,
    PermissionDeniedError,
    ClosedError,
)

ERROR_CLASSES = {cls.code: cls for cls in _CLASSES}

# The class of a declared code ``Name`` is ``NameError`` (``Name`` when it
# already ends in Error), except:
_CLASS_NAMES = {"Timeout": "TransferTimeoutError"}  # not the builtin TimeoutError


def _class_name(name: str) -> str:
    """The exception class name for a status code's declared name."""
    return _CLASS_NAMES.get(name, name if name.endswith("Error") else name + "Error")


def check_codes(rows) -> None:
    """Raises ImportError unless the classes here are exactly the engine's codes.

    ``rows``: ``(name, code, C constant, meaning)`` per failure code, as
    ``_core.status_codes()`` returns them. Every code needs its class, named
    for it, with that ``code``; every class needs a declared code."""
    problems = []
    if len(ERROR_CLASSES) != len(_CLASSES):
        problems.append("two classes share a code: " + ", ".join(f"{c.__name__}={c.code}" for c in _CLASSES))
    declared = set()
    for name, code, c_name, _meaning in rows:
        declared.add(code)
        cls = ERROR_CLASSES.get(code)
        if cls is None:
            problems.append(f"code {code} ({name}, {c_name}) has no class: add {_class_name(name)} with code = {code}")
        elif cls.__name__ != _class_name(name):
            problems.append(f"code {code} is {name} ({c_name}) in the engine, but {cls.__name__} here")
        if name == "Internal" and KvfabricError.code != code:
            problems.append(f"KvfabricError.code is {KvfabricError.code}, not Internal's {code}")
    for code, cls in sorted(ERROR_CLASSES.items()):
        if code not in declared:
            problems.append(f"{cls.__name__}.code = {code} is no code of the engine")
    if problems:
        raise ImportError(
            "kvfabric.errors does not match the engine's status codes (include/kvfabric/codes.h):\n  "
            + "\n  ".join(problems)
        )


def register(core) -> None:
    """Checks the classes against ``kvfabric._core`` and registers them there:
    a failed engine call then raises its code's class."""
    check_codes(core.status_codes())
    core._set_error_classes(dict(ERROR_CLASSES))


def error_for(code: int, message: str) -> KvfabricError:
    """The exception for an engine status code."""
    return ERROR_CLASSES.get(code, KvfabricError)(message, code)
