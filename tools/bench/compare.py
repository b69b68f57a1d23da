#!/usr/bin/env python3
"""Engine vs bare fabric, measured in the same run.

For each protocol and operation, alternates kvfabric-fabric-bench (bare
fi_write/fi_read, no engine) and kvfabric-bench (the engine), each as a real
target process plus an initiator process, and reports medians and the ratio.
The machine is noisy: alternating runs and medians keep the comparison fair.
"""

import argparse
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time


def start_target(cmd, pattern, timeout=30):
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    deadline = time.time() + timeout
    while time.time() < deadline:
        line = p.stdout.readline()
        if not line:
            break
        m = re.search(pattern, line)
        if m:
            return p, m.group(1)
    p.kill()
    raise RuntimeError("target did not start: %s" % " ".join(cmd))


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=10)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def run_initiator(cmd):
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError("%s failed (%d): %s" % (cmd[0], out.returncode, out.stderr.strip()[-2000:]))
    for line in out.stdout.splitlines():
        if line.startswith("{"):
            return json.loads(line)
    raise RuntimeError("no JSON from %s" % cmd[0])


def bare(a, proto, op):
    tool = os.path.join(a.build, "tools", "kvfabric-fabric-bench")
    t, addr = start_target(
        [tool, "--mode=target", "--protocol=" + proto, "--buffer_size=%d" % a.buffer], r"--segment_id=(\S+)"
    )
    try:
        return run_initiator(
            [
                tool,
                "--mode=initiator",
                "--protocol=" + proto,
                "--segment_id=" + addr,
                "--operation=" + op,
                "--block_size=%d" % a.block,
                "--queue_depth=%d" % a.queue_depth,
                "--duration=%g" % a.duration,
                "--json",
            ]
            + (["--transmit_complete"] if a.transmit_complete else [])
        )
    finally:
        stop(t)


def engine(a, proto, op):
    tool = os.path.join(a.build, "tools", "kvfabric-bench")
    sets = []
    for kv in a.engine_set + (["KVF_WRITE_COMPLETION=transmit"] if a.transmit_complete else []):
        sets += ["--set", kv]
    t, seg = start_target(
        [tool, "--mode=target", "--protocol=" + proto, "--buffer_size=%d" % a.buffer] + sets, r"--segment_id=(\S+)"
    )
    try:
        cmd = [
            tool,
            "--mode=initiator",
            "--protocol=" + proto,
            "--segment_id=" + seg,
            "--operation=" + op,
            "--block_size=%d" % a.block,
            "--batch_size=%d" % a.batch,
            "--threads=%d" % a.threads,
            "--duration=%g" % a.duration,
            "--json",
        ] + sets
        if a.verify:
            cmd.append("--verify")
        r = run_initiator(cmd)
        if a.verify and r.get("verify") != "verified":
            raise RuntimeError("engine --verify: %s" % r.get("verify"))
        return r
    finally:
        stop(t)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument(
        "--queue_depth",
        type=int,
        default=0,
        help="bare tool operations in flight (default: threads x batch, as the engine)",
    )
    ap.add_argument("--buffer", type=int, default=1 << 28)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--verify", action="store_true", help="engine runs check every byte")
    ap.add_argument("--json_out", help="write all samples and medians here")
    ap.add_argument(
        "--engine_set",
        action="append",
        default=[],
        metavar="KVF_NAME=value",
        help="a setting for both engine processes (repeatable)",
    )
    ap.add_argument(
        "--transmit_complete",
        action="store_true",
        help="writes complete when the source is reusable, not when delivered, on both "
        "tools (no visibility guarantee: for measuring what delivery costs)",
    )
    a = ap.parse_args()
    if a.queue_depth <= 0:
        a.queue_depth = a.threads * a.batch

    results = []
    print(
        "block %d B, engine batch %d x threads %d, bare queue depth %d, %d x %g s runs, medians"
        % (a.block, a.batch, a.threads, a.queue_depth, a.reps, a.duration)
    )
    print("%-6s %-5s %12s %12s %8s" % ("proto", "op", "bare GB/s", "engine GB/s", "ratio"))
    failed = False
    for proto in a.protocols.split(","):
        for op in a.ops.split(","):
            b, e = [], []
            for _ in range(a.reps):
                b.append(bare(a, proto, op)["bytes_per_s"] / 1e9)
                e.append(engine(a, proto, op)["bytes_per_s"] / 1e9)
            mb, me = statistics.median(b), statistics.median(e)
            row = {
                "protocol": proto,
                "operation": op,
                "block_size": a.block,
                "bare_gbps": b,
                "engine_gbps": e,
                "bare_median": mb,
                "engine_median": me,
                "ratio": me / mb,
            }
            results.append(row)
            print("%-6s %-5s %12.2f %12.2f %7.0f%%" % (proto, op, mb, me, 100 * me / mb))
            sys.stdout.flush()
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "results": results}, f, indent=1)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
