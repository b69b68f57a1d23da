#!/usr/bin/env python3
"""Weight sync: kvfabric.weights beside torch.distributed broadcast over gloo
and the bare fabric's bound, measured in the same run (docs/weights.md).

One sender and 1, 2 and 4 receivers, each a process, move the named tensors
of a Qwen3-style model scaled to a few GB (weights_member.py): all on this
host (--where local), or the sender on the emulated fabric's host A and the
receivers on host B (--where lab: tests/lab/lab.sh, root; --lab_rails veth
pairs shaped to --lab_rates each). The bound is the model's bytes over the
bare fabric's WRITE throughput in the same run (kvfabric-fabric-bench): of
one link here, of every rail at once in the lab. Runs alternate between kvfabric and gloo; medians of --reps
versions each, after one version that warms the connections up. With --verl, verl's checkpoint engines
too (kvfabric's backend and verl's own Mooncake backend over kvfabric's shim), each version a whole step
of verl's (prepare, topology, process group, send and receive), over tcp."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from compare import bare  # noqa: E402
from lab_bench import LAB, bare_fabric, lab  # noqa: E402


def bound_gbps(a, proto: str) -> float:
    """One link's bare WRITE throughput here (8 MiB blocks, 4 in flight, 3 s);
    in the lab, every rail's at once."""
    if a.where == "lab":
        return bare_fabric(argparse.Namespace(build=a.build, duration=3), a.lab_rails, "write", 4 << 20) / 1e9
    one = argparse.Namespace(build=a.build, buffer=256 << 20, queue_depth=4, duration=3, transmit_complete=False)
    return float(bare(one, proto, "write", 8 << 20)["bytes_per_s"]) / 1e9


