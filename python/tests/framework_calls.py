"""The call sequences vLLM, SGLang and checkpoint-engine make on Mooncake's
TransferEngine (shared/reference/frameworks.md, read from their released
code), replayed against ``mooncake.engine`` as the shim serves it, in a
process of its own, against a target process (peer.py, Mooncake API).

    python framework_calls.py SCENARIO PROTOCOL PEER_NAME PEER_ADDR PEER_SIZE [gpu]

With ``gpu`` (and KVF_CUDA_LIBRARY naming the fake driver), the caller's KV
caches and weights are "device memory" handed out by the fake CUDA driver
and registered the way the frameworks do it: raw integer pointers, no
location. Every return value is checked against Mooncake's convention and
every byte that moves is checked. Prints "ok" and exits 0, or raises.
"""

import concurrent.futures
import ctypes
import os
import sys

from kvfabric.compat import shim

shim.enable()
from mooncake.engine import TransferEngine, TransferOpcode  # noqa: E402  (as the frameworks import it)

from patterns import pattern  # noqa: E402

KiB, MiB = 1 << 10, 1 << 20
SCENARIO, PROTOCOL, PEER = sys.argv[1], sys.argv[2], sys.argv[3]
PEER_ADDR, PEER_SIZE = int(sys.argv[4]), int(sys.argv[5])
GPU = len(sys.argv) > 6 and sys.argv[6] == "gpu"


class Memory:
    """A caller's buffer: fake device memory with ``gpu``, else host memory."""

    def __init__(self, nbytes: int, device: int = 0):
        self.nbytes = nbytes
        if GPU:
            lib = ctypes.CDLL(os.environ["KVF_CUDA_LIBRARY"])
            lib.fake_cuda_alloc.restype = ctypes.c_void_p
            lib.fake_cuda_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]
            self.ptr = lib.fake_cuda_alloc(nbytes, device)
            self._keep = None
        else:
            self._keep = (ctypes.c_uint8 * nbytes)()
            self.ptr = ctypes.addressof(self._keep)

    def view(self):  # fake device memory is host-addressable: the test reads it directly
        return (ctypes.c_uint8 * self.nbytes).from_address(self.ptr)

    def fill(self, off: int, n: int, seed: int) -> None:
        ctypes.memmove(self.ptr + off, pattern(off, n, seed).tobytes(), n)

    def check(self, off: int, n: int, base_off: int, seed: int) -> None:
        got = bytes(self.view()[off : off + n])
        assert got == pattern(base_off, n, seed).tobytes(), f"bytes at {off}+{n} differ"


def start(te: TransferEngine, local: str = "127.0.0.1") -> str:
    # Every caller passes "P2PHANDSHAKE"; the protocol is the caller's (the
    # frameworks' default is "rdma", here MOONCAKE_PROTOCOL or the test's).
    assert te.initialize(local, "P2PHANDSHAKE", PROTOCOL, "") == 0
    port = te.get_rpc_port()
    assert 0 < port < 65536
    return f"{local}:{port}"


def registered_location(te: TransferEngine, addr: int) -> str:
    e = te.get_engine()
    for b in e.buffers(e.name):
        if b.addr == addr:
            return b.location
    raise AssertionError(f"{addr:#x} is not registered")


def expect_location(te: TransferEngine, addr: int, device: int = 0) -> None:
    want = f"cuda:{device}" if GPU else "cpu:"
    got = registered_location(te, addr)
    assert got.startswith(want), f"registered as {got}, expected {want}"


