"""One LMCache process of the LMCache test: LMCache's own storage backends
(its ``CreateStorageBackends``, as its cache engine makes them) with a
``mooncakestore://`` remote URL, over kvfabric's ``mooncake.store``. Role
``put`` stores chunks through the remote backend; role ``get`` (another
process) loads them back and compares every byte with the chunks it makes
again from the same seeds. Runs with LMCache's own interpreter.

    python lmcache_rank.py put|get PROTOCOL SAVE_CHUNK_META(default|false) CHUNKS

The store's members come from KVF_STORE_MEMBERS. Prints one JSON line.
"""

import asyncio
import json
import sys
import threading

import torch

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.memory_management import MemoryFormat
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend import CreateStorageBackends

CHUNK = 256
KV_SHAPE = (4, 2, CHUNK, 2, 64)  # the model's: layers, k and v, tokens, heads, head size
SHAPE = (2, 4, CHUNK, 2 * 64)  # a chunk as LMCache holds it (KV_2LTD): 512 KiB of bfloat16


def config(protocol: str, save_chunk_meta: str) -> LMCacheEngineConfig:
    """LMCache's defaults, a remote URL, and Mooncake's setup keys as LMCache's docs write them."""
    extra = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE", "protocol": protocol,
             "device_name": "", "global_segment_size": 0, "local_buffer_size": "64MB",
             "master_server_address": "127.0.0.1:50051", "transfer_timeout": 5}
    if save_chunk_meta != "default":
        extra["save_chunk_meta"] = save_chunk_meta == "true"
    return LMCacheEngineConfig.from_defaults(chunk_size=CHUNK, local_cpu=False, max_local_cpu_size=0.05,
                                             remote_url="mooncakestore://127.0.0.1:50051/", extra_config=extra)


def chunk(i: int) -> torch.Tensor:
    return torch.randn(SHAPE, generator=torch.Generator().manual_seed(1000 + i)).to(torch.bfloat16)


def key(i: int) -> CacheEngineKey:
    return CacheEngineKey("test/model", 1, 0, 0x5EED0000 + i, torch.bfloat16)


def main() -> None:
    role, protocol, save_chunk_meta, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    metadata = LMCacheMetadata(model_name="test/model", world_size=1, local_world_size=1, worker_id=0,
                               local_worker_id=0, kv_dtype=torch.bfloat16, kv_shape=KV_SHAPE, chunk_size=CHUNK)
    loop = asyncio.new_event_loop()
    threading.Thread(target=loop.run_forever, daemon=True).start()
    backends = CreateStorageBackends(config(protocol, save_chunk_meta), metadata, loop, dst_device="cpu")
    remote = next(b for name, b in backends.items() if "Remote" in type(b).__name__)
    local = next(b for b in backends.values() if type(b).__name__ == "LocalCPUBackend")
    keys = [key(i) for i in range(count)]
    out = {"role": role, "connector": type(remote.connection).__name__}
    if role == "put":
        objs = []
        for i in range(count):
            obj = local.allocate(torch.Size(SHAPE), torch.bfloat16, MemoryFormat.KV_2LTD)
            obj.tensor.copy_(chunk(i))
            objs.append(obj)
        done = []
        finished = threading.Event()

        def completed(k) -> None:
            done.append(k)
            if len(done) == count:
                finished.set()

        remote.batched_submit_put_task(keys, objs, on_complete_callback=completed)
        out.update(completed=len(done) if not finished.wait(30) else count, failed=remote.put_failed_count)
        for obj in objs:
            obj.ref_count_down()
    else:
        out["contains"] = sum(remote.contains(k) for k in keys)
        got = remote.batched_get_blocking(keys + [key(count + 7)])
        out["absent_is_none"] = got[-1] is None
        found = [g for g in got[:-1] if g is not None]
        out["found"] = len(found)
        out["exact"] = sum(1 for i, g in enumerate(got[:-1])
                           if g is not None and g.tensor.dtype == torch.bfloat16
                           and tuple(g.tensor.shape) == SHAPE and torch.equal(g.tensor, chunk(i)))
        for g in found:
            g.ref_count_down()
    remote.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
