#!/usr/bin/env python3
"""What counting costs: the engine with request counters off (KVF_METRICS=0)
against on with its endpoint served and scraped every second
(KVF_METRICS_LISTEN), alternating in the same run, beside the bare fabric.

Workloads per protocol: 1 MiB writes (32 x 2 threads: throughput), 4 KiB
writes (32 x 2 threads: the per-request cost at its largest share), and one
4 KiB write at a time (1 thread, batch 1: latency, the batch p50). Each
figure is the median of --reps alternated runs; the verdict is the ratio
on/off (throughput) and the difference on - off (latency).
"""

import argparse
import json
import os
import statistics
import sys
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
import compare  # noqa: E402
from compare import run_initiator, start_target, stop  # noqa: E402
from ports import free_port  # noqa: E402

WORKLOADS = [  # name, block, batch, threads
    ("1MiB x32 x2", 1 << 20, 32, 2),
    ("4KiB x32 x2", 4096, 32, 2),
    ("4KiB one at a time", 4096, 1, 1),
]


def scrape_while(address, stop_event, counts):
    while not stop_event.wait(1.0):
        try:
            with urllib.request.urlopen("http://%s/metrics" % address, timeout=2) as r:
                body = r.read().decode()
            counts["scrapes"] += 1
            counts["last"] = body
        except OSError:
            counts["failed"] += 1


def run(a, tool, proto, seg, block, batch, threads, metrics):
    sets = ["--set", "KVF_METRICS=%d" % int(metrics)]
    scraper, stop_event, counts = None, threading.Event(), {"scrapes": 0, "failed": 0, "last": ""}
    if metrics:
        address = "127.0.0.1:%d" % free_port("127.0.0.1")
        sets += ["--set", "KVF_METRICS_LISTEN=" + address]
        scraper = threading.Thread(target=scrape_while, args=(address, stop_event, counts))
        scraper.start()
    try:
        r = run_initiator(
            [
                tool,
                "--mode=initiator",
                "--protocol=" + proto,
                "--segment_id=" + seg,
                "--operation=write",
                "--block_size=%d" % block,
                "--batch_size=%d" % batch,
                "--threads=%d" % threads,
                "--duration=%g" % a.duration,
                "--json",
            ]
            + sets
        )
    finally:
        stop_event.set()
        if scraper:
            scraper.join()
    if metrics and (counts["scrapes"] == 0 or "kvfabric_requests_total" not in counts["last"]):
        raise RuntimeError("the endpoint was not scraped during the run: %s" % counts)
    return r, counts["scrapes"]


def bare(a, proto, block, depth):
    """The bare fabric's writes at the same queue depth (compare.py's run)."""
    return compare.bare(
        argparse.Namespace(
            build=a.build,
            buffer=256 << 20,
            queue_depth=depth,
            duration=a.duration,
            transmit_complete=False,
        ),
        proto,
        "write",
        block,
    )


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json_out")
    a = ap.parse_args()
    tool = os.path.join(a.build, "tools", "kvfabric-bench")
    results = []
    print(
        "write, %d alternated runs of %g s each, medians; 'on' serves the endpoint and is scraped every second"
        % (a.reps, a.duration)
    )
    print("%-5s %-20s %14s %14s %14s %8s" % ("proto", "workload", "bare", "metrics off", "metrics on", "on/off"))
    for proto in a.protocols.split(","):
        t, seg = start_target(
            [tool, "--mode=target", "--protocol=" + proto, "--buffer_size=%d" % (256 << 20)], r"--segment_id=(\S+)"
        )
        try:
            for name, block, batch, threads in WORKLOADS:
                latency = batch == 1
                off, on, scrapes = [], [], 0
                for rep in range(a.reps):
                    order = (False, True) if rep % 2 == 0 else (True, False)
                    for metrics in order:
                        r, n = run(a, tool, proto, seg, block, batch, threads, metrics)
                        v = r["batch_latency_us"]["p50"] if latency else r["bytes_per_s"] / 1e9
                        (on if metrics else off).append(v)
                        scrapes += n
                b = bare(a, proto, block, batch * threads)
                bare_v = b["duration_s"] / (b["bytes"] / block) * 1e6 if latency else b["bytes_per_s"] / 1e9
                m_off, m_on = statistics.median(off), statistics.median(on)
                row = {
                    "protocol": proto,
                    "workload": name,
                    "block": block,
                    "batch": batch,
                    "threads": threads,
                    "unit": "us (p50)" if latency else "GB/s",
                    "bare": bare_v,
                    "off": off,
                    "on": on,
                    "median_off": m_off,
                    "median_on": m_on,
                    "scrapes": scrapes,
                }
                if latency:
                    row["on_minus_off_us"] = m_on - m_off
                    verdict = "%+.1f us" % (m_on - m_off)
                    fmt = "%11.1f us"
                else:
                    row["on_over_off"] = m_on / m_off
                    verdict = "%.3f" % (m_on / m_off)
                    fmt = "%9.3f GB/s"
                results.append(row)
                print("%-5s %-20s %14s %14s %14s %8s" % (proto, name, fmt % bare_v, fmt % m_off, fmt % m_on, verdict))
                sys.stdout.flush()
        finally:
            stop(t)
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(
                {
                    "results": results,
                    "reps": a.reps,
                    "duration_s": a.duration,
                    "when": time.strftime("%Y-%m-%d %H:%M:%S"),
                },
                f,
                indent=1,
            )


if __name__ == "__main__":
    main()
