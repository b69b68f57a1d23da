"""One SGLang instance's multimodal embedding store (``--enable-mm-global-cache``
with the ``mooncake`` backend), as SGLang makes it, in its own process:
SGLang's ``EmbeddingStoreFactory.create_backend("mooncake")``, its
``MooncakeEmbeddingStore`` unchanged, over kvfabric's ``mooncake.store``
(tools/common/sglang_interface.py), torch stood in by cpu_torch.py.

    sglang_embedding_rank.py SPEC_JSON

SPEC: {"env": {...} (Mooncake's settings, as a user's shell sets them),
"page_bytes": n, "pages": n}. Like SGLang's EmbeddingCacheController, it
registers one pool tensor of pages with the store (register_buffer) and moves
embeddings between pool pages and the store. Prints {"ready": true, "store":
its store's class}, then answers one JSON line per command line:

- {"op": "put", "hashes", "pages": [[page...] per hash], "multi": bool}:
  fills each hash's pages with its content, then batch_put_from_multi_buffers
  (one buffer per page, as SGLang's controller does) or, with multi false,
  batch_put of each hash's first page -> {"results": [...]}
- {"op": "get", ...the same}: zeroes the pages, reads them back, and checks
  each one reported as got -> {"results": [...], "wrong": n}
- {"op": "exists", "hashes"} -> {"results": [...]}
- "quit"
"""

import json
import os
import sys
import zlib

import numpy as np

import cpu_torch
from json_process import qualified_name, serve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "common"))
from sglang_interface import load_embedding_store  # noqa: E402  (tools/common)


def content(h: str, nbytes: int) -> np.ndarray:
    return np.random.default_rng(zlib.crc32(h.encode())).integers(0, 256, nbytes, dtype=np.uint8)


def main() -> int:
    spec = json.loads(sys.argv[1])
    os.environ.update({k: str(v) for k, v in spec["env"].items()})
    sys.modules.setdefault("torch", cpu_torch.module())
    store = load_embedding_store().create_backend("mooncake")
    page = spec["page_bytes"]
    pool = cpu_torch.empty(spec["pages"] * page, dtype=cpu_torch.uint8)
    store.register_buffer(pool)
    mem = pool.numpy()
    base = pool.data_ptr()

    def handle(cmd: dict) -> dict:
        hashes = cmd["hashes"]
        if cmd["op"] == "exists":
            return {"results": store.batch_is_exist(hashes)}
        pages = cmd["pages"] if cmd["multi"] else [p[:1] for p in cmd["pages"]]
        ptrs = [[base + p * page for p in ps] for ps in pages]
        sizes = [[page] * len(ps) for ps in pages]
        if cmd["op"] == "put":
            for h, ps in zip(hashes, pages):
                data = content(h, page * len(ps))
                for k, p in enumerate(ps):
                    mem[p * page:(p + 1) * page] = data[k * page:(k + 1) * page]
            return {"results": store.batch_put_from_multi_buffers(hashes, ptrs, sizes) if cmd["multi"] else
                    store.batch_put(hashes, [p[0] for p in ptrs], [s[0] for s in sizes])}
        for ps in pages:
            for p in ps:
                mem[p * page:(p + 1) * page] = 0
        results = (store.batch_get_into_multi_buffers(hashes, ptrs, sizes) if cmd["multi"] else
                   store.batch_get(hashes, [p[0] for p in ptrs], [s[0] for s in sizes]))
        wrong = 0
        for h, ps, ok in zip(hashes, pages, results):
            got = np.concatenate([mem[p * page:(p + 1) * page] for p in ps])
            wrong += bool(ok) and not np.array_equal(got, content(h, page * len(ps)))
        return {"results": results, "wrong": wrong}

    serve({"backend": qualified_name(store), "store": qualified_name(store.store)}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
