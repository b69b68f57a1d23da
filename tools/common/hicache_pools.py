"""(The HiCache tests and tools/bench/hicache_bench.py.) Host pools that answer
``get_page_buffer_meta`` as SGLang's do, over numpy
memory, and the page contents the HiCache tests write and check.

- ``MHAPool``: SGLang's MHA host pool, page-first (``page_first`` and
  ``page_first_direct`` give the same addresses): one buffer holds every k
  then every v, ``(2, tokens, layers, heads, head_dim)``; each page is a k
  and a v buffer, ``layers * page_size * heads * head_dim`` elements each.
- ``HandedOver(pool)``: the same pool, its buffer offering only
  ``data_ptr()``, ``numel()`` and ``element_size()``.
- ``MLAPool``: SGLang's MLA host pool. ``page_first``: ``(tokens, layers, 1,
  dim)``, one buffer per page; ``layer_first``: ``(layers, tokens, 1, dim)``,
  one buffer per layer per page.

``indices(slots)`` gives the token indices of pages at those slots, as SGLang
passes ``host_indices`` (a tensor of token indices, page_size per page).
"""

from __future__ import annotations

import ctypes
import hashlib

import numpy as np


class Buffer(np.ndarray):
    """A pool's buffer: an array that also answers data_ptr, numel and
    element_size as a torch tensor does (SGLang's Mooncake backend registers
    pool.kv_buffer through them)."""

    def data_ptr(self) -> int:
        return self.ctypes.data

    def numel(self) -> int:
        return self.size

    def element_size(self) -> int:
        return self.itemsize


class TensorLike:
    """Memory as a tensor-like that offers only torch's ``data_ptr()``, ``numel()``
    and ``element_size()``: no buffer protocol, no DLPack."""

    def __init__(self, array: np.ndarray):
        self._array = array

    def data_ptr(self) -> int:
        return self._array.ctypes.data

    def numel(self) -> int:
        return self._array.size

    def element_size(self) -> int:
        return self._array.itemsize


class HandedOver:
    """A pool as some SGLang pools are handed to a backend: the same pages, its
    ``kv_buffer`` a TensorLike."""

    def __init__(self, pool: "_Pool"):
        self._pool = pool
        self.kv_buffer = TensorLike(pool.kv_buffer)

    def __getattr__(self, name: str):
        return getattr(self._pool, name)


class _Pool:
    def __init__(self, tokens: int, page_size: int, layout: str, dtype):
        self.size, self.page_size, self.layout = tokens, page_size, layout
        self.dtype = np.dtype(dtype)

    def indices(self, slots) -> np.ndarray:
        assert all(0 <= s < self.size // self.page_size for s in slots), f"slots {slots} outside the pool"
        return np.array([t for s in slots for t in range(s * self.page_size, (s + 1) * self.page_size)], dtype=np.int64)

    def page_spans(self, slot: int) -> list[tuple[int, int]]:
        ptrs, sizes = self.get_page_buffer_meta(self.indices([slot]))
        return list(zip(ptrs, sizes))

    def page_bytes(self, slot: int) -> bytes:
        return b"".join(ctypes.string_at(p, n) for p, n in self.page_spans(slot))

    def fill(self, slot: int, content: bytes) -> None:
        at = 0
        for p, n in self.page_spans(slot):
            ctypes.memmove(p, content[at : at + n], n)
            at += n
        assert at == len(content)

    def page_nbytes(self) -> int:
        return sum(n for _, n in self.page_spans(0))

    def get_ksize_per_token(self) -> int:
        """Bytes a token holds in the pool (SGLang's Mooncake backend sizes its bandwidth figures by it)."""
        return self.page_nbytes() // self.page_size


class MHAPool(_Pool):
    def __init__(self, tokens=1024, page_size=16, layers=4, heads=2, head_dim=64, dtype=np.uint16, layout="page_first"):
        super().__init__(tokens, page_size, layout, dtype)
        self.layer_num, self.head_num, self.head_dim = layers, heads, head_dim
        self.kv_buffer = np.zeros((2, tokens, layers, heads, head_dim), dtype=dtype).view(Buffer)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        item = self.dtype.itemsize
        base = self.kv_buffer.ctypes.data
        v_offset = self.layer_num * self.size * self.head_num * self.head_dim * item
        ptrs = []
        for i in range(0, len(indices), self.page_size):
            k = base + int(indices[i]) * self.layer_num * self.head_num * self.head_dim * item
            ptrs += [k, k + v_offset]
        size = self.layer_num * item * self.page_size * self.head_num * self.head_dim
        return ptrs, [size] * len(ptrs)


class MLAPool(_Pool):
    def __init__(self, tokens=1024, page_size=16, layers=4, dim=576, dtype=np.uint8, layout="page_first"):
        super().__init__(tokens, page_size, layout, dtype)
        self.layer_num, self.kv_cache_dim = layers, dim
        shape = (tokens, layers, 1, dim) if layout != "layer_first" else (layers, tokens, 1, dim)
        self.kv_buffer = np.zeros(shape, dtype=dtype).view(Buffer)

    def get_page_buffer_meta(self, indices):
        assert len(indices) % self.page_size == 0
        item, dim = self.dtype.itemsize, self.kv_cache_dim
        base = self.kv_buffer.ctypes.data
        ptrs, sizes = [], []
        for i in range(0, len(indices), self.page_size):
            index = int(indices[i])
            if self.layout == "layer_first":
                for layer in range(self.layer_num):
                    ptrs.append(base + index * dim * item + layer * self.size * dim * item)
                    sizes.append(item * self.page_size * dim)
            else:
                ptrs.append(base + index * self.layer_num * dim * item)
                sizes.append(self.layer_num * item * self.page_size * dim)
        return ptrs, sizes


def content(page_hash: str, rank: int, nbytes: int) -> bytes:
    """The bytes rank `rank` stores for page `page_hash`."""
    seed = int.from_bytes(hashlib.sha256(f"{page_hash}:{rank}".encode()).digest()[:8], "little")
    return np.random.default_rng(seed).integers(0, 256, nbytes, dtype=np.uint8).tobytes()


def make_pool(kind: str, layout: str = "page_first", **kw):
    return MHAPool(layout=layout, **kw) if kind == "mha" else MLAPool(layout=layout, **kw)
