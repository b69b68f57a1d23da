#!/usr/bin/env python3
"""The Rust crate beside the C++ engine: kvfabric-bench's initiator and the
crate's example initiator (bindings/rust/kvfabric/examples/transfer.rs,
release build) against the same kvfabric-bench target, alternating, same
block, batch, threads and duration; medians and the ratio Rust/C++.
"""

import argparse
import json
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_initiator, start_target, stop  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument(
        "--rust_example", default=None, help="the example binary (default: BUILD/rust/release/examples/transfer)"
    )
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--block", type=int, default=1 << 20)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json_out")
    a = ap.parse_args()
    bench = os.path.join(a.build, "tools", "kvfabric-bench")
    rust = a.rust_example or os.path.join(a.build, "rust", "release", "examples", "transfer")
    if not os.access(rust, os.X_OK):
        sys.exit("rust_vs_cpp: %s is not built (make rust-bench builds it)" % rust)
    env_lib = os.path.join(os.path.abspath(a.build), "src")
    os.environ["LD_LIBRARY_PATH"] = env_lib + ":" + os.environ.get("LD_LIBRARY_PATH", "")
    rows = []
    print(
        "block %d B, batch %d x threads %d, %d alternated runs of %g s, medians"
        % (a.block, a.batch, a.threads, a.reps, a.duration)
    )
    print("%-5s %-5s %14s %14s %8s" % ("proto", "op", "C++ GB/s", "Rust GB/s", "Rust/C++"))
    for proto in a.protocols.split(","):
        t, seg = start_target(
            [bench, "--mode=target", "--protocol=" + proto, "--buffer_size=%d" % (256 << 20)], r"--segment_id=(\S+)"
        )
        try:
            for op in a.ops.split(","):
                cpp, rs = [], []
                for rep in range(a.reps):
                    for which in ("cpp", "rust") if rep % 2 == 0 else ("rust", "cpp"):
                        if which == "cpp":
                            r = run_initiator(
                                [
                                    bench,
                                    "--mode=initiator",
                                    "--protocol=" + proto,
                                    "--segment_id=" + seg,
                                    "--operation=" + op,
                                    "--block_size=%d" % a.block,
                                    "--batch_size=%d" % a.batch,
                                    "--threads=%d" % a.threads,
                                    "--duration=%g" % a.duration,
                                    "--json",
                                ]
                            )
                            cpp.append(r["bytes_per_s"] / 1e9)
                        else:
                            r = run_initiator(
                                [
                                    rust,
                                    "initiator",
                                    "--protocol",
                                    proto,
                                    "--segment",
                                    seg,
                                    "--op",
                                    op,
                                    "--block",
                                    str(a.block),
                                    "--batch",
                                    str(a.batch),
                                    "--threads",
                                    str(a.threads),
                                    "--duration",
                                    str(a.duration),
                                ]
                            )
                            if op == "write" and r["verify"] != "verified":
                                raise RuntimeError("rust initiator: " + r["verify"])
                            rs.append(r["bytes_per_s"] / 1e9)
                m_cpp, m_rs = statistics.median(cpp), statistics.median(rs)
                rows.append(
                    {
                        "protocol": proto,
                        "op": op,
                        "cpp": cpp,
                        "rust": rs,
                        "median_cpp": m_cpp,
                        "median_rust": m_rs,
                        "rust_over_cpp": m_rs / m_cpp,
                    }
                )
                print("%-5s %-5s %14.3f %14.3f %8.3f" % (proto, op, m_cpp, m_rs, m_rs / m_cpp))
                sys.stdout.flush()
        finally:
            stop(t)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(
                {
                    "block": a.block,
                    "batch": a.batch,
                    "threads": a.threads,
                    "duration_s": a.duration,
                    "reps": a.reps,
                    "results": rows,
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
