#!/usr/bin/env python3
"""Python vs C++: the same transfers from the Mooncake-compatible Python API
and from kvfabric-bench, against one target, measured in the same run.

Python: ``batch_transfer_sync_write`` (or ``_read``) of BATCH x BLOCK in a
loop for DURATION seconds. C++: ``kvfabric-bench --threads 1
--batch_size BATCH`` for the same time. Runs alternate (C++, Python, C++,
...) and the medians are compared. Run it with the Python that has kvfabric
installed (make python does that in .venv).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import time

from compare import run_initiator, start_target, stop  # this directory: one way to run the C++ bench
from kvfabric.compat.mooncake import TransferEngine


def cpp_run(tool, protocol, seg, op, block, batch, duration):
    r = run_initiator([tool, "--mode=initiator", f"--protocol={protocol}", f"--segment_id={seg}",
                       f"--operation={op}", f"--block_size={block}", f"--batch_size={batch}", "--threads=1",
                       f"--duration={duration}", "--json"])
    return r["bytes_per_s"] / 1e9


def py_run(te, seg, remote, local, op, block, batch, duration):
    addrs = [local + i * block for i in range(batch)]
    peers = [remote + i * block for i in range(batch)]
    lengths = [block] * batch
    call = te.batch_transfer_sync_write if op == "write" else te.batch_transfer_sync_read
    moved = 0
    t0 = time.perf_counter()
    until = t0 + duration
    while time.perf_counter() < until:
        if call(seg, addrs, peers, lengths) != 0:
            raise RuntimeError("batch_transfer_sync failed")
        moved += block * batch
    return moved / (time.perf_counter() - t0) / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--ops", default="write")
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json_out")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tools", "kvfabric-bench")
    size = a.block * a.batch
    target, seg = start_target([tool, "--mode=target", f"--protocol={a.protocol}", f"--buffer_size={size}"],
                               r"--segment_id=(\S+)")
    te = TransferEngine()
    results = []
    try:
        if te.initialize("127.0.0.1", "P2PHANDSHAKE", a.protocol, "") != 0:
            raise RuntimeError("initialize failed")
        # Page-aligned, touched, registered: what kvfabric-bench uses too.
        local_addr = te.allocate_managed_buffer(size)
        if local_addr == 0:
            raise RuntimeError("allocate_managed_buffer failed")
        ctypes.memset(local_addr, 1, size)
        remote = te.get_first_buffer_address(seg)
        te.warmup_efa_segment(seg)
        print(f"{a.protocol}, block {a.block} B, batch {a.batch}, 1 thread, {a.reps} x {a.duration:g} s runs, medians")
        print(f"{'op':6} {'C++ GB/s':>9} {'Python GB/s':>12} {'Python / C++':>13}")
        for op in a.ops.split(","):
            cpp, py = [], []
            for _ in range(a.reps):
                cpp.append(cpp_run(tool, a.protocol, seg, op, a.block, a.batch, a.duration))
                py.append(py_run(te, seg, remote, local_addr, op, a.block, a.batch, a.duration))
            c, p = statistics.median(cpp), statistics.median(py)
            results.append({"operation": op, "cpp_gbps": cpp, "python_gbps": py, "cpp_median": c,
                            "python_median": p, "ratio": p / c})
            print(f"{op:6} {c:9.2f} {p:12.2f} {p / c:12.0%}")
    finally:
        te.close()
        stop(target)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
