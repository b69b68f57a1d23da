"""Ranged reads and writes of ``mooncake.store``: parts of pages, read straight
from the member that holds them (``get_into_ranges``, read sessions) or
gathered into a whole page before it is put (write sessions).

A read goes to the page where ``kvfabric.Store.batch_locate`` found it: the
member keeps that page whole for ``KVF_STORE_READ_WINDOW_MS`` from the
lookup (Mooncake's lease), and parts are not checksummed (a whole page read
by ``batch_get_into`` is).
"""

from __future__ import annotations

import operator
import time
from typing import Any, List, Optional, Sequence

from ..engine import Op, Request, TaskState
from ..errors import KvfabricError
from .mooncake import _log
from .mooncake_types import (
    INVALID_PARAMS,
    LEASE_EXPIRED,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    TRANSFER_FAIL,
    ReplicateConfig,
    mooncake_code,
)


def _ranges_fit(ptrs: Sequence[int], sizes: Sequence[int], offsets: Sequence[int], length: int) -> bool:
    """Whether the ranges (a pointer, a size and an offset each) are well formed and all
    inside a page of ``length`` bytes."""
    return len(ptrs) == len(sizes) == len(offsets) and all(
        o >= 0 and n > 0 and o + n <= length for o, n in zip(offsets, sizes)
    )


class _PutArena:
    """The host memory of one batch_put_session_start: registered with the engine,
    its keys' ranges written into it, unregistered when its last key ends."""

    def __init__(self, engine, nbytes: int, keys: int) -> None:
        from .. import _core

        self._buffer = bytearray(nbytes)
        self.address = _core.buffer_info(self._buffer)[0]
        engine.register(self.address, nbytes)
        self._open = keys

    def release(self, engine) -> None:
        self._open -= 1
        if self._open == 0 and engine is not None:
            try:
                engine.unregister(self.address)
            except KvfabricError as e:
                _log("warning", f"put session memory at {self.address:#x}: {e}")


