"""One LMCache worker of the LMCache test, in its own process, run with
LMCache's own interpreter: LMCache's storage backends as its cache engine
makes them on a host without a GPU (``CreateStorageBackends``: a
LocalCPUBackend and a RemoteBackend whose ``remote_url`` is
``mooncakestore://``, over kvfabric's ``mooncake.store`` through the shim).

    python lmcache_rank.py SPEC_JSON

SPEC: {"protocol": "tcp"|"shm", "extra": {extra_config keys over Mooncake's
setup keys}, "config": {LMCacheEngineConfig fields}}. The store's members come
from KVF_STORE_MEMBERS. Prints {"ready": true, "connector", "store": their
classes, "save_chunk_meta", "header": the bytes of metadata stored before each
chunk (0 without)}, then answers one JSON line per command line:

- {"op": "put", "chunks": [[seed, tokens], ...]}: each chunk filled with the
  bytes its seed makes, stored with batched_submit_put_task (as the cache
  engine stores a request's chunks), waited for -> {"completed", "failed"}
- {"op": "lookup", "chunks": [[seed, tokens], ...]}: RemoteBackend.contains
  per key, batched_contains and batched_async_contains of the keys in order
  -> {"contains", "prefix", "async_prefix"}
- {"op": "get", "chunks": [...], "absent": [seed, ...]}: one
  batched_get_blocking of the chunks with the absent keys in the middle; each
  chunk that comes back compared with its seed's bytes (bytes, shape, dtype,
  format) -> {"found", "exact", "mismatched", "missing", "absent_found",
  "absent_keys": the absent keys as LMCache's warnings name them}
- "quit"

Every reply also has "calls": the mooncake.store calls LMCache made since the
last reply, and "refused": the codes of puts the store answered with other
than 0 (LMCache does not look at them).
"""

import asyncio
import json
import sys
import threading
import time
from collections import Counter

import torch

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends

from json_process import qualified_name, serve

MODEL = "test/model"
CHUNK = 256
LAYERS, HEADS, HEAD_SIZE = 4, 2, 64
DTYPE = torch.bfloat16
HIDDEN = HEADS * HEAD_SIZE
STORE_CALLS = (
    "put_parts",
    "put",
    "put_from",
    "batch_put_from",
    "put_batch",
    "batch_get_buffer",
    "get_buffer",
    "batch_get_into",
    "get_into",
    "get",
    "is_exist",
    "batch_is_exist",
    "register_buffer",
    "unregister_buffer",
)


def config(spec: dict) -> LMCacheEngineConfig:
    """LMCache's defaults, a remote URL, and Mooncake's setup keys as LMCache's docs write them."""
    extra = {
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "protocol": spec["protocol"],
        "device_name": "",
        "global_segment_size": 0,
        "local_buffer_size": "64MB",
        "master_server_address": "127.0.0.1:50051",
        # LMCache gives each put this many seconds before it logs a
        # timeout and moves on (1 by default): a loaded test host needs more.
        "transfer_timeout": 5,
    }
    extra.update(spec.get("extra", {}))
    return LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK,
        local_cpu=False,
        max_local_cpu_size=0.05,
        remote_url="mooncakestore://127.0.0.1:50051/",
        extra_config=extra,
        **spec.get("config", {}),
    )


def shape(tokens: int) -> torch.Size:
    """A chunk as LMCache holds it (KV_2LTD: k and v, layers, tokens, heads x head size); a full
    one is 512 KiB of bfloat16."""
    return torch.Size((2, LAYERS, tokens, HIDDEN))


def content(seed: int, tokens: int) -> torch.Tensor:
    """A chunk's bytes, every bit pattern possible (NaNs too: compared as bytes)."""
    n = shape(tokens).numel() * DTYPE.itemsize
    raw = torch.randint(0, 256, (n,), dtype=torch.uint8, generator=torch.Generator().manual_seed(1000 + seed))
    return raw.view(DTYPE).reshape(shape(tokens))


def key(seed: int) -> CacheEngineKey:
    return CacheEngineKey(MODEL, 1, 0, 0x5EED0000 + seed, DTYPE)


def same(obj, seed: int, tokens: int) -> bool:
    t = obj.tensor
    return (
        t.dtype == DTYPE
        and t.shape == shape(tokens)
        and obj.get_memory_format() == MemoryFormat.KV_2LTD
        and torch.equal(t.contiguous().view(torch.int16), content(seed, tokens).view(torch.int16))
    )


