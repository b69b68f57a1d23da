#!/usr/bin/env python3
"""The store's speed over page sizes and client threads, each point beside
its ceiling from the same run, and a plot of it.

Starts --nodes kvfabric-store-bench serve processes, then for every op, page
size and thread count runs one kvfabric-store-bench drive: its store windows
alternate with windows of the bare engine READ of the same pages from the
same pools (--rounds of each, medians). Two places:

  --where local   the nodes and the client on this host (127.0.0.1; tcp or
                  shm): they share its cores, so the figures are the CPU's.
  --where lab     the emulated fabric of tests/lab/lab.sh (root): the nodes
                  in host B, the client in host A, --rails veth pairs shaped
                  to --rates each; the line rate (their sum) is the ceiling.

Writes every drive's JSON to --json_out and, with --plot_dir, one PNG per
op (GB/s against page size, a line per thread count, the bare READ dashed,
the line rate dotted in the lab); --plot_only JSON draws them from a sweep
written before (with an interpreter that has matplotlib: make store-sweep
uses PLOT_PY).
"""

import argparse
import json
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare import run_initiator, start_target, stop  # noqa: E402
from lab_bench import LAB, lab, rail_rates  # noqa: E402

PORT = 7600


def size(text):
    m = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not m:
        raise argparse.ArgumentTypeError("a size like 128K or 2M, not %r" % text)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2)]


def label(n):
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return "%d%s" % (n >> shift, unit)
    return str(n)


class Place:
    """Where the nodes and the client run, and the addresses they use."""

    def __init__(self, a):
        self.a = a
        self.lab = a.where == "lab"
        host = "10.77.0.2" if self.lab else "127.0.0.1"
        self.members = ",".join("%s:%d" % (host, PORT + i) for i in range(a.nodes))

    def node_cmd(self, i):
        cmd = [
            self.tool(),
            "serve",
            "--protocol",
            self.a.protocol,
            "--pool",
            str(self.a.pool),
            "--listen",
            self.members.split(",")[i],
            "--members",
            self.members,
        ]
        if self.lab:
            nics = ",".join("b%d" % r for r in range(self.a.rails))
            return [LAB, "exec", "B"] + cmd + ["--local_server_name", "10.77.0.2:0", "--nic_filter", nics]
        return cmd

    def drive_cmd(self, args):
        cmd = [self.tool(), "drive", "--protocol", self.a.protocol, "--members", self.members] + args
        if self.lab:
            nics = ",".join("a%d" % r for r in range(self.a.rails))
            return [LAB, "exec", "A"] + cmd + ["--local_server_name", "10.77.0.1:0", "--nic_filter", nics]
        return cmd

    def tool(self):
        return os.path.join(self.a.build, "tools", "kvfabric-store-bench")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--where", choices=["local", "lab"], default="local")
    ap.add_argument("--protocol", default="tcp", help="tcp or shm (local); tcp in the lab")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--pool", type=size, default=size("512M"), help="each node's pool")
    ap.add_argument("--ops", default="get,put")
    ap.add_argument("--pages", default="16K,64K,128K,512K,2M")
    ap.add_argument("--threads", default="1,2,4")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rails", type=int, default=4)
    ap.add_argument("--rates", default="2gbit")
    ap.add_argument("--mtu", default="9000")
    ap.add_argument("--json_out", default="build/store-sweep.json")
    ap.add_argument("--plot_dir", default="", help="write store-sweep-WHERE-OP.png here (needs matplotlib)")
    ap.add_argument("--plot_only", metavar="JSON", help="only plot a sweep written before (with --plot_dir)")
    a = ap.parse_args()
    if a.plot_only:
        with open(a.plot_only) as f:
            plot(json.load(f), a.plot_dir or "docs/img")
        return 0
    a.build = os.path.abspath(a.build)
    place = Place(a)
    pages = [size(p) for p in a.pages.split(",")]
    threads = [int(t) for t in a.threads.split(",")]
    doc = {
        "args": {k: v for k, v in vars(a).items()},
        "host": os.uname().nodename,
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "points": [],
    }
    if place.lab:
        doc["line_rate_gbps"] = sum(rail_rates(a.rates, a.rails)) / 1e9
    nodes = []
    try:
        if place.lab:
            lab("up", "--rails", str(a.rails), "--rates", a.rates, "--mtu", a.mtu)
        for i in range(a.nodes):
            nodes.append(start_target(place.node_cmd(i), r"^READY (\S+)")[0])
        for op in a.ops.split(","):
            for page in pages:
                # A working set the pools hold with room to spare: no eviction.
                working = max(a.batch, min(2048, int(0.5 * a.nodes * a.pool / page)))
                for t in threads:
                    r = run_initiator(
                        place.drive_cmd(
                            [
                                "--op",
                                op,
                                "--page",
                                str(page),
                                "--batch",
                                str(a.batch),
                                "--threads",
                                str(t),
                                "--working_set",
                                str(working),
                                "--duration",
                                str(a.duration),
                                "--rounds",
                                str(a.rounds),
                                "--json",
                            ]
                        )
                    )
                    r.update({"where": a.where, "page_bytes": page, "threads": t})
                    doc["points"].append(r)
                    line = doc.get("line_rate_gbps")
                    print(
                        "%-5s %-4s %5s x %d threads: store %6.3f GB/s, bare READ %6.3f GB/s, ratio %.3f%s"
                        % (
                            a.where,
                            op,
                            label(page),
                            t,
                            r["median_store_gbps"],
                            r["median_bare_read_gbps"],
                            r["ratio_to_bare_read"],
                            ""
                            if not line
                            else ", %.1f%% of line rate %.3f GB/s" % (100 * r["median_store_gbps"] / line, line),
                        )
                    )
                    sys.stdout.flush()
    finally:
        for n in nodes:
            stop(n)
        if place.lab:
            lab("down")
    os.makedirs(os.path.dirname(os.path.abspath(a.json_out)), exist_ok=True)
    with open(a.json_out, "w") as f:
        json.dump(doc, f, indent=1)
    print("wrote " + a.json_out)
    if a.plot_dir:
        plot(doc, a.plot_dir)
    return 0