class RangedCalls:
    """The ranged calls of MooncakeDistributedStore (a mixin: it uses the store's
    ``_store``, ``_engine()``, ``_batch``, ``_buffer_lock``, ``_sessions`` and ``_puts``)."""

    # -- ranged reads in a session (layer-wise loads) -------------------------
    def batch_get_session_start(self, keys: Sequence[str]) -> List[int]:
        """Looks the keys' pages up once; the ranged reads then go straight to them.
        Per key 0, or a negative ErrorCode (-704: no page). The pages stay whole for
        KVF_STORE_READ_WINDOW_MS from here (Mooncake's lease); later reads fail with -707."""
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        try:
            codes, pages = self._store.batch_locate(list(keys))
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"batch_get_session_start: {e}")
            return [INVALID_PARAMS] * len(keys)
        started = time.monotonic()
        with self._buffer_lock:
            for key, code, (segment, addr, length, valid_ms) in zip(keys, codes, pages):
                # A little inside the member's window: the last READ must end within it.
                if code == 0:
                    self._sessions[key] = ((segment, addr, length), started + 0.9 * valid_ms / 1000)
        return [mooncake_code(c) for c in codes]

    def batch_get_into_multi_buffer_ranges(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        all_src_offsets: Sequence[Sequence[int]],
    ) -> List[int]:
        """Reads byte ranges of each key's page (offsets into the page) into its buffers, in one
        engine batch. Per key the bytes read, or a negative ErrorCode."""
        n = len(keys)
        if self._store is None or not (len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets) == n):
            return [INVALID_PARAMS] * n
        out = [0] * n
        requests, owner = [], []
        now = time.monotonic()
        with self._buffer_lock:
            sessions = [self._sessions.get(k) for k in keys]
        for i, (session, ptrs, sizes, offs) in enumerate(zip(sessions, all_buffer_ptrs, all_sizes, all_src_offsets)):
            if session is None:
                out[i] = OBJECT_NOT_FOUND  # no session for it (never started, or its page missed)
                continue
            (segment, addr, length), expires = session
            if now >= expires:
                out[i] = LEASE_EXPIRED
            elif not _ranges_fit(ptrs, sizes, offs, length):
                out[i] = INVALID_PARAMS
            else:
                for p, n_, o in zip(ptrs, sizes, offs):
                    requests.append(Request(Op.READ, int(p), addr + int(o), int(n_), segment))
                    owner.append(i)
                out[i] = sum(int(x) for x in sizes)
        if requests:
            wait = max(0.0, max(sessions[i][1] for i in owner) - time.monotonic())
            self._run_ranges("batch_get_into_multi_buffer_ranges", requests, owner, wait, out)
        return out

    def batch_get_session_end(self, keys: Sequence[str]) -> int:
        """Forgets the sessions of the keys: 0."""
        with self._buffer_lock:
            for k in keys:
                self._sessions.pop(k, None)
        return 0

    # -- ranged writes in a session (layer-wise saves) -----------------------
    def batch_put_session_start(
        self, keys: Sequence[str], sizes: Sequence[int], config: Optional[ReplicateConfig] = None
    ) -> List[int]:
        """Opens a page of ``size`` bytes per key, written in ranges (a layer at a time)
        and put whole at batch_put_session_end. The ranges gather in host memory this
        process registers (one piece per call, freed when its last key ends), so pages
        of GPU memory are copied by the engine. Per key 0, -600 for a bad size or
        -705 for a key whose session is already open."""
        n = len(keys)
        if self._store is None:
            return [INVALID_PARAMS] * n
        if len(sizes) != n:
            return [INVALID_PARAMS] * n
        out = [0] * n
        with self._buffer_lock:
            opening = {}
            for i, (key, size) in enumerate(zip(keys, sizes)):
                try:
                    size = operator.index(size)
                except TypeError:
                    size = 0
                if key in self._puts or key in opening:
                    out[i] = OBJECT_ALREADY_EXISTS
                elif size <= 0:
                    out[i] = INVALID_PARAMS
                else:
                    opening[key] = size
            if not opening:
                return out
            try:
                arena = _PutArena(self._engine(), sum(opening.values()), len(opening))
            except (KvfabricError, ValueError, MemoryError) as e:
                _log("error", f"batch_put_session_start: {e}")
                return [INVALID_PARAMS if key in opening else c for key, c in zip(keys, out)]
            offset = 0
            for key, size in opening.items():
                self._puts[key] = (arena, offset, size)
                offset += size
        return out

    def batch_put_from_multi_buffer_ranges(
        self,
        keys: Sequence[str],
        all_buffer_ptrs: Sequence[Sequence[int]],
        all_sizes: Sequence[Sequence[int]],
        all_dst_offsets: Sequence[Sequence[int]],
    ) -> List[int]:
        """Writes byte ranges of each key's open page (offsets into the page) from
        registered buffers, host or GPU, in one engine batch. Per key 0, or a negative
        ErrorCode (-704: no session open for it; -600: a range outside its page)."""
        n = len(keys)
        if self._store is None or not (len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets) == n):
            return [INVALID_PARAMS] * n
        out = [0] * n
        requests, owner = [], []
        with self._buffer_lock:
            sessions = [self._puts.get(k) for k in keys]
        for i, (session, ptrs, sizes, offs) in enumerate(zip(sessions, all_buffer_ptrs, all_sizes, all_dst_offsets)):
            if session is None:
                out[i] = OBJECT_NOT_FOUND
                continue
            arena, offset, size = session
            if not _ranges_fit(ptrs, sizes, offs, size):
                out[i] = INVALID_PARAMS
                continue
            for p, n_, o in zip(ptrs, sizes, offs):
                requests.append(
                    Request(Op.WRITE, int(p), arena.address + offset + int(o), int(n_), self._engine().name)
                )
                owner.append(i)
        if requests:
            self._run_ranges("batch_put_from_multi_buffer_ranges", requests, owner, None, out)
        return out

    def _run_ranges(
        self, call: str, requests: list, owner: List[int], timeout: Optional[float], out: List[int]
    ) -> None:
        """Runs the ranged requests in one engine batch (within ``timeout`` seconds, None:
        the engine's own); a key (``owner`` per request) with a request that failed gets
        -800 in ``out``, every key -600 when the engine refused the batch (an
        unregistered buffer)."""
        try:
            transfer = self._engine().submit(requests)
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"{call}: {e}")
            for i in owner:
                out[i] = INVALID_PARAMS
            return
        _wait_or_expire(transfer, timeout)
        for t, i in enumerate(owner):
            if transfer.task_status(t).state != TaskState.COMPLETED:
                out[i] = TRANSFER_FAIL

    def batch_put_session_end(self, keys: Sequence[str]) -> List[int]:
        """Puts each open page whole, as batch_put_from would, and closes its session.
        Per key 0, or a negative ErrorCode (-704: no session open for it)."""
        n = len(keys)
        if self._store is None:
            return [INVALID_PARAMS] * n
        with self._buffer_lock:
            sessions = [self._puts.get(k) for k in keys]
        ending = [i for i, s in enumerate(sessions) if s is not None]
        out = [OBJECT_NOT_FOUND] * n
        if ending:
            codes = self._batch(
                True,
                [keys[i] for i in ending],
                [[sessions[i][0].address + sessions[i][1]] for i in ending],
                [[sessions[i][2]] for i in ending],
            )
            for i, code in zip(ending, codes):
                out[i] = code
        self._close_puts([keys[i] for i in ending])
        return out

    def batch_put_session_revoke(self, keys: Sequence[str]) -> List[int]:
        """Closes the sessions of the keys, putting nothing. Per key 0, or -704 when none was open."""
        if self._store is None:
            return [INVALID_PARAMS] * len(keys)
        with self._buffer_lock:
            out = [0 if k in self._puts else OBJECT_NOT_FOUND for k in keys]
        self._close_puts(keys)
        return out

    def _close_puts(self, keys: Sequence[str]) -> None:
        with self._buffer_lock:
            for k in keys:
                session = self._puts.pop(k, None)
                if session is not None:
                    session[0].release(self._engine())

    # -- ranged reads without a session ----------------------------------------
    def get_into_ranges(
        self,
        buffer_ptrs: Sequence[int],
        all_keys: Sequence[Sequence[str]],
        all_dst_offsets: Sequence[Sequence[Sequence[int]]],
        all_src_offsets: Sequence[Sequence[Sequence[int]]],
        all_sizes: Sequence[Sequence[Sequence[int]]],
    ) -> List[List[List[int]]]:
        """Reads byte ranges of pages into registered buffers: buffer ``i`` receives,
        for each of its keys ``j``, the ranges ``k`` (``all_src_offsets[i][j][k]`` into
        the page, ``all_dst_offsets[i][j][k]`` into the buffer, ``all_sizes[i][j][k]``
        bytes). One lookup per key, one engine batch per buffer, all at once.
        Per buffer, key and range: the bytes read, or a negative ErrorCode (-704: no
        such key; -600: lists that do not match, a range outside its page, or a
        buffer the engine refuses; -707: the pages' window passed before the reads
        ended)."""
        out = _shaped(all_dst_offsets)
        if self._store is None or not (
            len(buffer_ptrs) == len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == len(all_sizes)
        ):
            return out
        keys = sorted({str(k) for ks in all_keys for k in ks})
        try:
            codes, pages = self._store.batch_locate(keys)
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"get_into_ranges: {e}")
            return out
        started = time.monotonic()
        found = {k: (c, p) for k, c, p in zip(keys, codes, pages)}
        windows = [p[3] for c, p in found.values() if c == 0]
        deadline = started + 0.9 * min(windows, default=0) / 1000
        running = []
        for i, ptr in enumerate(buffer_ptrs):
            requests, places = _buffer_reads(
                int(ptr), all_keys[i], all_dst_offsets[i], all_src_offsets[i], all_sizes[i], found, out[i]
            )
            if requests:
                running.append((self._submit_reads("get_into_ranges", requests), places, out[i]))
        for transfer, places, results in running:
            _finish_reads(transfer, places, results, deadline)
        return out

    def _submit_reads(self, call: str, requests: list):
        try:
            return self._engine().submit(requests)
        except (KvfabricError, ValueError, TypeError) as e:
            _log("error", f"{call}: {e}")
            return None


