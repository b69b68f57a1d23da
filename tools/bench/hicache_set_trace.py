#!/usr/bin/env python3
"""Where batch_set_v1's time goes: the HiCache backend's set of --pages new
MLA pages timed beside the store's own PUT of the same pages under other
keys, back to back, --rounds times; prints the medians (ms) of the whole
set, its exists call, the PUT inside it, and the store's PUT.

    KVF_SGLANG_SRC=build/sglang-0.5.23 .venv/bin/python tools/bench/hicache_set_trace.py [--protocol tcp]

The figures of docs/results/hicache-bench-2026-11-27.md ("Traced on 2026-11-27") come from it.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "common"))
import hicache_bench  # noqa: E402
from ports import free_port  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--protocol", choices=["tcp", "shm"], default="tcp")
    ap.add_argument("--pages", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=12)
    a = ap.parse_args()
    a.model = "mla"
    pool = hicache_bench.SHAPES["mla"](2 * a.pages)
    pool.kv_buffer.fill(0)
    batch = pool.page_nbytes() * a.pages
    listen = f"127.0.0.1:{free_port()}"
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvfabric",
            "store-node",
            "--pool",
            str((2 * a.rounds + 2) * batch),
            "--protocol",
            a.protocol,
            "--listen",
            listen,
            "--members",
            listen,
            "--set",
            "KVF_LOG_LEVEL=warn",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        if not node.stdout.readline():
            raise SystemExit(f"the store node did not start (exit {node.poll()})")
        backend = hicache_bench.backend_for(a, pool, listen)
        store = backend.store
        timed = {"exists": [], "put in set": []}
        calls = {"exists": store.batch_exists, "put in set": store.batch_put}

        def timer(name):
            def call(*args, **kw):
                t0 = time.perf_counter()
                out = calls[name](*args, **kw)
                timed[name].append(time.perf_counter() - t0)
                return out

            return call

        store.batch_exists, store.batch_put = timer("exists"), timer("put in set")
        sets, puts = [], []
        src = list(range(a.pages))
        for r in range(a.rounds):
            hashes = [f"r{r}-{i}" for i in range(a.pages)]
            t0 = time.perf_counter()
            if not all(backend.batch_set_v1(hashes, pool.indices(src))):
                raise SystemExit(f"round {r}: a page was not stored")
            sets.append(time.perf_counter() - t0)
            keys = [k + "+" for k in backend.scheme.keys(hashes)]
            t0 = time.perf_counter()
            if calls["put in set"](keys, [pool.page_spans(s) for s in src]) != [0] * a.pages:
                raise SystemExit(f"round {r}: the store's put failed")
            puts.append(time.perf_counter() - t0)
        ms = lambda xs: round(statistics.median(xs) * 1e3, 2)  # noqa: E731
        print(
            json.dumps(
                {
                    "protocol": a.protocol,
                    "pages": a.pages,
                    "page_bytes": pool.page_nbytes(),
                    "rounds": a.rounds,
                    "median_ms": {
                        "set": ms(sets),
                        "its exists": ms(timed["exists"]),
                        "its put": ms(timed["put in set"]),
                        "store put": ms(puts),
                    },
                }
            )
        )
        backend.close()
    finally:
        node.terminate()
        node.wait(timeout=30)


if __name__ == "__main__":
    main()