def sync_times(a, kind: str, proto: str, receivers: int) -> tuple[list[float], int, list[dict]]:
    """Seconds per version (sender's start to the last member's end), the
    model's bytes, and per version where the sender's and the last
    receiver's time went (kvfabric only)."""
    python = a.python if kind == "kvfabric" else a.torch_python
    env = dict(os.environ)
    if kind.startswith("verl-"):  # verl's Mooncake backend imports SGLang's process group
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.path.abspath(a.sglang_src), env.get("PYTHONPATH")) if p)
    with tempfile.TemporaryDirectory(prefix="kvf-weights-bench-") as d:
        procs = []
        for rank in range(receivers + 1):
            spec = dict(
                kind=kind,
                protocol=proto,
                rank=rank,
                world=receivers + 1,
                dir=d,
                layers=a.layers,
                hidden=a.hidden,
                inter=a.inter,
                kv=a.kv,
                vocab=a.vocab,
                bucket=a.verl_bucket if kind.startswith("verl-") else a.bucket,
            )
            where = []
            if a.where == "lab":  # the sender on host A, the receivers on host B, every rail
                host, side = ("A", "a") if rank == 0 else ("B", "b")
                spec["listen"] = "10.77.0.%d:0" % (1 if rank == 0 else 2)
                spec["nics"] = ",".join("%s%d" % (side, i) for i in range(a.lab_rails))
                where = [LAB, "exec", host]
            procs.append(
                subprocess.Popen(
                    where + [python, os.path.join(HERE, "weights_member.py"), json.dumps(spec)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    text=True,
                    env=env,
                )
            )
        try:
            ready = [json.loads(p.stdout.readline()) for p in procs]
            times, spent = [], []
            for version in range(1, a.reps + 2):
                for p in procs[1:] + procs[:1]:  # receivers first: they wait for the sender
                    p.stdin.write("go %d\n" % version)
                    p.stdin.flush()
                got = [json.loads(p.stdout.readline()) for p in procs]
                if version > 1:  # the first warms the connections up
                    times.append(max(g["end"] for g in got) - got[0]["start"])
                    spent.append({"sender": got[0]["spent"], "last_receiver": got[-1]["spent"]})
            return times, ready[0]["bytes"], spent
        finally:
            for p in procs:
                try:
                    p.stdin.write("quit\n")
                    p.stdin.flush()
                except BrokenPipeError:
                    pass
            for p in procs:
                p.wait(timeout=60)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--receivers", default="1,2,4")
    ap.add_argument("--reps", type=int, default=3, help="versions measured per run (medians)")
    ap.add_argument("--rounds", type=int, default=1, help="alternations of kvfabric and gloo")
    # Qwen3-8B's shapes at half width and half depth: about 2.4 GB in two-byte weights.
    ap.add_argument("--layers", type=int, default=18)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--inter", type=int, default=6144)
    ap.add_argument("--kv", type=int, default=512)
    ap.add_argument("--vocab", type=int, default=75968)
    ap.add_argument("--bucket", type=int, default=64 << 20)
    ap.add_argument("--python", default=sys.executable, help="a Python with kvfabric")
    ap.add_argument(
        "--torch_python",
        default=os.environ.get("KVF_LMCACHE_PYTHON", ""),
        help="a Python with torch, for gloo (empty: no gloo runs)",
    )
    ap.add_argument(
        "--where",
        choices=("local", "lab"),
        default="local",
        help="local: every member on this host; lab: the sender on the emulated fabric's host A, "
        "the receivers on host B (tests/lab/lab.sh, root)",
    )
    ap.add_argument(
        "--verl",
        action="store_true",
        help="also verl's checkpoint engines, kvfabric's and verl's own Mooncake backend over kvfabric's shim, "
        "in --torch_python (verl installed there, as make test does), tcp only",
    )
    ap.add_argument("--verl_bucket", type=int, default=512 << 20, help="update_weights_bucket_megabytes, in bytes")
    ap.add_argument("--sglang_src", default=os.environ.get("KVF_SGLANG_SRC", "build/sglang-0.5.23"))
    ap.add_argument("--lab_rails", type=int, default=4)
    ap.add_argument("--lab_rates", default="2gbit")
    ap.add_argument("--json_out", default="")
    a = ap.parse_args()
    if a.where == "lab":
        lab("up", "--rails", str(a.lab_rails), "--rates", a.lab_rates)
        if a.verl:  # Ray, which verl's Mooncake backend asks for the host's address, goes by the default route
            for host, nic in (("A", "a0"), ("B", "b0")):
                lab("exec", host, "ip", "route", "add", "default", "dev", nic)
        try:
            return run(a)
        finally:
            lab("down")
    return run(a)


def run(a) -> int:
    rows = []
    for proto in a.protocols.split(","):
        for m in [int(x) for x in a.receivers.split(",")]:
            verl = ("verl-kvfabric", "verl-mooncake") if a.verl and a.torch_python and proto == "tcp" else ()
            runs = {"kvfabric": [], "gloo": [], "bare_gbps": [], "spent": [], **{k: [] for k in verl}}
            for _ in range(a.rounds):
                runs["bare_gbps"].append(bound_gbps(a, proto))
                t, nbytes, spent = sync_times(a, "kvfabric", proto, m)
                runs["kvfabric"] += t
                runs["spent"] += spent
                if a.torch_python:
                    runs["gloo"] += sync_times(a, "gloo", proto, m)[0]
                for kind in verl:
                    runs[kind] += sync_times(a, kind, proto, m)[0]
            bound = nbytes / (statistics.median(runs["bare_gbps"]) * 1e9)
            row = {
                "protocol": proto,
                "receivers": m,
                "bytes": nbytes,
                "bound_s": bound,
                "bare_gbps": runs["bare_gbps"],
                "kvfabric_s": runs["kvfabric"],
                "gloo_s": runs["gloo"],
                "kvfabric_spent": runs["spent"],
                **{k.replace("-", "_") + "_s": runs[k] for k in verl},
            }
            rows.append(row)
            kv = statistics.median(runs["kvfabric"])
            gl = statistics.median(runs["gloo"]) if runs["gloo"] else float("nan")
            print(
                "%-4s %d receiver(s): kvfabric %.2f s (%.2fx the bound %.2f s, %.2f GB/s), gloo %.2f s (%.1fx kvfabric)"
                % (proto, m, kv, kv / bound, bound, nbytes / kv / 1e9, gl, gl / kv),
                flush=True,
            )
            for kind in verl:
                t = statistics.median(runs[kind])
                print("     %s: %.2f s (%.2fx the bound, %.2fx kvfabric)" % (kind, t, t / bound, t / kv), flush=True)
            for who in ("sender", "last_receiver"):
                med = {k: statistics.median(x[who][k] for x in runs["spent"]) for k in runs["spent"][0][who]}
                print("    %s: %s" % (who, ", ".join("%s %.2f" % kv_ for kv_ in sorted(med.items()))), flush=True)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"rows": rows, "args": vars(a)}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