def _shaped(all_dst_offsets: Any) -> List[List[List[int]]]:
    """INVALID_PARAMS for every range the destination offsets name (as much of them as is well formed)."""
    try:
        return [[[INVALID_PARAMS] * len(d) for d in dsts] for dsts in all_dst_offsets]
    except TypeError:
        return []


def _buffer_reads(
    ptr: int, keys: Sequence[str], dsts, srcs, sizes, found: dict, results: List[List[int]]
) -> tuple[list, list]:
    """The READs of one buffer's ranges, and for each the (key, range) it answers; ranges
    of keys that miss or do not fit their page get their code in ``results`` now."""
    requests, places = [], []
    if not len(keys) == len(dsts) == len(srcs) == len(sizes):
        return requests, places
    for j, key in enumerate(keys):
        if not len(dsts[j]) == len(srcs[j]) == len(sizes[j]):
            continue
        code, (segment, addr, length, _) = found[str(key)]
        for k, (dst, src, n) in enumerate(zip(dsts[j], srcs[j], sizes[j])):
            dst, src, n = int(dst), int(src), int(n)
            if code != 0:
                results[j][k] = mooncake_code(code)
            elif dst >= 0 and src >= 0 and n > 0 and src + n <= length:
                requests.append(Request(Op.READ, ptr + dst, addr + src, n, segment))
                places.append((j, k, n))
    return requests, places


def _finish_reads(transfer, places: list, results: List[List[int]], deadline: float) -> None:
    """Waits for one buffer's READs (until ``deadline``) and writes each range's answer."""
    if transfer is None:
        return  # the engine refused the buffer: its ranges stay INVALID_PARAMS
    _wait_or_expire(transfer, max(0.0, deadline - time.monotonic()))
    late = time.monotonic() > deadline
    for t, (j, k, n) in enumerate(places):
        state = transfer.task_status(t).state
        results[j][k] = LEASE_EXPIRED if late else (n if state == TaskState.COMPLETED else TRANSFER_FAIL)


def _wait_or_expire(transfer, timeout: Optional[float]) -> None:
    """Waits for the batch; one still running after ``timeout`` seconds is ended
    (Transfer.expire), so no READ lands in the caller's buffers after this returns."""
    try:
        transfer.wait(timeout)
    except KvfabricError:
        pass  # which requests failed is read from the tasks
    if not transfer.done():
        transfer.expire()
