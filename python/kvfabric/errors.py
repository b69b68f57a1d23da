"""Exceptions raised by kvfabric: one class per engine status code.

Every exception carries the engine's own message (what failed, where, what to
do) and its numeric ``code`` (the C++ ``Status::Code``; the C API returns it
negated).
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
    """libfabric reported an error (for example, the peer died)."""

    code = 6


class NetworkError(KvfabricError, ConnectionError):
    """The handshake connection to a peer failed or broke."""

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
    """The peer refused this engine."""

    code = 11


ERROR_CLASSES = {
    cls.code: cls
    for cls in (
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
    )
}


def error_for(code: int, message: str) -> KvfabricError:
    """The exception for an engine status code."""
    return ERROR_CLASSES.get(code, KvfabricError)(message, code)
