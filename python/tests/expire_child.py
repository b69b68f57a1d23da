"""The engine side of test_engine.py's expire test, in a process of its own:
the engine sets FI_AV_REMOVE_CLEANUP (KVF_CLOSE_CONNECTIONS) for libfabric,
which reads it once, at its start: here it starts with this engine,
whatever a pytest worker's earlier tests did.

    python expire_child.py PEER_NAME PEER_ADDR PEER_PID

It READs 4 KiB from the peer, stops the peer (SIGSTOP), starts a READ of
1 MiB, ends it with expire(), refills its buffer with 0x77, resumes the
peer, waits 0.5 s, and prints one JSON line: the state expire() returned,
the seconds it took, the error wait() raised after it, the bytes no longer
0x77 ("late"), and whether a READ afterwards worked ("again").
"""

import json
import os
import signal
import sys
import time

import numpy as np

import kvfabric
from stopping import stop

MiB = 1 << 20


def main() -> None:
    name, addr, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    local = np.zeros(MiB, dtype=np.uint8)
    out = {}
    with kvfabric.Engine(protocol="tcp", settings={"KVF_TRANSFER_TIMEOUT_MS": 30000}) as e:
        e.register(local)
        seg = e.open(name)
        done = e.read_async(seg, local, addr, 4096)
        done.wait()
        out["ended_batch"] = done.expire().state.name  # an ended batch: nothing changes
        stop(pid)
        try:
            t = e.read_async(seg, local, addr, MiB)
            try:
                t.wait(timeout=0.3)
                out["pending"] = False
            except kvfabric.TransferTimeoutError:
                out["pending"] = True
            start = time.monotonic()
            out["state"] = t.expire().state.name
            out["took"] = time.monotonic() - start
            try:
                t.wait()
            except kvfabric.TransferTimeoutError as err:
                out["wait_error"] = str(err)
            local[:] = 0x77  # the buffer holds other data now
        finally:
            os.kill(pid, signal.SIGCONT)
        time.sleep(0.5)  # the peer serves what it had been sent
        out["late"] = int(np.count_nonzero(local != 0x77))
        e.read(seg, local, addr, 4096)  # the next request connects again
        out["again"] = True
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
