"""Weight sync for RL: a trainer rank's tensors to every rollout rank.

One ``WeightSync`` per process of a sync, each on its own ``Engine``: member 0
sends, the others receive. Every member gives ``describe()`` to the caller,
which hands the whole list to each member's ``connect``; then, for each
version of the weights, the sender calls ``send(version, tensors)`` while
each receiver iterates ``receive(version)``. Receivers pass each bucket on
to the receivers behind them, so the sender's link carries each byte once
(docs/design/weights.md).

    sync = WeightSync(engine, bucket_bytes=64 << 20)
    descriptions = gather(sync.describe())      # the caller's own means
    sync.connect(descriptions, rank)
    sync.send(step, model.named_parameters())   # rank 0
    for name, tensor in sync.receive(step):     # the others
        load(name, tensor)                      # a view: copy what you keep
"""

from __future__ import annotations

import ctypes
from typing import Any, Iterable, Iterator, Sequence

import numpy as np

from . import _core
from .engine import Engine, timeout_ms
from .errors import InvalidArgumentError


def _torch():
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise InvalidArgumentError("torch=True needs torch installed") from e
    return torch


def _tensor_info(name: str, t: Any) -> tuple[str, list[int], int, int, Any]:
    """(dtype, shape, address, nbytes, keep) of a numpy array or a CPU torch
    tensor; ``keep`` holds a contiguous copy when ``t`` was not contiguous."""
    if isinstance(t, np.ndarray):
        # ascontiguousarray would make a 0-d array 1-d: copy only what needs it.
        a = t if t.flags.c_contiguous else np.ascontiguousarray(t)
        return str(a.dtype), list(t.shape), a.ctypes.data, a.nbytes, a
    if type(t).__module__.startswith("torch"):
        if t.device.type != "cpu":
            raise InvalidArgumentError(f"tensor {name} is on {t.device}; send CPU tensors")
        c = t.contiguous()
        return str(c.dtype).removeprefix("torch."), list(c.shape), c.data_ptr(), c.numel() * c.element_size(), c
    raise InvalidArgumentError(f"tensor {name} is a {type(t).__name__}: send numpy arrays or torch tensors")


def _view(dtype: str, shape: list[int], addr: int, nbytes: int, torch: bool) -> Any:
    raw = (
        np.frombuffer((ctypes.c_ubyte * nbytes).from_address(addr), dtype=np.uint8)
        if nbytes > 0
        else np.empty(0, dtype=np.uint8)
    )
    if torch:
        t = _torch()
        return t.from_numpy(raw).view(getattr(t, dtype)).reshape(tuple(shape))
    try:
        kind = np.dtype(dtype)
    except TypeError:
        raise InvalidArgumentError(
            f"a tensor of dtype {dtype} has no numpy dtype: receive it with torch=True"
        ) from None
    return raw.view(kind).reshape(tuple(shape))


class WeightSync:
    """One member of a weight sync, on ``engine`` (kept alive with it).

    ``bucket_bytes``: tensor bytes per bucket (one WRITE each);
    ``manifest_bytes``: room for a bucket's list of tensor pieces; ``slots``:
    buckets in flight to each receiver; ``timeout``: the longest wait, in
    seconds, for a bucket or a slot given back, after which the error names
    the member waited for; ``host`` and ``rails``: where this member runs, for
    the relay plan (default: the engine's host and rail count). Every member
    of a sync takes the same ``bucket_bytes``, ``manifest_bytes`` and
    ``slots``."""

    def __init__(
        self,
        engine: Engine,
        *,
        bucket_bytes: int = 64 << 20,
        manifest_bytes: int = 1 << 20,
        slots: int = 2,
        timeout: float = 30.0,
        host: str = "",
        rails: int = 0,
    ):
        self._engine = engine
        self._core = _core.WeightSync(
            engine._core, bucket_bytes, manifest_bytes, slots, timeout_ms(timeout), host, rails
        )

    def close(self) -> None:
        """Unregisters the slots (idempotent); the sync cannot be used after."""
        self._core.close()

    def __enter__(self) -> "WeightSync":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def describe(self) -> str:
        """What the other members need of this one (a JSON string)."""
        return self._core.describe()

    def connect(self, members: Sequence[str], me: int) -> None:
        """Every member's ``describe()``, the sender's first; ``me``: this one's index."""
        self._core.connect(list(members), me)

    def stats(self) -> dict:
        """Where this member's time went since it was created, in seconds:
        ``copy_s`` (tensors into slots, or gathering tensors that span
        buckets), ``checksum_s``, ``notice_wait_s`` (waiting for a bucket or a
        slot given back), ``write_wait_s`` (for its own WRITEs); and
        ``buckets`` and ``bytes``."""
        return self._core.stats()

    @property
    def parents(self) -> list[int]:
        """Each member's parent in the relay plan (-1 for the sender)."""
        return self._core.parents()

    def send(self, version: int, tensors: Iterable[tuple[str, Any]]) -> None:
        """Sends ``(name, tensor)`` pairs (numpy arrays or CPU torch tensors) as
        ``version``; returns once the receivers it writes to have them all."""
        self.begin_send(version)
        for name, t in tensors:
            self.put(name, t)
        self.end_send()

    def begin_send(self, version: int) -> None:
        """``send`` one tensor at a time, for tensors that come from an async
        generator: ``begin_send(version)``, ``put`` for each, ``end_send()``."""
        self._core.begin_send(version)

    def put(self, name: str, tensor: Any) -> None:
        """The next tensor of the version begun (copied before it returns)."""
        dtype, shape, addr, nbytes, keep = _tensor_info(name, tensor)
        self._core.send(name, dtype, shape, addr, nbytes)
        del keep

    def end_send(self) -> None:
        """Sends what is packed; returns once the receivers written to have it all."""
        self._core.end_send()

    def receive(self, version: int, torch: bool = False) -> Iterator[tuple[str, Any]]:
        """``(name, tensor)`` in the sender's order, each checked, as numpy arrays
        (or torch tensors with ``torch=True``). A tensor is a view of this
        member's slot or buffer, valid until the next one is taken: copy what
        you keep."""
        self._core.begin_receive(version)
        while (got := self._core.next()) is not None:
            name, dtype, shape, addr, nbytes = got
            yield name, _view(dtype, shape, addr, nbytes, torch)
