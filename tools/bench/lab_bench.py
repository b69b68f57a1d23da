#!/usr/bin/env python3
"""The multi-rail benchmark on the emulated fabric (tests/lab/lab.sh), as root.

Builds 2 hosts x N rails (namespaces, veth pairs shaped by tc tbf), then
measures, each figure beside its ceiling from the same run:
  - throughput vs block size for 1, 2 .. N rails, WRITE and READ, against the
    emulated line rate (the sum of the rails' tbf rates) and the bare fabric
    (one kvfabric-fabric-bench pair per rail, all at once);
  - one large transfer alone (--large bytes) over N rails vs one rail;
  - the first use of a peer (--mode=probe): open, warmup, cold first write;
  - uneven rails (--uneven rates): throughput against their summed rate;
  - the rail policies (KVF_RAIL_POLICY: auto, least_loaded, round_robin,
    split) on N rails, even and uneven, alternating: many independent
    64 KiB buffers, 1 MiB buffers a few at a time, and one large buffer
    alone.
Writes everything to --json_out; tools/bench/plot_lab.py draws it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_initiator, start_target, stop  # noqa: E402

LAB = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tests", "lab", "lab.sh")
ENGINE_PORT = 17000
BARE_PORT = 17100


def lab(*args):
    subprocess.run([LAB, *args], check=True, stdout=subprocess.DEVNULL)


def rate_bps(rate):
    """'2gbit' -> bytes per second (tc units: bit/s, decimal)."""
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "bit": 1}
    for u, m in units.items():
        if rate.endswith(u):
            return float(rate[: -len(u)]) * m / 8
    raise ValueError("rate %r: use e.g. 2gbit or 500mbit" % rate)


def rail_rates(rates, n):
    parts = rates.split(",")
    unit = "".join(c for c in parts[-1] if c.isalpha()) or "gbit"
    parts = [p if any(c.isalpha() for c in p) else p + unit for p in parts]
    return [rate_bps(parts[min(i, len(parts) - 1)]) for i in range(n)]


def tool(a, name):
    return os.path.join(a.build, "tools", name)


def engine_target(a, rails):
    devices = ",".join("a%d" % i for i in range(rails))
    return start_target(
        [
            LAB,
            "exec",
            "A",
            tool(a, "kvfabric-bench"),
            "--mode=target",
            "--protocol=tcp",
            "--nic_filter=" + devices,
            "--local_server_name=10.77.0.1:%d" % ENGINE_PORT,
            "--buffer_size=%d" % a.buffer,
        ],
        r"--segment_id=(\S+)",
    )


def engine_points(a, seg, rails, op, blocks, batch, threads, duration, extra=()):
    """One initiator process sweeping `blocks`; its JSON points."""
    devices = ",".join("b%d" % i for i in range(rails))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            LAB,
            "exec",
            "B",
            tool(a, "kvfabric-bench"),
            "--mode=initiator",
            "--protocol=tcp",
            "--nic_filter=" + devices,
            "--local_server_name=10.77.0.2:0",
            "--segment_id=" + seg,
            "--operation=" + op,
            "--block_size=" + ",".join(str(b) for b in blocks),
            "--batch_size=%d" % batch,
            "--threads=%d" % threads,
            "--duration=%g" % duration,
            "--json_out=" + out.name,
            *extra,
        ]
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=900)
        if r.returncode != 0:
            raise RuntimeError("initiator failed (%d): %s" % (r.returncode, r.stderr[-2000:]))
        with open(out.name) as f:
            return json.load(f)["points"]


def bare_fabric(a, rails, op, block):
    """kvfabric-fabric-bench on every rail at once: the bare fabric's sum."""
    targets, inits = [], []
    try:
        for i in range(rails):
            t, addr = start_target(
                [
                    LAB,
                    "exec",
                    "A",
                    tool(a, "kvfabric-fabric-bench"),
                    "--mode=target",
                    "--protocol=tcp",
                    "--nic_filter=a%d" % i,
                    "--local_server_name=10.77.%d.1:%d" % (i, BARE_PORT + i),
                    "--buffer_size=%d" % (64 << 20),
                ],
                r"--segment_id=(\S+)",
            )
            targets.append((t, addr))
        for i, (_, addr) in enumerate(targets):
            inits.append(
                subprocess.Popen(
                    [
                        LAB,
                        "exec",
                        "B",
                        tool(a, "kvfabric-fabric-bench"),
                        "--mode=initiator",
                        "--protocol=tcp",
                        "--nic_filter=b%d" % i,
                        "--segment_id=" + addr,
                        "--operation=" + op,
                        "--block_size=%d" % block,
                        "--queue_depth=16",
                        "--duration=%g" % a.duration,
                        "--json",
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )
            )
        total = 0.0
        for p in inits:
            out, err = p.communicate(timeout=300)
            if p.returncode != 0:
                raise RuntimeError("bare initiator failed: " + err[-2000:])
            total += next(json.loads(line) for line in out.splitlines() if line.startswith("{"))["bytes_per_s"]
        return total
    finally:
        for t, _ in targets:
            stop(t)


def sweep(a, rates_label, rail_counts, ops, blocks, reps):
    rows = []
    rates = rail_rates(rates_label, max(rail_counts))
    for n in rail_counts:
        line = sum(rates[:n])
        t, seg = engine_target(a, max(rail_counts))
        try:
            for op in ops:
                samples = {b: [] for b in blocks}
                per_rail = {b: None for b in blocks}
                for _ in range(reps):
                    for p in engine_points(a, seg, n, op, blocks, a.batch, a.threads, a.duration):
                        samples[p["block_size"]].append(p["bytes_per_s"])
                        per_rail[p["block_size"]] = p["rail_bytes"][:n]
                bare = statistics.median(bare_fabric(a, n, op, 1 << 20) for _ in range(reps)) if a.bare else None
                for b in blocks:
                    med = statistics.median(samples[b])
                    row = {
                        "rates": rates_label,
                        "rails": n,
                        "operation": op,
                        "block_size": b,
                        "engine_bps": samples[b],
                        "engine_median": med,
                        "line_rate": line,
                        "of_line": med / line,
                        "bare_1mib": bare,
                        "of_bare": med / bare if bare else None,
                        "rail_bytes_last": per_rail[b],
                    }
                    rows.append(row)
                    print(
                        "%-10s %2d rails %-5s %8d B: %7.0f MB/s  %5.1f%% of line %7.0f MB/s%s"
                        % (
                            rates_label,
                            n,
                            op,
                            b,
                            med / 1e6,
                            100 * med / line,
                            line / 1e6,
                            "" if not bare else "  %5.1f%% of bare %7.0f MB/s" % (100 * med / bare, bare / 1e6),
                        )
                    )
                    sys.stdout.flush()
        finally:
            stop(t)
    return rows


POLICIES = ["auto", "least_loaded", "round_robin", "split"]
# (name, block, batch, threads): many independent buffers, a few mid-sized
# ones at a time, one large buffer alone.
POLICY_WORKLOADS = [
    ("many 64 KiB", 65536, 64, 4),
    ("4 x 1 MiB", 1 << 20, 4, 1),
    ("one 64 MiB", 64 << 20, 1, 1),
]


def policies(a, rates_label, rails):
    """Every policy on every workload, alternating policies within each repetition."""
    rows = []
    t, seg = engine_target(a, rails)
    try:
        for name, block, batch, threads in POLICY_WORKLOADS:
            samples = {p: [] for p in POLICIES}
            for _ in range(a.reps):
                for p in POLICIES:
                    point = engine_points(
                        a, seg, rails, "write", [block], batch, threads, a.duration, ["--set", "KVF_RAIL_POLICY=" + p]
                    )[0]
                    samples[p].append(point["bytes_per_s"])
            med = {p: statistics.median(v) for p, v in samples.items()}
            best = max(med[p] for p in POLICIES if p != "auto")
            rows.append(
                {
                    "rates": rates_label,
                    "rails": rails,
                    "workload": name,
                    "block_size": block,
                    "batch_size": batch,
                    "threads": threads,
                    "samples": samples,
                    "median": med,
                    "auto_of_best": med["auto"] / best,
                }
            )
            print(
                "%-10s %-12s " % (rates_label, name)
                + "  ".join("%s %5.0f" % (p, med[p] / 1e6) for p in POLICIES)
                + "  MB/s; auto %.0f%% of the best other" % (100 * med["auto"] / best)
            )
            sys.stdout.flush()
    finally:
        stop(t)
    return rows


def large_transfer(a, rails_max):
    """One --large transfer at a time: its p50 time over 1 rail and over all."""
    out = {}
    t, seg = engine_target(a, rails_max)
    try:
        for n in (1, rails_max):
            times = []
            for _ in range(a.reps):
                p = engine_points(a, seg, n, "write", [a.large], 1, 1, max(a.duration, 2.0))[0]
                times.append(p["batch_latency_us"]["p50"])
            out[n] = statistics.median(times)
    finally:
        stop(t)
    ratio = out[rails_max] / out[1]
    print(
        "one %d MiB WRITE alone: %.1f ms over 1 rail, %.1f ms over %d rails: %.0f%% of the one-rail time"
        % (a.large >> 20, out[1] / 1e3, out[rails_max] / 1e3, rails_max, 100 * ratio)
    )
    return {"bytes": a.large, "one_rail_us": out[1], "all_rails_us": out[rails_max], "rails": rails_max, "ratio": ratio}


def probe(a, rails):
    t, seg = engine_target(a, rails)
    rows = []
    try:
        devices = ",".join("b%d" % i for i in range(rails))
        for _ in range(max(5, a.reps)):
            r = run_initiator(
                [
                    LAB,
                    "exec",
                    "B",
                    tool(a, "kvfabric-bench"),
                    "--mode=probe",
                    "--protocol=tcp",
                    "--nic_filter=" + devices,
                    "--local_server_name=10.77.0.2:0",
                    "--segment_id=" + seg,
                    "--block_size=%d" % (1 << 20),
                    "--buffer_size=%d" % (1 << 20),
                    "--json",
                ]
            )
            rows.append(r)
    finally:
        stop(t)
    med = {
        k: statistics.median(r[k] for r in rows)
        for k in ("open_segment_us", "warmup_us", "first_transfer_us", "warm_transfer_p50_us")
    }
    print(
        "first use of a %dx%d-rail peer (median of %d fresh processes): open %.1f ms (one handshake, every "
        "rail inserted), warmup %.3f ms, cold first 1 MiB write %.1f ms, warm %.1f ms"
        % (
            rails,
            rails,
            len(rows),
            med["open_segment_us"] / 1e3,
            med["warmup_us"] / 1e3,
            med["first_transfer_us"] / 1e3,
            med["warm_transfer_p50_us"] / 1e3,
        )
    )
    return {"rails": rails, "runs": rows, "median": med}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--rails", type=int, default=4)
    ap.add_argument("--rates", default="2gbit", help="tbf rate of every rail (keep the sum near 1 GB/s: the CPU)")
    ap.add_argument("--uneven", default="2,2,2,1gbit", help="per-rail rates of the uneven run; '' skips it")
    ap.add_argument("--mtu", default="9000")
    ap.add_argument("--blocks", default="16384,65536,262144,1048576,4194304")
    ap.add_argument("--ops", default="write,read")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--duration", type=float, default=3)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--buffer", type=int, default=1 << 30)
    ap.add_argument("--large", type=int, default=256 << 20, help="bytes of the lone large transfer")
    ap.add_argument("--no_bare", dest="bare", action="store_false", help="skip the bare-fabric ceiling")
    ap.add_argument(
        "--only", default="", help="comma-separated parts to run: sweep,large,probe,uneven,policies (default: all)"
    )
    ap.add_argument("--json_out", default="build/lab-bench.json")
    a = ap.parse_args()
    a.build = os.path.abspath(a.build)
    blocks = [int(b) for b in a.blocks.split(",")]
    ops = a.ops.split(",")
    counts = sorted({1, 2, a.rails} if a.rails >= 2 else {1})
    doc = {"args": vars(a), "host": os.uname().nodename, "started": time.strftime("%Y-%m-%d %H:%M:%S")}
    try:
        parts = set(a.only.split(",")) if a.only else {"sweep", "large", "probe", "uneven", "policies"}
        lab("up", "--rails", str(a.rails), "--rates", a.rates, "--mtu", a.mtu)
        if "sweep" in parts:
            doc["even"] = sweep(a, a.rates, counts, ops, blocks, a.reps)
        if "large" in parts:
            doc["large"] = large_transfer(a, a.rails)
        if "probe" in parts:
            doc["probe"] = probe(a, a.rails)
        if "policies" in parts:
            doc["policies"] = policies(a, a.rates, a.rails)
        if a.uneven and ({"uneven", "policies"} & parts):
            lab("up", "--rails", str(a.rails), "--rates", a.uneven, "--mtu", a.mtu)
            if "uneven" in parts:
                doc["uneven"] = sweep(a, a.uneven, [a.rails], ops, [65536, 1 << 20], a.reps)
            if "policies" in parts:
                doc["policies_uneven"] = policies(a, a.uneven, a.rails)
    finally:
        lab("down")
    os.makedirs(os.path.dirname(os.path.abspath(a.json_out)), exist_ok=True)
    with open(a.json_out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote " + a.json_out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
