"""One SGLang rank's HiCache storage, as SGLang makes it, in its own process.

    python hicache_rank.py SPEC_JSON

SPEC: {"kind": "mha"|"mla", "layout", "pool": {pool args}, "config": {HiCacheStorageConfig fields},
"extra": {extra config}, "backend": "kvfabric" (default) | "mooncake", "register": "v1" (default) |
"v2", "tensor_like": bool}. The backend is made by SGLang's StorageBackendFactory and given the host
pool with register_mem_pool_host, as SGLang's cache controller does (or, "register": "v2", with
register_mem_host_pool_v2 alone; "tensor_like": its buffer offers only data_ptr, numel and
element_size): kvfabric's through "dynamic"; with "mooncake", SGLang's own Mooncake
backend, unchanged, over kvfabric's mooncake.store (its extra config is Mooncake's, and
"env" sets this process's environment first, as a user's shell would). Prints
{"ready": true, "backend": its class, "store": its store's class (Mooncake's backend)}, then
answers one JSON line per command line:

- {"op": "set", "hashes": [...], "slots": [...]}: fills the slots with this rank's content of
  each page, then batch_set_v1 -> {"results": [...]}
- {"op": "get", "hashes": [...], "slots": [...], "rank": R}: zeroes the slots, batch_get_v1,
  and checks each page that came back against rank R's content -> {"results", "wrong"}
- {"op": "exists", "hashes": [...]} -> {"prefix": n}
- "quit"
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "common"))
from hicache_pools import HandedOver, content, make_pool  # noqa: E402  (tools/common)
from sglang_interface import load, load_mooncake  # noqa: E402  (tools/common)

from json_process import qualified_name, serve  # noqa: E402


def make_backend(spec: dict):
    """(backend, pool) as SGLang makes them."""
    mooncake = spec.get("backend", "kvfabric") == "mooncake"
    os.environ.update({k: str(v) for k, v in spec.get("env", {}).items()})
    factory, config_cls, _ = load_mooncake() if mooncake else load()
    pool = make_pool(spec["kind"], spec.get("layout", "page_first"), **spec.get("pool", {}))
    fields = {
        "tp_rank": 0,
        "tp_size": 1,
        "pp_rank": 0,
        "pp_size": 1,
        "attn_cp_rank": 0,
        "attn_cp_size": 1,
        "is_mla_model": spec["kind"] == "mla",
        "enable_storage_metrics": False,
        "is_page_first_layout": spec.get("layout", "page_first") != "layer_first",
        "model_name": "test/model",
    }
    fields.update(spec.get("config", {}))
    extra = (
        {}
        if mooncake
        else {
            "backend_name": "kvfabric",
            "module_path": "kvfabric.integrations.sglang",
            "class_name": "HiCacheKvfabric",
            "interface_v1": 1,
        }
    )
    extra.update(spec.get("extra", {}))
    config = config_cls(extra_config=extra, **fields)
    given = HandedOver(pool) if spec.get("tensor_like") else pool
    backend = factory.create_backend("mooncake" if mooncake else "dynamic", config, given)
    if spec.get("register", "v1") == "v2":
        from sglang.srt.mem_cache.hicache_storage import PoolName

        backend.register_mem_host_pool_v2(given, PoolName.KV)
    else:
        backend.register_mem_pool_host(given)
    return backend, pool


def fill(pool, hashes, slots, rank) -> None:
    for h, s in zip(hashes, slots):
        pool.fill(s, content(h, rank, pool.page_nbytes()))


def check(pool, hashes, slots, results, rank) -> int:
    """How many pages reported as got differ from rank `rank`'s content."""
    return sum(
        1
        for h, s, ok in zip(hashes, slots, results)
        if ok and pool.page_bytes(s) != content(h, rank, pool.page_nbytes())
    )


def main() -> None:
    spec = json.loads(sys.argv[1])
    backend, pool = make_backend(spec)
    rank = spec.get("config", {}).get("tp_rank", 0)
    store = getattr(backend, "store", None)

    def handle(cmd: dict) -> dict:
        if cmd["op"] == "set":
            fill(pool, cmd["hashes"], cmd["slots"], rank)
            return {"results": backend.batch_set_v1(cmd["hashes"], pool.indices(cmd["slots"]))}
        if cmd["op"] == "get":
            for s in cmd["slots"]:
                pool.fill(s, bytes(pool.page_nbytes()))
            results = backend.batch_get_v1(cmd["hashes"], pool.indices(cmd["slots"]))
            return {"results": results, "wrong": check(pool, cmd["hashes"], cmd["slots"], results, cmd["rank"])}
        return {"prefix": backend.batch_exists(cmd["hashes"])}

    serve({"backend": qualified_name(backend), "store": qualified_name(store)}, handle)
    backend.close()


if __name__ == "__main__":
    main()