def sglang_pd() -> None:
    """SGLang PD disaggregation through its shared Mooncake wrapper: batch
    register of the KV pools (return code ignored by conn.py, so it must be
    right), sync writes of whole pages and of head slices (one entry per
    token slice), a probe, the blacklist path on a failure."""
    te = TransferEngine()
    start(te)
    k, v = Memory(4 * MiB), Memory(4 * MiB)
    assert te.batch_register_memory([k.ptr, v.ptr], [k.nbytes, v.nbytes]) == 0
    expect_location(te, k.ptr)
    expect_location(te, v.ptr)
    k.fill(0, 4 * MiB, 31)
    v.fill(0, 4 * MiB, 32)
    assert te.transfer_sync_write(PEER, k.ptr, PEER_ADDR, 256 * KiB) == 0
    # Head-sliced: 512 token slices of 128 bytes from v, scattered remotely.
    n = 512
    src = [v.ptr + i * 128 for i in range(n)]
    dst = [PEER_ADDR + MiB + i * 256 for i in range(n)]
    assert te.batch_transfer_sync_write(PEER, src, dst, [128] * n) == 0
    # Read back what landed, into k, and compare with what was sent.
    assert te.transfer_sync_read(PEER, k.ptr + 2 * MiB, PEER_ADDR, 256 * KiB) == 0
    k.check(2 * MiB, 256 * KiB, 0, 31)
    back = [k.ptr + 3 * MiB + i * 128 for i in range(n)]
    assert te.batch_transfer_sync_read(PEER, back, dst, [128] * n) == 0
    for i in range(0, n, 37):
        k.check(3 * MiB + i * 128, 128, i * 128, 32)
    assert te.send_probe(PEER) == 0
    # A failed transfer is < 0 (the caller blacklists the session), a
    # probe of a dead session is non-zero.
    assert te.transfer_sync_write(PEER, k.ptr, PEER_ADDR + PEER_SIZE, 16) < 0
    assert te.send_probe("127.0.0.1:1") != 0
    assert te.batch_unregister_memory([k.ptr, v.ptr]) == 0


def vllm_connector() -> None:
    """vLLM's MooncakeConnector: batch_register_memory of the KV caches
    (non-zero raises), batch_transfer_sync_write to f"{host}:{port}" from a
    thread pool, batch_unregister_memory."""
    te = TransferEngine()
    start(te)
    blocks = [Memory(MiB, device=i % 2) for i in range(4)]
    assert te.batch_register_memory([b.ptr for b in blocks], [b.nbytes for b in blocks]) == 0
    for i, b in enumerate(blocks):
        expect_location(te, b.ptr, i % 2)
        b.fill(0, MiB, 40 + i)
    host, port = PEER.rsplit(":", 1)

    def send(i: int) -> int:
        src = [blocks[i].ptr + j * 64 * KiB for j in range(16)]
        dst = [PEER_ADDR + i * MiB + j * 64 * KiB for j in range(16)]
        return te.batch_transfer_sync_write(f"{host}:{port}", src, dst, [64 * KiB] * 16)

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        assert list(pool.map(send, range(4))) == [0, 0, 0, 0]
    check = Memory(4 * MiB)
    assert te.register_memory(check.ptr, check.nbytes) == 0
    assert te.transfer_sync_read(PEER, check.ptr, PEER_ADDR, 4 * MiB) == 0
    for i in range(4):
        check.check(i * MiB, MiB, 0, 40 + i)
    assert te.unregister_memory(check.ptr) == 0
    assert te.batch_unregister_memory([b.ptr for b in blocks]) == 0


def vllm_ec_connector() -> None:
    """vLLM's encoder-cache connector: register, write, unregister one by one."""
    te = TransferEngine()
    start(te)
    cache = Memory(2 * MiB)
    assert te.batch_register_memory([cache.ptr], [cache.nbytes]) == 0
    expect_location(te, cache.ptr)
    cache.fill(0, 2 * MiB, 50)
    assert te.batch_transfer_sync_write(PEER, [cache.ptr], [PEER_ADDR], [2 * MiB]) == 0
    cache.fill(0, 2 * MiB, 0)
    assert te.batch_transfer_sync_read(PEER, [cache.ptr], [PEER_ADDR], [2 * MiB]) == 0
    cache.check(0, 2 * MiB, 0, 50)
    assert te.unregister_memory(cache.ptr) == 0


def checkpoint_engine() -> None:
    """checkpoint-engine's P2P store: initialize (retried), a pinned host pool
    and a GPU buffer batch-registered, batch reads of the owner's weights,
    `assert rc == 0` throughout."""
    te = TransferEngine()
    for _ in range(8):
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", PROTOCOL, "") == 0:
            break
    else:
        raise AssertionError("initialize failed 8 times")
    assert te.get_rpc_port() > 0
    pool = Memory(4 * MiB)
    pool._keep = (ctypes.c_uint8 * pool.nbytes)()  # the pinned pool is host memory
    pool.ptr = ctypes.addressof(pool._keep)
    weights = Memory(4 * MiB, device=1)
    rc = te.batch_register_memory([pool.ptr, weights.ptr], [pool.nbytes, weights.nbytes])
    assert rc == 0
    assert registered_location(te, pool.ptr).startswith("cpu:")
    expect_location(te, weights.ptr, 1)
    rc = te.batch_transfer_sync_read(
        PEER, [weights.ptr + i * MiB for i in range(4)], [PEER_ADDR + i * MiB for i in range(4)], [MiB] * 4
    )
    assert rc == 0
    weights.check(0, 4 * MiB, 0, 1)  # the target's buffer holds pattern seed 1
    rc = te.batch_transfer_sync_read(PEER, [pool.ptr], [PEER_ADDR + 8 * MiB], [4 * MiB])
    assert rc == 0
    pool.check(0, 4 * MiB, 8 * MiB, 1)
    assert te.batch_unregister_memory([pool.ptr, weights.ptr]) == 0