def plot(doc, out_dir):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    os.makedirs(out_dir, exist_ok=True)
    where = doc["args"]["where"]
    for op in doc["args"]["ops"].split(","):
        pts = [p for p in doc["points"] if p["op"] == op]
        if not pts:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.2))
        for t in sorted({p["threads"] for p in pts}):
            row = sorted((p for p in pts if p["threads"] == t), key=lambda p: p["page_bytes"])
            x = [p["page_bytes"] for p in row]
            (line,) = ax.plot(x, [p["median_store_gbps"] for p in row], marker="o", label="store %s, %d thr" % (op, t))
            ax.plot(
                x,
                [p["median_bare_read_gbps"] for p in row],
                linestyle="--",
                color=line.get_color(),
                label="bare READ, %d thr" % t,
            )
        if doc.get("line_rate_gbps"):
            ax.axhline(doc["line_rate_gbps"], linestyle=":", color="black", label="line rate")
        ax.set_xscale("log", base=2)
        xs = sorted({p["page_bytes"] for p in pts})
        ax.set_xticks(xs)
        ax.set_xticklabels([label(x) for x in xs])
        ax.set_xlabel("page size (batch of %d)" % doc["args"]["batch"])
        ax.set_ylabel("GB/s (medians of %d windows)" % doc["args"]["rounds"])
        ax.set_ylim(bottom=0)
        ax.set_title("kvfabric store %s, %s (%s), %s" % (op.upper(), where, doc["args"]["protocol"], doc["started"]))
        ax.legend(fontsize=7, ncol=2)
        ax.grid(alpha=0.3)
        path = os.path.join(out_dir, "store-sweep-%s-%s.png" % (where, op))
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        print("wrote " + path)


if __name__ == "__main__":
    sys.exit(main())
