#!/usr/bin/env python3
"""HiCache-shaped traffic: SGLang's zero-copy storage calls on KV pages of
real models' shapes, beside the store's own GET and the bare fabric READ of
the same pages, from the same run.

A host pool in this process (laid out as SGLang's page-first pools lay it
out) and the store's pool in another process (`kvfabric store-node`), on
this host over tcp or shm. The backend is kvfabric.integrations.sglang,
made by SGLang's own backend factory (its released sources, unpacked by
`make check`; --sglang_src). Each round, alternating the order:

  set         batch_set_v1 of --pages new pages (its exists check included)
  get         batch_get_v1 of those pages into other slots of the host pool
  store_get   kvfabric.Store.batch_get of the same keys into the same buffers
  bare_read   the engine's READ of the same bytes from where the pages lie
              (Store.batch_locate), with no lookup and no checksum
  store_put   kvfabric.Store.batch_put of the same pages under new keys
  bare_write  the engine's WRITE of the same bytes to where the pages lie

Shapes (--model):
  mla   DeepSeek-V3-like: 61 layers x 576 x fp8 (1 byte) per token,
        64 tokens a page: one 2.1 MiB buffer a page
  mha   Llama-3-8B-like: 32 layers x 8 KV heads x 128 x bf16 per token,
        64 tokens a page: a 4 MiB k and a 4 MiB v buffer a page

Prints one JSON line per model with the medians (GB/s), GET figures as a
ratio of the bare READ and PUT figures of the bare WRITE (the store puts by
WRITE); --json_out keeps every round.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "common"))
from hicache_pools import MHAPool, MLAPool, content  # noqa: E402
from ports import free_port  # noqa: E402
import sglang_interface  # noqa: E402

SHAPES = {
    "mla": lambda slots: MLAPool(tokens=slots * 64, page_size=64, layers=61, dim=576, dtype="uint8"),
    "mha": lambda slots: MHAPool(tokens=slots * 64, page_size=64, layers=32, heads=8, head_dim=128, dtype="uint16"),
}


def backend_for(a, pool, members):
    factory, config_cls, _ = sglang_interface.load()
    extra = {
        "backend_name": "kvfabric",
        "module_path": "kvfabric.integrations.sglang",
        "class_name": "HiCacheKvfabric",
        "interface_v1": 1,
        "protocol": a.protocol,
        "local_hostname": "127.0.0.1",
        "settings": {"KVF_STORE_MEMBERS": members, "KVF_LOG_LEVEL": "warn"},
    }
    config = config_cls(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=a.model == "mla",
        enable_storage_metrics=False,
        is_page_first_layout=True,
        model_name="bench/" + a.model,
        extra_config=extra,
    )
    backend = factory.create_backend("dynamic", config, pool)
    backend.register_mem_pool_host(pool)
    return backend


def run(a):
    import kvfabric  # noqa: F401  (the installed package the backend uses)

    pool = SHAPES[a.model](2 * a.pages)
    # SGLang allocates its host pool pinned, so every page is faulted in
    # before use. This one is np.zeros, untouched: without this, round 0's
    # first GET pays the faults of its destination pages and runs several
    # times slower than later rounds.
    pool.kv_buffer.fill(0)
    page = pool.page_nbytes()
    batch = page * a.pages
    listen = f"127.0.0.1:{free_port()}"
    # Room for every round's pages: a removed or read page's slot stays out of
    # use for the read window (15 s), longer than a run of rounds.
    node_pool = (2 * a.rounds + 2) * batch + (64 << 20)
    node = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "kvfabric",
            "store-node",
            "--pool",
            str(node_pool),
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
        line = node.stdout.readline()
        if not line:
            raise SystemExit(f"the store node did not start (exit {node.poll()})")
        backend = backend_for(a, pool, listen)
        store, engine = backend.store, backend.engine
        src, dst = list(range(a.pages)), list(range(a.pages, 2 * a.pages))
        rounds, wrong = [], 0
        for r in range(a.rounds):
            hashes = [f"r{r}-{i}" for i in range(a.pages)]
            for h, s in zip(hashes, src):
                pool.fill(s, content(h, 0, page))
            keys = backend.scheme.keys(hashes)
            dst_idx = pool.indices(dst)
            pages = [pool.page_spans(s) for s in dst]
            t = {}
            t0 = time.perf_counter()
            ok = backend.batch_set_v1(hashes, pool.indices(src))
            t["set"] = time.perf_counter() - t0
            if not all(ok):
                raise SystemExit(f"round {r}: {ok.count(False)} pages not stored: {backend.stats()}")
            codes, where = store.batch_locate(keys)
            if any(codes):
                raise SystemExit(f"round {r}: locate failed: {codes}")
            reads, writes = [], []
            for (seg, addr, length, _), spans, s in zip(where, pages, src):
                for (p, n), (q, _) in zip(spans, pool.page_spans(s)):
                    reads.append((p, addr, n))
                    writes.append((q, addr, n))  # the same bytes again, from the set's source pages
                    addr += n
            segment = where[0][0]

            def get():
                got = backend.batch_get_v1(hashes, dst_idx)
                if not all(got):
                    raise SystemExit(f"round {r}: get missed {got.count(False)} pages")

            def store_get():
                got = store.batch_get(keys, pages)
                if got != [page] * a.pages:
                    raise SystemExit(f"round {r}: store get: {got}")

            def bare_read():
                engine.read_many(segment, reads)

            def bare_write():
                engine.write_many(segment, writes)

            def store_put():
                keys2 = [k + "+" for k in keys]  # new keys: a put of the same pages with no exists call
                got = store.batch_put(keys2, [pool.page_spans(s) for s in src])
                if got != [0] * a.pages:
                    raise SystemExit(f"round {r}: store put: {got}")

            ops = [
                ("get", get),
                ("store_get", store_get),
                ("bare_read", bare_read),
                ("store_put", store_put),
                ("bare_write", bare_write),
            ]
            if r % 2:
                ops.reverse()
            for name, fn in ops:
                t0 = time.perf_counter()
                fn()
                t[name] = time.perf_counter() - t0
            if r == 0:
                backend.batch_get_v1(hashes, dst_idx)
                wrong = sum(pool.page_bytes(d) != content(h, 0, page) for h, d in zip(hashes, dst))
            rounds.append({k: batch / v / 1e9 for k, v in t.items()})
        med = {k: statistics.median(x[k] for x in rounds) for k in rounds[0]}
        summary = {
            "model": a.model,
            "protocol": a.protocol,
            "page_bytes": page,
            "buffers_per_page": len(pool.page_spans(0)),
            "pages_per_batch": a.pages,
            "rounds": a.rounds,
            "wrong_pages": wrong,
            "gbps": {k: round(v, 3) for k, v in med.items()},
            "get_of_bare_read": {k: round(med[k] / med["bare_read"], 3) for k in ("get", "store_get")},
            "set_of_bare_write": {k: round(med[k] / med["bare_write"], 3) for k in ("set", "store_put")},
        }
        print(json.dumps(summary), flush=True)
        backend.close()
        return summary, rounds
    finally:
        node.terminate()
        node.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", choices=["mla", "mha", "both"], default="both")
    ap.add_argument("--protocol", choices=["tcp", "shm"], default="tcp")
    ap.add_argument("--pages", type=int, default=32, help="pages per batch (SGLang sends up to 128)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--sglang_src",
        default=os.environ.get("KVF_SGLANG_SRC", "build/sglang-0.5.23"),
        help="SGLang's unpacked sources (make check unpacks them)",
    )
    ap.add_argument("--json_out")
    a = ap.parse_args()
    os.environ["KVF_SGLANG_SRC"] = os.path.abspath(a.sglang_src)
    out = []
    for model in ["mla", "mha"] if a.model == "both" else [a.model]:
        a.model = model
        summary, rounds = run(a)
        out.append({**summary, "every_round": rounds})
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(out, f, indent=1)


if __name__ == "__main__":
    main()