def sglang_remote_weights() -> None:
    """SGLang remote instance weight loading: one register_memory per weight
    (non-zero raises), then batch_transfer_sync_read from the seed."""
    te = TransferEngine()
    start(te)
    weights = [Memory(512 * KiB, device=0) for _ in range(6)]
    for w in weights:
        assert te.register_memory(w.ptr, w.nbytes) == 0
        expect_location(te, w.ptr, 0)
    rc = te.batch_transfer_sync_read(
        PEER, [w.ptr for w in weights], [PEER_ADDR + i * 512 * KiB for i in range(6)], [512 * KiB] * 6
    )
    assert rc == 0
    for i, w in enumerate(weights):
        w.check(0, 512 * KiB, i * 512 * KiB, 1)
    for w in weights:
        assert te.unregister_memory(w.ptr) == 0


def sglang_elastic_ep() -> None:
    """SGLang elastic EP expert backup: register_memory, batch reads; a
    failure must be non-zero so the backup is disabled."""
    te = TransferEngine()
    start(te)
    experts = Memory(2 * MiB)
    assert te.register_memory(experts.ptr, experts.nbytes) == 0
    assert te.batch_transfer_sync_read(PEER, [experts.ptr], [PEER_ADDR + 4 * MiB], [2 * MiB]) == 0
    experts.check(0, 2 * MiB, 4 * MiB, 1)
    assert te.batch_transfer_sync_read(PEER, [experts.ptr], [PEER_ADDR + PEER_SIZE - MiB], [2 * MiB]) != 0
    assert te.unregister_memory(experts.ptr) == 0


def miles_weight_update() -> None:
    """miles / SGLang P2P weight update: a model replica's parameters
    registered, then pushed with batch_transfer_sync_write; also the async
    forms and the polled single write, with Mooncake's batch-id sentinels."""
    te = TransferEngine()
    start(te)
    params = Memory(4 * MiB)
    assert te.register_memory(params.ptr, params.nbytes) == 0
    params.fill(0, 4 * MiB, 60)
    assert (
        te.batch_transfer_sync_write(
            PEER, [params.ptr + i * MiB for i in range(4)], [PEER_ADDR + i * MiB for i in range(4)], [MiB] * 4
        )
        == 0
    )
    b1 = te.batch_transfer_async_write(PEER, [params.ptr], [PEER_ADDR], [MiB])
    b2 = te.batch_transfer_async(PEER, [params.ptr + MiB], [PEER_ADDR + 5 * MiB], [MiB], TransferOpcode.Read)
    assert b1 != 0 and b2 != 0 and b1 != b2
    assert te.get_batch_transfer_status([b1, b2]) == 0
    params.check(MiB, MiB, 5 * MiB, 1)
    bid = te.transfer_submit_write(PEER, params.ptr, PEER_ADDR, MiB)
    assert bid != 0
    while (rc := te.transfer_check_status(bid)) == 0:
        pass
    assert rc == 1
    # Failures: 0 for a batch id, negative for a status.
    assert te.transfer_submit_write(PEER, params.ptr, PEER_ADDR + PEER_SIZE, 16) == 0
    assert te.batch_transfer_async_write("127.0.0.1:1", [params.ptr], [0], [16]) == 0
    assert te.get_batch_transfer_status([123456789]) < 0
    assert te.unregister_memory(params.ptr) == 0


SCENARIOS = {
    f.__name__: f
    for f in (
        sglang_pd,
        vllm_connector,
        vllm_ec_connector,
        checkpoint_engine,
        sglang_remote_weights,
        sglang_elastic_ep,
        miles_weight_update,
    )
}

if __name__ == "__main__":
    SCENARIOS[SCENARIO]()
    print("ok", flush=True)