class Watched:
    """Counts the mooncake.store calls made on one store object, and the put codes other
    than 0: LMCache ignores what put_parts and batch_put_from answer."""

    def __init__(self, store) -> None:
        self.calls: Counter = Counter()
        self.refused: list = []
        self.inside = threading.local()  # a call the store makes on itself is not LMCache's
        for name in STORE_CALLS:
            if hasattr(store, name):
                setattr(store, name, self._wrap(name, getattr(store, name)))

    def _wrap(self, name, call):
        def watched(*args, **kwargs):
            if getattr(self.inside, "busy", False):
                return call(*args, **kwargs)
            self.inside.busy = True
            try:
                got = call(*args, **kwargs)
            finally:
                self.inside.busy = False
            self.calls[name] += 1
            if name.startswith("put") or name == "batch_put_from":
                self.refused += [c for c in (got if isinstance(got, list) else [got]) if c != 0]
            return got

        return watched

    def take(self) -> dict:
        out = {"calls": dict(self.calls), "refused": self.refused}
        self.calls, self.refused = Counter(), []
        return out


def main() -> None:
    spec = json.loads(sys.argv[1])
    metadata = LMCacheMetadata(
        model_name=MODEL,
        world_size=1,
        local_world_size=1,
        worker_id=0,
        local_worker_id=0,
        kv_dtype=DTYPE,
        kv_shape=(LAYERS, 2, CHUNK, HEADS, HEAD_SIZE),
        chunk_size=CHUNK,
    )
    # The cache engine runs its storage backends' coroutines on a loop in a thread of its own.
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    backends = CreateStorageBackends(config(spec), metadata, loop)
    remote = backends["RemoteBackend"]
    local = backends["LocalCPUBackend"]
    connector = getattr(remote.connection, "_connector", remote.connection)  # inside LMCache's instrumentation
    watched = Watched(connector.store)

    def put(chunks: list) -> dict:
        objs = []
        for seed, tokens in chunks:
            obj = local.allocate(shape(tokens), DTYPE, MemoryFormat.KV_2LTD)
            obj.tensor.copy_(content(seed, tokens))
            objs.append(obj)
        done = threading.Semaphore(0)
        remote.batched_submit_put_task([key(s) for s, _ in chunks], objs, on_complete_callback=lambda k: done.release())
        deadline = time.monotonic() + 30
        completed = sum(1 for _ in chunks if done.acquire(timeout=max(0.0, deadline - time.monotonic())))
        for obj in objs:
            obj.ref_count_down()
        return {"completed": completed, "failed": remote.put_failed_count}

    def lookup(chunks: list) -> dict:
        keys = [key(s) for s, _ in chunks]
        prefix = asyncio.run_coroutine_threadsafe(remote.batched_async_contains("lookup", keys), loop).result(30)
        return {
            "contains": sum(remote.contains(k) for k in keys),
            "prefix": remote.batched_contains(keys),
            "async_prefix": prefix,
        }

    def get(chunks: list, absent: list) -> dict:
        half = len(chunks) // 2
        asked = chunks[:half] + [(s, None) for s in absent] + chunks[half:]
        got = remote.batched_get_blocking([key(s) for s, _ in asked])
        out = {
            "found": 0,
            "exact": 0,
            "mismatched": 0,
            "missing": 0,
            "absent_found": 0,
            "absent_keys": [k for s in absent for k in (key(s).to_string(), f"chunk_hash={key(s).chunk_hash},")],
        }
        for (seed, tokens), obj in zip(asked, got):
            if tokens is None:
                out["absent_found"] += obj is not None
            elif obj is None:
                out["missing"] += 1
            else:
                out["found"] += 1
                out["exact" if same(obj, seed, tokens) else "mismatched"] += 1
            if obj is not None:
                obj.ref_count_down()
        return out

    def handle(cmd: dict) -> dict:
        if cmd["op"] == "put":
            out = put(cmd["chunks"])
        elif cmd["op"] == "lookup":
            out = lookup(cmd["chunks"])
        else:
            out = get(cmd["chunks"], cmd.get("absent", []))
        return {**out, **watched.take()}

    serve(
        {
            "connector": qualified_name(connector),
            "store": qualified_name(connector.store),
            "save_chunk_meta": connector.save_chunk_meta,
            "header": connector.remote_metadata_bytes if connector.save_chunk_meta else 0,
        },
        handle,
    )
    remote.close()
    loop.call_soon_threadsafe(loop.stop)


if __name__ == "__main__":
    main()
