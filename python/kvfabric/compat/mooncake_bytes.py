"""The calls of ``mooncake.store`` that take and give Python bytes: values are
copied into the store's local buffer (host memory registered once, of
setup's ``local_buffer_size``) and put from there; pages are read into it
and copied out. Values larger than the local buffer are refused, as
Mooncake refuses them."""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Callable, List, Optional, Sequence

from ..errors import KvfabricError
from ..units import runs_within
from .mooncake import _log
from .mooncake_types import INVALID_PARAMS, BufferHandle, ReplicateConfig, config_refused, copies_asked


def _bytes_like(value: Any) -> memoryview:
    """A value's bytes, as a flat view (TypeError for an object without the buffer protocol)."""
    return memoryview(value).cast("B")


def _part(value: Any) -> memoryview:
    """One part of put_parts: a 1-D buffer of bytes, as Mooncake's binding demands."""
    view = memoryview(value)
    if view.ndim != 1 or view.itemsize != 1:
        raise RuntimeError("parts must be 1-D bytes-like")
    return view.cast("B") if view.format != "B" else view


class LocalBufferCalls:
    """The byte calls of MooncakeDistributedStore (a mixin: it uses the store's
    ``_store``, ``_engine()``, ``_batch``, ``_buffer_lock``, ``_buffer`` and
    ``_buffer_bytes``)."""

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

    def _buffer_address(self) -> int:
        from .. import _core

        return _core.buffer_info(self._buffer)[0]

    def _runs(self, sizes: Sequence[int]):
        """Runs of indices whose sizes fit the local buffer together (ValueError for one that never fits)."""
        return runs_within(
            sizes,
            self._buffer_bytes,
            "a value of {size} bytes; the local buffer holds {capacity} (setup's local_buffer_size)",
        )

    # -- puts ----------------------------------------------------------------
    def _put_views(
        self, call: str, keys: Sequence[Any], views: List[List[memoryview]], config: Optional[ReplicateConfig]
    ) -> List[int]:
        """Puts each key's parts (concatenated) through the local buffer, in runs that
        fit it. Per key 0 or a negative ErrorCode."""
        why = config_refused(config)
        if why is not None or self._store is None:
            if why:
                _log("error", f"{call}: {why}")
            return [INVALID_PARAMS] * len(keys)
        sizes = [sum(v.nbytes for v in parts) for parts in views]
        out = [INVALID_PARAMS] * len(keys)
        with self._buffer_lock:
            if self._local(call) is None:
                return out
            base = self._buffer_address()
            try:
                runs = list(self._runs(sizes))
            except ValueError as e:
                _log("error", f"{call}: {e}")
                return out
            for run in runs:
                ptrs, at = [], 0
                for i in run:
                    ptrs.append([base + at])
                    for v in views[i]:
                        self._buffer[at : at + v.nbytes] = v
                        at += v.nbytes
                got = self._batch(True, [keys[i] for i in run], ptrs, [[sizes[i]] for i in run], copies_asked(config))
                for i, code in zip(run, got):
                    out[i] = code
        return out

    def put(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Stores the bytes of ``value`` (any buffer), copied through the local buffer:
        0, or a negative ErrorCode (-600 for no bytes or more than the local buffer holds)."""
        data = _bytes_like(value)
        if data.nbytes == 0:
            _log("error", f"put: no bytes for key {key!r}")
            return INVALID_PARAMS
        return self._put_views("put", [key], [[data]], config)[0]

    def put_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        """Stores the parts (1-D byte buffers: a header and a payload, say) as one value,
        in order. 0, or a negative ErrorCode; RuntimeError for a part that is not 1-D
        bytes, as Mooncake raises."""
        views = [_part(p) for p in parts]
        if not views or sum(v.nbytes for v in views) == 0:
            _log("error", f"put_parts: no bytes for key {key!r}")
            return INVALID_PARAMS
        return self._put_views("put_parts", [key], [views], config)[0]

    def put_batch(self, keys: Sequence[str], values: Sequence[Any], config: Optional[ReplicateConfig] = None) -> int:
        """Stores each value's bytes (any buffer) under its key, copied through the local
        buffer: 0 when every key is stored, else the first failure's ErrorCode."""
        if self._store is None:
            return INVALID_PARAMS
        if len(values) != len(keys):
            _log("error", f"put_batch: {len(keys)} keys but {len(values)} values")
            return INVALID_PARAMS
        try:
            views = [[_bytes_like(v)] for v in values]
        except TypeError as e:
            _log("error", f"put_batch: {e}")
            return INVALID_PARAMS
        failed = [c for c in self._put_views("put_batch", keys, views, config) if c != 0]
        return failed[0] if failed else 0

    # An upsert inserts or replaces; kvfabric's put replaces already, so the two are one.
    def upsert(self, key: str, value: Any, config: Optional[ReplicateConfig] = None) -> int:
        """put, which replaces a page that exists."""
        return self.put(key, value, config)

    def upsert_parts(self, key: str, *parts: Any, config: Optional[ReplicateConfig] = None) -> int:
        """put_parts, which replaces a page that exists."""
        return self.put_parts(key, *parts, config=config)

    def upsert_batch(self, keys: Sequence[str], values: Sequence[Any], config: Optional[ReplicateConfig] = None) -> int:
        """put_batch, which replaces pages that exist."""
        return self.put_batch(keys, values, config)

    # -- gets ----------------------------------------------------------------
    def _read_pages(self, call: str, keys: Sequence[Any], make: Callable[[memoryview], Any], missing: Any) -> List[Any]:
        """Each key's page read through the local buffer (in runs that fit it) and
        handed to ``make``; ``missing`` for a miss, a page larger than the local
        buffer, or a failure."""
        out = [missing] * len(keys)
        if self._store is None:
            return out
        try:
            names = [k.decode() if isinstance(k, bytes) else str(k) for k in keys]
            codes, pages = self._store.batch_locate(names)
            sizes = {i: pages[i][2] for i, c in enumerate(codes) if c == 0 and 0 < pages[i][2] <= self._buffer_bytes}
            present = list(sizes)
            with self._buffer_lock:
                if self._local(call) is None:
                    return out
                base = self._buffer_address()
                for run in self._runs(list(sizes.values())):
                    run = [present[j] for j in run]
                    offsets = list(accumulate((sizes[i] for i in run[:-1]), initial=0))
                    got = self._batch(
                        False, [names[i] for i in run], [[base + o] for o in offsets], [[sizes[i]] for i in run]
                    )
                    with memoryview(self._buffer) as view:
                        for i, o, n in zip(run, offsets, got):
                            if n > 0:
                                out[i] = make(view[o : o + n])
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"{call}: {e}")
        return out

    def _read_one(self, call: str, key: Any, make: Callable[[memoryview], Any], missing: Any) -> Any:
        """One key's page read into the whole local buffer (one lookup and one READ) and
        handed to ``make``; ``missing`` for a miss or a failure."""
        with self._buffer_lock:
            buffer = self._local(call)
            if buffer is None:
                return missing
            n = self._batch(False, [key], [[self._buffer_address()]], [[len(buffer)]])[0]
            if n <= 0:
                return missing
            with memoryview(buffer) as view:
                return make(view[:n])

    def get(self, key: str) -> bytes:
        """The page's bytes, or b"" for a miss or any failure (as Mooncake answers)."""
        return self._read_one("get", key, bytes, b"")

    def get_batch(self, keys: Sequence[str]) -> List[bytes]:
        """Each key's bytes, b"" for a miss or a failure (as Mooncake answers)."""
        return self._read_pages("get_batch", keys, bytes, b"")

    def get_buffer(self, key: str) -> Optional[BufferHandle]:
        """The page as a BufferHandle (buffer protocol, ``ptr()``, ``size()``), or None
        for a miss or a failure."""
        return self._read_one("get_buffer", key, BufferHandle, None)

    def batch_get_buffer(self, keys: Sequence[str]) -> List[Optional[BufferHandle]]:
        """Each key's page as a BufferHandle, None for a miss or a failure."""
        return self._read_pages("batch_get_buffer", keys, BufferHandle, None)
