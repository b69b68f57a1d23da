"""One vLLM encoder instance's encoder-cache store, in its own process: vLLM's
MooncakeEmbeddingStoreBackend over its MooncakeEmbeddingStoreClient, as
vLLM's ECMooncakeConnector worker makes them (``cross_encoder_cache``),
unchanged, on kvfabric's ``mooncake.store`` (vllm_interface.py).

    vllm_encoder_rank.py SPEC_JSON

SPEC: {"read_buffer_bytes": n, "max_pending_items": n, "max_pending_bytes": n}.
The store's settings come from MOONCAKE_CONFIG_PATH and the environment, as
in vLLM. Prints {"ready": true, ...}, then answers one JSON command per line:

    {"op": "step", "items": [{"id", "shape", "dtype", "seed"}]}
        an encoder step: resolve_inputs (hits are loaded from the store and
        checked byte for byte against their seed's pattern), then each miss is
        "encoded" (the pattern) and handed to save_output, which publishes
        it in the background -> {"loaded": [...], "wrong": n, "error": ...}
    {"op": "flush"}   reap until no put is pending -> {"pending": n, "error": ...}
    {"op": "exists", "ids": [...]} -> {"exists": [bool...]}
    quit              shutdown() (drains the publisher, closes the store)
"""

import json
import os
import sys
import time
import traceback
from types import SimpleNamespace

import numpy as np

import cpu_torch
from json_process import qualified_name, serve
from vllm_interface import load_encoder_store

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "common"))
from hicache_pools import content as page_content  # noqa: E402  (tools/common)


def pattern(item: dict) -> np.ndarray:
    """The encoder output of `item`: its seed's bytes, in its shape and dtype."""
    dt = getattr(cpu_torch, item["dtype"])
    nbytes = int(np.prod(item["shape"])) * dt.itemsize
    raw = np.frombuffer(page_content(f"seed-{item['seed']}", 0, nbytes), dtype=np.uint8)
    return raw.view(dt.np).reshape(item["shape"])


def main() -> int:
    spec = json.loads(sys.argv[1])
    store_client, backend_mod, data = load_encoder_store()
    config = SimpleNamespace(  # what build_embedding_namespace reads of vLLM's config
        model_config=SimpleNamespace(multimodal_config=None, model="kvfabric/test-vlm", revision=None, dtype="float16"),
        ec_transfer_config=SimpleNamespace(ec_connector_extra_config={"cross_encoder_cache": True}),
    )
    namespace = data.build_embedding_namespace(config)
    client = store_client.create_mooncake_embedding_store_client(read_buffer_bytes=spec["read_buffer_bytes"])
    backend = backend_mod.MooncakeEmbeddingStoreBackend(
        client, namespace, max_pending_items=spec["max_pending_items"], max_pending_bytes=spec["max_pending_bytes"]
    )

    def handle(cmd: dict) -> dict:
        out = {"error": None}
        try:
            if cmd["op"] == "step":
                items = {i["id"]: i for i in cmd["items"]}
                expected = {}
                for ident, i in items.items():
                    dt = getattr(cpu_torch, i["dtype"])
                    expected[ident] = data.TensorSpec(
                        shape=tuple(i["shape"]), dtype=str(dt), nbytes=int(np.prod(i["shape"])) * dt.itemsize
                    )
                encoder_cache = {}
                loaded = backend.resolve_inputs(expected, encoder_cache, "cpu")
                out["loaded"] = sorted(loaded)
                out["wrong"] = sum(
                    1 for ident in loaded if encoder_cache[ident].numpy().tobytes() != pattern(items[ident]).tobytes()
                )
                for ident in items:
                    if ident not in loaded:  # the encoder computes it, and the store publishes it
                        out_tensor = cpu_torch.empty(
                            tuple(items[ident]["shape"]), dtype=getattr(cpu_torch, items[ident]["dtype"])
                        )
                        out_tensor.numpy()[...] = pattern(items[ident])
                        backend.save_output(ident, out_tensor)
            elif cmd["op"] == "flush":
                deadline = time.monotonic() + 20
                while True:
                    backend.reap()
                    if not backend._pending or time.monotonic() > deadline:
                        break
                    time.sleep(0.005)
                out["pending"] = len(backend._pending)
            elif cmd["op"] == "exists":
                out["exists"] = client.batch_exists([data.make_embedding_key(namespace, i) for i in cmd["ids"]])
        except Exception as e:  # noqa: BLE001 - reported to the test, which decides
            out["error"] = f"{type(e).__name__}: {e}"
            out["trace"] = traceback.format_exc()
        return out

    serve({"namespace": namespace, "store": qualified_name(client.store)}, handle)
    backend.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
