"""kvfabric.Engine against a real second process, over tcp and shm."""

import asyncio
import ctypes
import json
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvfabric
from patterns import pattern

MiB = 1 << 20


class DLPackOnly:
    """Exposes memory through DLPack alone (no buffer protocol)."""

    def __init__(self, array):
        self._a = array

    def __dlpack__(self, **kwargs):
        return self._a.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def make_buffer(kind: str, n: int):
    """(object to pass, numpy view of the same bytes, keep-alive)."""
    if kind == "numpy":
        a = np.zeros(n, dtype=np.uint8)
        return a, a, a
    if kind == "numpy_float32":
        a = np.zeros(n // 4, dtype=np.float32)
        return a, a.view(np.uint8), a
    if kind == "bytearray":
        b = bytearray(n)
        return b, np.frombuffer(b, dtype=np.uint8), b
    if kind == "memoryview":
        b = bytearray(n)
        return memoryview(b), np.frombuffer(b, dtype=np.uint8), b
    if kind == "int":
        c = (ctypes.c_uint8 * n)()
        return ctypes.addressof(c), np.frombuffer(c, dtype=np.uint8), c
    if kind == "dlpack":
        a = np.zeros(n, dtype=np.uint8)
        return DLPackOnly(a), a, a
    if kind == "torch":
        torch = pytest.importorskip("torch")
        if not hasattr(torch, "zeros"):  # the SGLang tests' stand-in, imported earlier in this process
            pytest.skip("torch is not installed here (only a stand-in is loaded)")
        t = torch.zeros(n, dtype=torch.uint8)
        return t, t.numpy(), t
    raise AssertionError(kind)


@pytest.mark.parametrize("kind", ["numpy", "numpy_float32", "bytearray", "memoryview", "int", "dlpack", "torch"])
def test_write_and_read_every_buffer_kind(protocol, peer_factory, kind):
    peer = peer_factory(protocol)
    buf, view, _keep = make_buffer(kind, 2 * MiB)
    with kvfabric.Engine(protocol=protocol) as e:
        e.register(buf, 2 * MiB if kind == "int" else None)
        seg = e.open(peer.name)
        view[:MiB] = pattern(0, MiB, 5)
        e.write(seg, buf, peer.addr, MiB)
        assert peer.check(0, MiB, 5) == MiB
        e.read(seg, buf if kind != "int" else buf, peer.addr + 4 * MiB, 2 * MiB)
        assert np.array_equal(view, pattern(4 * MiB, 2 * MiB, 1))
        e.unregister(buf)


def test_batches_sync_async_and_await(protocol, peer_factory):
    peer = peer_factory(protocol)
    block, n = 256 << 10, 16
    local = np.zeros(2 * n * block, dtype=np.uint8)
    with kvfabric.Engine(protocol=protocol) as e:
        e.register(local)
        seg = e.open(peer.name)
        local[: n * block] = pattern(0, n * block, 9)
        e.write_many(seg, [(local.ctypes.data + i * block, peer.addr + i * block, block) for i in range(n)])
        assert peer.check(0, n * block, 9) == n * block

        t = e.read_many_async(
            seg, [(local.ctypes.data + (n + i) * block, peer.addr + (n + i) * block, block) for i in range(n)]
        )
        assert t.wait(timeout=30) == n * block
        assert t.done()
        assert np.array_equal(local[n * block :], pattern(n * block, n * block, 1))

        local[:block] = pattern(0, block, 11)

        async def go():
            return await e.write_async(seg, local, peer.addr, block)

        assert asyncio.run(go()) == block
        assert peer.check(0, block, 11) == block

        # Mixed READ and WRITE in one submit, per-task status.
        t = e.submit(
            [
                kvfabric.Request(kvfabric.Op.WRITE, local.ctypes.data, peer.addr + block, block),
                kvfabric.Request(kvfabric.Op.READ, local.ctypes.data + block, peer.addr + 2 * block, block),
            ],
            seg,
        )
        t.wait(30)
        assert t.task_status(1).state == kvfabric.State.COMPLETED
        assert t.task_status(1).transferred_bytes == block
        with pytest.raises(kvfabric.InvalidArgumentError):
            t.task_status(2)


def test_errors_are_typed_and_change_nothing(protocol, peer_factory):
    peer = peer_factory(protocol)
    local = np.zeros(MiB, dtype=np.uint8)
    with kvfabric.Engine(protocol=protocol) as e:
        e.register(local)
        seg = e.open(peer.name)
        local[:] = 0xAB
        with pytest.raises(kvfabric.OutOfRangeError, match="^request 0: remote range .* is outside the buffers"):
            e.write(seg, local, peer.addr + peer.size - 16, 4096)
        unregistered = np.zeros(4096, dtype=np.uint8)
        with pytest.raises(kvfabric.KvfabricError):
            e.write(seg, unregistered, peer.addr)
        with pytest.raises(kvfabric.InvalidArgumentError, match="read-only"):
            e.register(b"immutable bytes")
        with pytest.raises(kvfabric.InvalidArgumentError, match="length"):
            e.register(12345)
        with pytest.raises(TypeError, match="buffer protocol"):
            e.register(object())
        with pytest.raises(kvfabric.NotFoundError):
            e.unregister(unregistered)
        assert peer.check(peer.size - MiB, MiB, 1) == MiB  # untouched
        with pytest.raises(kvfabric.NetworkError):
            e.open("127.0.0.1:1")
        with pytest.raises(ConnectionError):  # the standard base class works too
            e.probe("127.0.0.1:1")
    assert e.closed
    with pytest.raises(kvfabric.ClosedError, match="is closed; create a new Engine"):
        e.open(peer.name)
    with pytest.raises(kvfabric.NotFoundError, match="KVF_NO_SUCH"):
        kvfabric.Engine(protocol=protocol, settings={"KVF_NO_SUCH": 1})


def test_peer_killed_mid_transfer_raises(peer_factory):
    peer = peer_factory("tcp")
    local = np.zeros(8 * MiB, dtype=np.uint8)
    with kvfabric.Engine(protocol="tcp", settings={"KVF_TRANSFER_TIMEOUT_MS": 3000}) as e:
        e.register(local)
        seg = e.open(peer.name)
        e.warmup(seg)
        peer.freeze()
        t = e.write_async(seg, local, peer.addr)
        peer.kill()
        start = time.monotonic()
        with pytest.raises((kvfabric.FabricError, kvfabric.TransferTimeoutError)):
            t.wait(timeout=20)
        assert time.monotonic() - start < 10
        # The batch is freed once it ended; its task's outcome stays readable.
        st = t.task_status(0)
        assert st.state in (kvfabric.State.FAILED, kvfabric.State.TIMEOUT) and st.error


def test_gil_is_released_during_transfers(peer_factory):
    peer = peer_factory("tcp", 64 * MiB)
    local = np.zeros(64 * MiB, dtype=np.uint8)
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    with kvfabric.Engine(protocol="tcp") as e:
        e.register(local)
        seg = e.open(peer.name)
        e.warmup(seg)
        th = threading.Thread(target=spin)
        th.start()
        try:
            time.sleep(0.05)
            before = counter[0]
            t0 = time.perf_counter()
            for _ in range(4):
                e.write_many(seg, [(local.ctypes.data + i * MiB, peer.addr + i * MiB, MiB) for i in range(64)])
            elapsed = time.perf_counter() - t0
            during = counter[0] - before
        finally:
            stop.set()
            th.join()
    # A thread that held the GIL for the whole call would leave the counter
    # near 0 (the interpreter cannot switch inside a C++ call).
    assert elapsed > 0.02
    assert during > 10000, f"the other thread counted only {during} in {elapsed:.3f} s"


def test_same_process_segment_is_a_copy():
    with kvfabric.Engine(protocol="tcp") as a, kvfabric.Engine(protocol="tcp") as b:
        src = np.frombuffer(pattern(0, MiB, 3).tobytes(), dtype=np.uint8).copy()
        dst = np.zeros(MiB, dtype=np.uint8)
        a.register(src)
        b.register(dst)
        a.write(b.name, src, dst.ctypes.data)
        assert np.array_equal(dst, src)
        own = a.open(a.name)
        back = np.zeros(MiB, dtype=np.uint8)
        a.register(back)
        a.read(own, back, src.ctypes.data)
        assert np.array_equal(back, src)
        assert [x.addr for x in a.buffers(b.name)] == [dst.ctypes.data]


def test_settings_are_checked_when_read():
    from kvfabric import _core

    rows = {r[0]: r for r in _core.setting_table()}
    env, kind, default, meaning, values, choices, unit = rows["KVF_POST_MODE"]
    assert (kind, default, choices, values) == (
        "Choice",
        "auto",
        ["auto", "direct", "progress"],
        "`auto`, `direct`, `progress`",
    )
    assert rows["KVF_STAGING_BYTES"][1:3] == ("Bytes", "64MiB") and rows["KVF_STAGING_BYTES"][6] == "bytes"
    assert rows["KVF_TRANSFER_TIMEOUT_MS"][6] == "milliseconds"
    with pytest.raises(kvfabric.InvalidArgumentError, match="allowed values are auto, direct, progress"):
        kvfabric.Engine(protocol="tcp", settings={"KVF_POST_MODE": "sideways"})
    with pytest.raises(kvfabric.InvalidArgumentError, match="KVF_STAGING_BYTES='-1': must be at least 1 MiB"):
        kvfabric.Engine(protocol="tcp", settings={"KVF_STAGING_BYTES": -1})
    with kvfabric.Engine(protocol="tcp", settings={"KVF_POST_MODE": "Direct", "KVF_TRANSFER_TIMEOUT_MS": "3s"}) as e:
        assert e.settings()["KVF_POST_MODE"] == "direct"
        assert e.settings()["KVF_TRANSFER_TIMEOUT_MS"] == "3000ms"


def test_unmapped_int_address_is_refused():
    # An int address that is not mapped memory is refused: registered, a
    # peer's WRITE there would kill the process.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    page = 4096
    addr = libc.mmap(None, 2 * page, 3, 0x22, -1, 0)  # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    assert addr not in (None, ctypes.c_void_p(-1).value)
    assert libc.munmap(addr + page, page) == 0
    with kvfabric.Engine(protocol="tcp") as e:
        with pytest.raises(kvfabric.InvalidArgumentError, match="not mapped"):
            e.register(addr, 2 * page)
        with pytest.raises(kvfabric.InvalidArgumentError, match="not mapped"):
            e.register(addr + page, 64)
        assert e.register(addr, page) == addr  # the page still mapped is fine
        e.unregister(addr)
    assert libc.munmap(addr, page) == 0


def test_batch_capacity_is_bounded():
    with kvfabric.Engine(protocol="tcp") as e:
        with pytest.raises(kvfabric.InvalidArgumentError, match="several batches"):
            e._core.allocate_batch(16 << 20)


def test_registered_buffer_cannot_be_resized():
    # A registered bytearray cannot be resized: a peer's WRITE would land in
    # freed heap memory.
    buf = bytearray(1 << 20)
    arr = np.zeros(1 << 16, dtype=np.uint8)
    with kvfabric.Engine(protocol="tcp") as e:
        e.register(buf)
        e.register_many([arr])
        with pytest.raises(BufferError):
            buf.extend(b"x" * 4096)
        with pytest.raises(BufferError):
            del buf[:10]
        with pytest.raises(ValueError):
            arr.resize(1 << 17)
        assert len(buf) == 1 << 20
        e.unregister(buf)
        buf.extend(b"x")  # unregistered: the object is the application's again
        e.register(buf)
    buf.extend(b"y")  # closing the engine released it too
    assert len(buf) == (1 << 20) + 2


def test_bad_lengths_are_clear_errors():
    with kvfabric.Engine(protocol="tcp") as e:
        for n in (-1, 0, 1 << 64):
            with pytest.raises(kvfabric.InvalidArgumentError, match="not a positive byte count"):
                e.register(0x10000, n)
        with pytest.raises(kvfabric.InvalidArgumentError, match="outside the address space"):
            e.register((1 << 64) - 4096, 8192)
        with pytest.raises(kvfabric.InvalidArgumentError, match="not a positive byte count"):
            e.register(bytearray(16), -1)


def test_wait_timeouts_clamp_or_refuse(peer_factory):
    # A timeout past what the engine's clock can count (1e10, inf) means no
    # limit, never "at once" (a deadline that wraps around); NaN, negative
    # and non-number timeouts are InvalidArgumentError, not a raw
    # OverflowError or ValueError, nor a silent poll.
    peer = peer_factory("tcp")
    local = np.zeros(MiB, dtype=np.uint8)
    with kvfabric.Engine(protocol="tcp", settings={"KVF_TRANSFER_TIMEOUT_MS": 1500}) as e:
        e.register(local)
        seg = e.open(peer.name)
        e.warmup(seg)
        peer.freeze()  # alive but silent: the writes stay pending until the transfer timeout
        endless = [1e10, float("inf"), 1 << 80, 1e308, None]
        transfers = [e.write_async(seg, local, peer.addr, 4096) for _ in endless]
        t = transfers[0]
        for bad in (-1, -0.001, float("-inf"), float("nan"), "10", True, 1j):
            with pytest.raises(kvfabric.InvalidArgumentError, match="timeout"):
                t.wait(timeout=bad)
        with pytest.raises(kvfabric.TransferTimeoutError, match="still running"):
            t.wait(timeout=0)
        assert t.status().state == kvfabric.State.PENDING  # the refused waits changed nothing
        start = time.monotonic()
        for tr, timeout in zip(transfers, endless):
            # Each waits until the engine ends the write: TIMEOUT at 1.5 s.
            with pytest.raises(kvfabric.TransferTimeoutError, match="KVF_TRANSFER_TIMEOUT_MS"):
                tr.wait(timeout=timeout)
            assert tr.status().state == kvfabric.State.TIMEOUT, timeout
        assert time.monotonic() - start > 1.2
        peer.kill()


def test_expire_ends_a_hung_read_now_and_nothing_of_it_lands_later(peer_factory):
    # A READ from a frozen peer would run until its 30 s deadline; expire()
    # ends it now, after closing the connection that carries it, so the
    # buffer may hold other data at once: when the peer goes on and serves
    # the READ, none of its bytes arrive. The engine runs in a process of
    # its own (expire_child.py): libfabric reads FI_AV_REMOVE_CLEANUP once
    # per process.
    peer = peer_factory("tcp")
    r = subprocess.run(
        [
            sys.executable,
            os.path.join(os.path.dirname(__file__), "expire_child.py"),
            peer.name,
            str(peer.addr),
            str(peer.pid),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["ended_batch"] == "COMPLETED", got  # expire() of an ended batch changes nothing
    assert got["pending"], got
    assert got["state"] == "TIMEOUT" and got["took"] < 5, got
    assert "ended by its caller" in got["wait_error"], got
    assert got["late"] == 0, f"bytes of the expired READ landed after expire(): {got}"
    assert got["again"], got
    peer.kill()


def test_numbers_out_of_range_are_clear_errors_and_change_nothing(peer_factory):
    # -1, 2^64 or a float as an address, index or opcode is an
    # InvalidArgumentError that names it, not a bare TypeError from the
    # binding, and a float is never truncated.
    peer = peer_factory("tcp")
    local = np.zeros(MiB, dtype=np.uint8)
    local[:] = 0x77
    with kvfabric.Engine(protocol="tcp") as e:
        e.register(local)
        seg = e.open(peer.name)
        for bad in (-1, 1 << 64, 1.5, True):
            with pytest.raises(kvfabric.InvalidArgumentError, match="address"):
                e.unregister(bad)
        with pytest.raises(kvfabric.InvalidArgumentError, match="address -1 is out of range"):
            e.unregister_many([local.ctypes.data, -1])
        for bad in (-1, 1 << 64, 2.0, "16"):
            with pytest.raises(kvfabric.InvalidArgumentError, match="remote address"):
                e.write(seg, local, bad, 16)
        for bad in (-1, 0, 1 << 63, 1 << 64, 16.0, "16"):
            with pytest.raises(kvfabric.InvalidArgumentError, match="length"):
                e.write(seg, local, peer.addr, bad)
            with pytest.raises(kvfabric.InvalidArgumentError, match="length"):
                e.register(local.ctypes.data + 4096, bad)
        for bad in (5, -1, 1.0, 1 << 64):
            with pytest.raises(kvfabric.InvalidArgumentError, match="opcode"):
                e.transfer([kvfabric.Request(bad, local, peer.addr, 16)], seg)
        t = e.write_async(seg, local, peer.addr + MiB, 16)
        for bad in (-1, 1 << 64, 0.0):
            with pytest.raises(kvfabric.InvalidArgumentError, match="task index"):
                t.task_status(bad)
        assert t.wait(30) == 16
        for bad in (-1, 1 << 64, 0.0):
            with pytest.raises(kvfabric.InvalidArgumentError, match="task index"):
                t.task_status(bad)
        assert t.task_status(0).state == kvfabric.State.COMPLETED
        assert peer.check(0, MiB, 1) == MiB  # the refused writes changed nothing
        e.write(seg, local, peer.addr, np.uint64(4096))  # numpy integers are integers
        e.unregister(local)  # it stayed registered through the refused unregisters
