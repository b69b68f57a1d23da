#!/usr/bin/env python3
"""Engine vs bare fabric, measured in the same run.

For each protocol, operation and block size, alternates kvfabric-fabric-bench
(bare fi_write/fi_read, no engine) and kvfabric-bench (the engine), each as a
real target process plus an initiator process, and reports medians, the
ratio, and each initiator's CPU time per operation. With --two_sided, a
second table puts the bare fabric's two-sided messages (a one-way stream of
SENDs into posted receives, and a ping-pong round trip) beside its WRITE and
the engine's WRITEs with notices (remote CQ data, and a message after
delivery), at the same block sizes. The machine is noisy: alternating runs
and medians keep the comparison fair.
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


def bare(a, proto, op, block):
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
                "--block_size=%d" % block,
                "--queue_depth=%d" % a.queue_depth,
                "--duration=%g" % a.duration,
                "--json",
            ]
            + (["--transmit_complete"] if a.transmit_complete else [])
        )
    finally:
        stop(t)


def engine(a, proto, op, block, notice_path=None):
    """The engine's run; with notice_path, every WRITE carries a notice sent that way."""
    tool = os.path.join(a.build, "tools", "kvfabric-bench")
    sets = []
    extra = a.engine_set + (["KVF_WRITE_COMPLETION=transmit"] if a.transmit_complete else [])
    if notice_path:
        extra = extra + ["KVF_NOTICE_PATH=" + notice_path]
    for kv in extra:
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
            "--block_size=%d" % block,
            "--batch_size=%d" % a.batch,
            "--threads=%d" % a.threads,
            "--duration=%g" % a.duration,
            "--json",
        ] + sets
        if notice_path:
            cmd.append("--notice")
        if a.verify:
            cmd.append("--verify")
        r = run_initiator(cmd)
        if a.verify and r.get("verify") != "verified":
            raise RuntimeError("engine --verify: %s" % r.get("verify"))
        return r
    finally:
        stop(t)


def medians(samples, key):
    return statistics.median(s[key] for s in samples)


def one_sided(a, proto, op, block):
    """Bare and engine alternating; the table's row."""
    b, e = [], []
    for _ in range(a.reps):
        b.append(bare(a, proto, op, block))
        e.append(engine(a, proto, op, block))
    mb, me = medians(b, "bytes_per_s") / 1e9, medians(e, "bytes_per_s") / 1e9
    row = {
        "protocol": proto,
        "operation": op,
        "block_size": block,
        "bare_gbps": [x["bytes_per_s"] / 1e9 for x in b],
        "engine_gbps": [x["bytes_per_s"] / 1e9 for x in e],
        "bare_median": mb,
        "engine_median": me,
        "ratio": me / mb,
        "bare_cpu_us_per_op": medians(b, "cpu_us_per_op"),
        "engine_cpu_us_per_op": medians(e, "cpu_us_per_op"),
        "bare_cpu_s_per_gb": medians(b, "cpu_s_per_gb"),
        "engine_cpu_s_per_gb": medians(e, "cpu_s_per_gb"),
    }
    print(
        "%-6s %-5s %8d %10.2f %10.2f %6.0f%% %9.2f %9.2f"
        % (proto, op, block, mb, me, 100 * me / mb, row["bare_cpu_us_per_op"], row["engine_cpu_us_per_op"])
    )
    sys.stdout.flush()
    return row


# The two-sided table's columns: (name, run) alternating within each repetition.
TWO_SIDED = [
    ("bare_send", lambda a, p, bl: bare(a, p, "send", bl)),
    ("bare_pingpong", lambda a, p, bl: bare(a, p, "pingpong", bl)),
    ("bare_write", lambda a, p, bl: bare(a, p, "write", bl)),
    ("engine_write", lambda a, p, bl: engine(a, p, "write", bl)),
    ("engine_notice_cq_data", lambda a, p, bl: engine(a, p, "write", bl, "cq_data")),
    ("engine_notice_message", lambda a, p, bl: engine(a, p, "write", bl, "message")),
]


def two_sided(a, proto, block):
    samples = {name: [] for name, _ in TWO_SIDED}
    for _ in range(a.reps):
        for name, run in TWO_SIDED:
            samples[name].append(run(a, proto, block))
    row = {"protocol": proto, "block_size": block}
    for name, got in samples.items():
        row[name + "_gbps"] = medians(got, "bytes_per_s") / 1e9
        row[name + "_cpu_us_per_op"] = medians(got, "cpu_us_per_op")
    row["bare_pingpong_rtt_us"] = medians(samples["bare_pingpong"], "rtt_us_median")
    print(
        "%-6s %8d %9.2f %9.2f %9.1f %9.2f %9.2f %9.2f %9.2f"
        % (
            proto,
            block,
            row["bare_send_gbps"],
            row["bare_pingpong_gbps"],
            row["bare_pingpong_rtt_us"],
            row["bare_write_gbps"],
            row["engine_write_gbps"],
            row["engine_notice_cq_data_gbps"],
            row["engine_notice_message_gbps"],
        )
    )
    sys.stdout.flush()
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--blocks", default=str(1 << 20), help="block sizes in bytes, comma-separated")
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
    ap.add_argument(
        "--two_sided",
        action="store_true",
        help="also the bare SEND/RECV stream and ping-pong beside WRITE and the engine's notices",
    )
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
    blocks = [int(b) for b in a.blocks.split(",")]

    results, two = [], []
    print(
        "engine batch %d x threads %d, bare queue depth %d, %d x %g s runs, medians; CPU: the initiator's "
        "user + system time per operation" % (a.batch, a.threads, a.queue_depth, a.reps, a.duration)
    )
    print(
        "%-6s %-5s %8s %10s %10s %7s %9s %9s"
        % ("proto", "op", "block", "bare GB/s", "eng GB/s", "ratio", "bare us", "eng us")
    )
    for proto in a.protocols.split(","):
        for op in a.ops.split(","):
            for block in blocks:
                results.append(one_sided(a, proto, op, block))
    if a.two_sided:
        print(
            "\nGB/s: bare SEND stream, bare ping-pong (2 x block per round trip) and its median round trip, bare "
            "WRITE, engine WRITE, engine WRITE with a notice as remote CQ data, and as a message"
        )
        print(
            "%-6s %8s %9s %9s %9s %9s %9s %9s %9s"
            % ("proto", "block", "send", "pingpong", "rtt us", "write", "eng wr", "notice cq", "notice msg")
        )
        for proto in a.protocols.split(","):
            for block in blocks:
                two.append(two_sided(a, proto, block))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "results": results, "two_sided": two}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
