"""A process that forks with live engines, for test_lifecycle.py.

    python fork_parent.py PROTOCOL METADATA_URI PEER_NAME PEER_ADDR

It creates a kvfabric.Engine and a Mooncake-shim TransferEngine (both
publishing to METADATA_URI), writes pattern seed 11 to the peer, then forks.
The child calls both engines' copies, closes and drops them, and exits
normally (interpreter finalization, atexit, libfabric's destructors). The
parent then checks that its engine still works: a new engine finds its
segment in the store and writes into its memory, and it writes pattern seed
12 to the peer (offset 1 MiB). One JSON line reports everything.
"""

import gc
import json
import os
import sys

import numpy as np

import kvfabric
from kvfabric.compat.mooncake import TransferEngine
from patterns import pattern

MiB = 1 << 20


def child(e: kvfabric.Engine, seg, te: TransferEngine, peer_name: str, peer_addr: int, buf, w: int) -> None:
    report = {}
    for what, call in [
        ("write", lambda: e.write(seg, buf.ctypes.data, peer_addr, MiB)),
        ("open", lambda: e.open("127.0.0.1:1")),
        ("register", lambda: e.register(bytearray(4096))),
        ("submit", lambda: e.write_async(seg, buf.ctypes.data, peer_addr, MiB)),
    ]:
        try:
            call()
            report[what] = "no error"
        except kvfabric.ClosedError as x:
            report[what] = "ClosedError: " + str(x)
        except Exception as x:  # noqa: BLE001 - reported to the test
            report[what] = f"{type(x).__name__}: {x}"
    report["closed"] = e.closed
    report["shim_write"] = te.transfer_sync_write(peer_name, buf.ctypes.data, peer_addr, MiB)
    report["shim_register"] = te.register_memory(buf.ctypes.data + 8 * MiB, MiB)
    os.write(w, json.dumps(report).encode())
    os.close(w)
    e.close()
    e = te = None  # the last references, before the collection below
    gc.collect()
    sys.exit(0)  # a normal exit: finalization, atexit handlers, library destructors


def main() -> None:
    protocol, uri, peer_name, peer_addr = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    buf = np.zeros(16 * MiB, dtype=np.uint8)
    e = kvfabric.Engine(protocol=protocol, metadata=uri)
    e.register(buf)
    seg = e.open(peer_name)
    buf[:MiB] = pattern(0, MiB, 11)
    e.write(seg, buf.ctypes.data, peer_addr, MiB)
    te = TransferEngine()
    assert te.initialize("127.0.0.1", uri, protocol, "") == 0
    assert te.register_memory(buf.ctypes.data, 4 * MiB) == 0
    shim_name = te.get_local_hostname()

    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        child(e, seg, te, peer_name, peer_addr, buf, w)
    os.close(w)
    chunks = []
    while True:
        b = os.read(r, 65536)
        if not b:
            break
        chunks.append(b)
    _, status = os.waitpid(pid, 0)
    out = {
        "child": json.loads(b"".join(chunks) or b"{}"),
        "child_exit": os.waitstatus_to_exitcode(status),
        "parent_pid": os.getpid(),
    }

    # The parent's engines after the child's exit.
    with kvfabric.Engine(protocol=protocol, metadata=uri) as other:
        src = np.frombuffer(bytearray(pattern(0, MiB, 13).tobytes()), dtype=np.uint8)
        other.register(src)
        try:
            other.write(e.name, src.ctypes.data, buf.ctypes.data + 2 * MiB, MiB)
            out["store_write"] = "ok"
        except kvfabric.KvfabricError as x:
            out["store_write"] = f"{type(x).__name__}: {x}"
        try:
            other.probe(shim_name)
            other.open(shim_name)
            out["shim_segment"] = "ok"
        except kvfabric.KvfabricError as x:
            out["shim_segment"] = f"{type(x).__name__}: {x}"
    out["store_write_landed"] = bool(np.array_equal(buf[2 * MiB : 3 * MiB], pattern(0, MiB, 13)))
    buf[MiB : 2 * MiB] = pattern(MiB, MiB, 12)
    try:
        e.write(seg, buf.ctypes.data + MiB, peer_addr + MiB, MiB)
        out["parent_write"] = "ok"
    except kvfabric.KvfabricError as x:
        out["parent_write"] = f"{type(x).__name__}: {x}"
    out["shim_parent_write"] = te.transfer_sync_write(peer_name, buf.ctypes.data, peer_addr, MiB)
    print(json.dumps(out), flush=True)
    e.close()


if __name__ == "__main__":
    main()
