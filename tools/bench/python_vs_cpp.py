#!/usr/bin/env python3
"""Python vs C++: the same transfers from the Mooncake-compatible Python API
and from kvfabric-bench, against one target, measured in the same run.

For each shape BATCHxBLOCK (--shapes): Python calls
``batch_transfer_sync_write`` (or ``_read``) with lists of BATCH addresses
and lengths in a loop for DURATION seconds; C++ runs ``kvfabric-bench
--threads 1 --batch_size BATCH --block_size BLOCK`` for the same time. Runs
alternate (C++, Python, C++, ...) and the medians are compared.

"Python us/req" is what a request costs in Python: the calling thread's CPU
time in each API call minus the CPU time it spent inside the C++ engine
(past converting the lists, GIL released: ``_core.Engine.engine_cpu_ns``),
divided by the requests. "wall" is the same from wall-clock times: on 2
cores it also counts the moments the caller waits for a core while both
processes' progress threads spin down after a batch. The lists are built
anew for each call, as the frameworks do (not counted: that is the
caller's work); "Python GB/s" is the whole loop's, list building included. Run it with the Python that has
kvfabric installed (make python does that in .venv).
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
    r = run_initiator(
        [
            tool,
            "--mode=initiator",
            f"--protocol={protocol}",
            f"--segment_id={seg}",
            f"--operation={op}",
            f"--block_size={block}",
            f"--batch_size={batch}",
            "--threads=1",
            f"--duration={duration}",
            "--json",
        ]
    )
    return r["bytes_per_s"] / 1e9


def py_run(te, seg, remote, local, op, block, batch, duration):
    """(GB/s, Python CPU microseconds per request, the same by wall clock) of one timed loop.

    The lists are built anew for every call, as the frameworks build them
    (from their block tables); building them is the caller's work and is
    not counted, only the API call is."""
    call = te.batch_transfer_sync_write if op == "write" else te.batch_transfer_sync_read
    core = te._core
    moved = calls = cpu_ns = wall_ns = 0
    t0 = time.perf_counter()
    until = t0 + duration
    while time.perf_counter() < until:
        addrs = [local + i * block for i in range(batch)]
        peers = [remote + i * block for i in range(batch)]
        lengths = [block] * batch
        e_wall, e_cpu = core.engine_ns, core.engine_cpu_ns
        c0, w0 = time.thread_time_ns(), time.perf_counter_ns()
        if call(seg, addrs, peers, lengths) != 0:
            raise RuntimeError("batch_transfer_sync failed")
        c1, w1 = time.thread_time_ns(), time.perf_counter_ns()
        cpu_ns += (c1 - c0) - (core.engine_cpu_ns - e_cpu)
        wall_ns += (w1 - w0) - (core.engine_ns - e_wall)
        moved += block * batch
        calls += 1
    wall = time.perf_counter() - t0
    n = calls * batch
    return moved / wall / 1e9, cpu_ns / n / 1e3, wall_ns / n / 1e3


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocol", default="tcp")
    ap.add_argument("--ops", default="write")
    ap.add_argument("--shapes", default="128x1048576", help="comma list of BATCHxBLOCK, e.g. 65536x128,128x1048576")
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json_out")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tools", "kvfabric-bench")
    shapes = [tuple(int(x) for x in sh.split("x")) for sh in a.shapes.split(",")]
    size = max(batch * block for batch, block in shapes)
    target, seg = start_target(
        [tool, "--mode=target", f"--protocol={a.protocol}", f"--buffer_size={size}"], r"--segment_id=(\S+)"
    )
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
        print(f"{a.protocol}, 1 thread, {a.reps} x {a.duration:g} s runs, medians")
        print(
            f"{'batch x block':>15} {'op':6} {'C++ GB/s':>9} {'Python GB/s':>12} {'Python / C++':>13} "
            f"{'Python us/req':>14} {'(wall)':>7}"
        )
        for batch, block in shapes:
            for op in a.ops.split(","):
                cpp, py, us, wall_us = [], [], [], []
                for _ in range(a.reps):
                    cpp.append(cpp_run(tool, a.protocol, seg, op, block, batch, a.duration))
                    g, u, w = py_run(te, seg, remote, local_addr, op, block, batch, a.duration)
                    py.append(g)
                    us.append(u)
                    wall_us.append(w)
                c, p = statistics.median(cpp), statistics.median(py)
                u, w = statistics.median(us), statistics.median(wall_us)
                results.append(
                    {
                        "batch": batch,
                        "block": block,
                        "operation": op,
                        "cpp_gbps": cpp,
                        "python_gbps": py,
                        "python_us_per_request": us,
                        "python_wall_us_per_request": wall_us,
                        "cpp_median": c,
                        "python_median": p,
                        "ratio": p / c,
                        "python_us_median": u,
                        "python_wall_us_median": w,
                    }
                )
                print(f"{f'{batch} x {block}':>15} {op:6} {c:9.2f} {p:12.2f} {p / c:12.0%} {u:14.3f} {w:7.3f}")
    finally:
        te.close()
        stop(target)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
