#!/usr/bin/env python3
"""Draws tools/bench/lab_bench.py's JSON: throughput vs block size and vs
rails, each with its ceiling (the emulated line rate, and the bare fabric).

  plot_lab.py build/lab-bench.json --out docs/img

Needs matplotlib (Debian: python3-matplotlib).
"""

import argparse
import json
import os
import sys

try:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plot_lab.py: matplotlib is missing: apt-get install python3-matplotlib (or pip install matplotlib)")


def label_bytes(b):
    return "%d KiB" % (b >> 10) if b < (1 << 20) else "%d MiB" % (b >> 20)


def finish(fig, ax, title, legend_loc, path):
    """Title, legend and grid, then the PNG at `path` (returned)."""
    ax.set_ylabel("MB/s")
    ax.set_title(title)
    ax.legend(fontsize=8, loc=legend_loc)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def by_block(doc, out):
    rows = doc["even"]
    counts = sorted({r["rails"] for r in rows})
    fig, ax = plt.subplots(figsize=(8, 5))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for i, n in enumerate(counts):
        for op, style in (("write", "-o"), ("read", "--s")):
            pts = sorted(
                (r["block_size"], r["engine_median"] / 1e6) for r in rows if r["rails"] == n and r["operation"] == op
            )
            if pts:
                ax.plot(
                    [p[0] for p in pts],
                    [p[1] for p in pts],
                    style,
                    color=colors[i % len(colors)],
                    label="%d rail%s %s" % (n, "s" if n > 1 else "", op),
                )
        line = next(r["line_rate"] for r in rows if r["rails"] == n) / 1e6
        ax.axhline(line, color=colors[i % len(colors)], linestyle=":", linewidth=1)
        ax.annotate(
            "line rate, %d rail%s" % (n, "s" if n > 1 else ""),
            (rows[0]["block_size"], line),
            textcoords="offset points",
            xytext=(2, 3),
            fontsize=8,
            color=colors[i % len(colors)],
        )
    blocks = sorted({r["block_size"] for r in rows})
    ax.set_xscale("log", base=2)
    ax.set_xticks(blocks)
    ax.set_xticklabels([label_bytes(b) for b in blocks])
    ax.set_xlabel("block size (bytes per request)")
    ax.set_ylim(0, max(r["line_rate"] for r in rows) / 1e6 * 1.15)
    return finish(
        fig,
        ax,
        "kvfabric over %s emulated rails (tcp, tbf-shaped veth)" % doc["args"]["rates"],
        "lower right",
        os.path.join(out, "lab-throughput-vs-block.png"),
    )


def by_rails(doc, out):
    rows = doc["even"]
    counts = sorted({r["rails"] for r in rows})
    blocks = sorted({r["block_size"] for r in rows})
    pick = [b for b in (65536, 1 << 20) if b in blocks] or blocks[-1:]
    fig, ax = plt.subplots(figsize=(7, 5))
    lines = [next(r["line_rate"] for r in rows if r["rails"] == n) / 1e6 for n in counts]
    ax.plot(counts, lines, "k:", label="line rate (sum of the rails' tbf rates)")
    bare = [next((r["bare_1mib"] for r in rows if r["rails"] == n and r["operation"] == "write"), None) for n in counts]
    if all(bare):
        ax.plot(counts, [b / 1e6 for b in bare], "k--", alpha=0.6, label="bare fabric, 1 MiB writes, every rail")
    for b in pick:
        for op, marker in (("write", "o"), ("read", "s")):
            ys = [
                next(
                    r["engine_median"]
                    for r in rows
                    if r["rails"] == n and r["block_size"] == b and r["operation"] == op
                )
                / 1e6
                for n in counts
            ]
            ax.plot(counts, ys, "-" + marker, label="kvfabric %s, %s blocks" % (op, label_bytes(b)))
    ax.set_xticks(counts)
    ax.set_xlabel("rails (each %s)" % doc["args"]["rates"])
    ax.set_ylim(0, max(lines) * 1.15)
    return finish(fig, ax, "Throughput vs rails", "upper left", os.path.join(out, "lab-throughput-vs-rails.png"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", help="lab_bench.py --json_out file")
    ap.add_argument("--out", default="docs/img")
    a = ap.parse_args()
    with open(a.json) as f:
        doc = json.load(f)
    os.makedirs(a.out, exist_ok=True)
    for p in (by_block(doc, a.out), by_rails(doc, a.out)):
        print("wrote " + p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
