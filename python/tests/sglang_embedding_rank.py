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

- {"op": "put", "hashes", "runs": [[[first page, pages]...] per hash],
  "nbytes": [bytes per hash], "multi": bool}: fills each hash's bytes into
  its runs of pool pages, then puts them as SGLang's controller does
  (_build_storage_transfer_buffers): one buffer per run of contiguous pages,
  the last cut to the embedding's bytes; batch_put_from_multi_buffers, or
  with multi false batch_put of one run -> {"results": [...]}
- {"op": "get", ...the same}: zeroes the runs, reads them back the same way
  (a reader's runs may split the bytes differently from the writer's), and
  checks each one reported as got -> {"results": [...], "wrong": n}
- {"op": "exists", "hashes"} -> {"results": [...]}
- "quit"
"""

import json
import os
import sys

import numpy as np

import cpu_torch
from json_process import qualified_name, serve

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "common"))
from hicache_pools import content as page_content  # noqa: E402  (tools/common)
from sglang_interface import load_embedding_store  # noqa: E402  (tools/common)


def content(h: str, nbytes: int) -> np.ndarray:
    """The bytes of embedding `h` (hicache_pools' page content, one rank)."""
    return np.frombuffer(page_content(h, 0, nbytes), dtype=np.uint8)


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

    def buffers(runs: list, nbytes: int) -> tuple[list[int], list[int]]:
        """SGLang's _build_storage_transfer_buffers: (ptrs, sizes), one per run."""
        ptrs, sizes = [], []
        for first, pages in runs:
            if nbytes <= 0:
                break
            n = min(pages * page, nbytes)
            ptrs.append(base + first * page)
            sizes.append(n)
            nbytes -= n
        return ptrs, sizes

    def spans(ptrs: list[int], sizes: list[int]):
        return [mem[p - base : p - base + n] for p, n in zip(ptrs, sizes)]

    def handle(cmd: dict) -> dict:
        hashes = cmd["hashes"]
        if cmd["op"] == "exists":
            return {"results": store.batch_is_exist(hashes)}
        ptrs, sizes = zip(*(buffers(r, n) for r, n in zip(cmd["runs"], cmd["nbytes"]))) if hashes else ((), ())
        if cmd["op"] == "put":
            for h, n, ps, ss in zip(hashes, cmd["nbytes"], ptrs, sizes):
                data, at = content(h, n), 0
                for view in spans(ps, ss):
                    view[:] = data[at : at + len(view)]
                    at += len(view)
            if cmd["multi"]:
                return {"results": store.batch_put_from_multi_buffers(hashes, list(ptrs), list(sizes))}
            return {"results": store.batch_put(hashes, [p[0] for p in ptrs], [s[0] for s in sizes])}
        for ps, ss in zip(ptrs, sizes):
            for view in spans(ps, ss):
                view[:] = 0
        if cmd["multi"]:
            results = store.batch_get_into_multi_buffers(hashes, list(ptrs), list(sizes))
        else:
            results = store.batch_get(hashes, [p[0] for p in ptrs], [s[0] for s in sizes])
        wrong = sum(
            bool(ok) and not np.array_equal(np.concatenate(spans(ps, ss)), content(h, n))
            for h, n, ps, ss, ok in zip(hashes, cmd["nbytes"], ptrs, sizes, results)
        )
        return {"results": results, "wrong": wrong}

    serve({"backend": qualified_name(store), "store": qualified_name(store.store)}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
