"""vLLM's encoder-cache store (``ECMooncakeConnector`` with
``cross_encoder_cache``), as vLLM 0.33.0 released it, unchanged, over
kvfabric's ``mooncake.store``: what a vLLM user who turns on the shared
encoder cache gets by installing kvfabric's shim instead of Mooncake.

vLLM's own store client and backend (loaded from its wheel, unpacked by
`make test`; torch stood in by CPU tensors over numpy: vllm_interface.py)
run in encoder processes (vllm_encoder_rank.py) against store nodes in
theirs, set up from a MOONCAKE_CONFIG_PATH file as vLLM reads it. One
encoder publishes its outputs; another finds them with batch_is_exist,
reads them with batch_get_into into its registered read buffer, and checks
vLLM's own header and every byte. vLLM treats a result it does not know as
unsafe I/O and stops the worker: each failure here must come back as one of
the results it accepts.
"""

import json
import os
import time

import pytest

from json_process import JsonProcess
from vllm_interface import source_dir

pytestmark = pytest.mark.skipif(
    source_dir() is None,
    reason="vLLM's encoder-cache store sources are not unpacked (make check / make test do it; or set KVF_VLLM_SRC)",
)


class Encoder(JsonProcess):
    """An encoder instance's store, in its own process (vllm_encoder_rank.py)."""

    def __init__(self, nodes, tmp_path, read_buffer_bytes=8 << 20):
        config = tmp_path / "mooncake.json"
        if not config.exists():  # vLLM's format; members come from the environment (docs/vllm.md)
            config.write_text(
                json.dumps(
                    {
                        "metadata_server": "P2PHANDSHAKE",
                        "master_server_address": "127.0.0.1:50051",
                        "protocol": nodes.protocol,
                        "device_name": "",
                        "mode": "standalone-store",
                        "global_segment_size": 0,
                        "local_buffer_size": "16mb",
                    }
                )
            )
        env = dict(
            os.environ,
            MOONCAKE_CONFIG_PATH=str(config),
            KVF_STORE_MEMBERS=nodes.members,
            KVF_LOG_LEVEL="error",
            KVF_STORE_DEADLINE_MS="2000",
            KVF_STORE_DOWN_RETRY_MS="300",
        )
        spec = {"read_buffer_bytes": read_buffer_bytes, "max_pending_items": 32, "max_pending_bytes": 1 << 30}
        super().__init__("vllm_encoder_rank.py", spec, env=env, what="encoder")

    def __call__(self, **cmd) -> dict:
        out = super().__call__(**cmd)
        assert out["error"] is None, out.get("trace") or out["error"]
        return out


def items(names, shape=(16, 256), dtype="float16", seed=0):
    return [{"id": n, "shape": list(shape), "dtype": dtype, "seed": seed + i} for i, n in enumerate(names)]


def test_vllms_encoder_store_publishes_and_another_encoder_reads_byte_exact(nodes, tmp_path):
    a, b = Encoder(nodes, tmp_path), Encoder(nodes, tmp_path)
    try:
        assert a.info["store"] == "kvfabric.compat.mooncake_store.MooncakeDistributedStore"
        first = (
            items(["img-0", "img-1"])
            + items(["img-2"], shape=(7, 1152), dtype="bfloat16", seed=10)
            + items(["img-3"], shape=(300, 64), dtype="float32", seed=20)
        )
        ids = [i["id"] for i in first]
        assert a(op="step", items=first)["loaded"] == [], "an empty store: every output is encoded"
        assert a(op="flush")["pending"] == 0, "the publisher put them all"
        assert b(op="exists", ids=ids + ["never"])["exists"] == [True] * 4 + [False]
        got = b(op="step", items=first)
        assert got["loaded"] == sorted(ids) and got["wrong"] == 0
        # B meets a new image: it encodes and publishes it, and A then reads it.
        more = items(["img-4"], seed=30)
        assert b(op="step", items=first + more)["loaded"] == sorted(ids), "img-4 is new"
        assert b(op="flush")["pending"] == 0
        got = a(op="step", items=more)
        assert got["loaded"] == ["img-4"] and got["wrong"] == 0
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("nodes", ["tcp"], indirect=True)  # vLLM's checks, not the fabric: one is enough
def test_an_output_of_another_shape_or_larger_than_the_read_buffer_is_encoded_again(nodes, tmp_path):
    a, b = Encoder(nodes, tmp_path), Encoder(nodes, tmp_path, read_buffer_bytes=64 << 10)
    try:
        stored = items(["img-a"], shape=(16, 256)) + items(["img-big"], shape=(128, 512), seed=5)
        a(op="step", items=stored)
        assert a(op="flush")["pending"] == 0
        # B's request expects another shape (and so another size): vLLM's own
        # header check, or the store's size check, turns it into a miss.
        got = b(op="step", items=items(["img-a"], shape=(8, 256)))
        assert got["loaded"] == [] and got["wrong"] == 0
        got = b(op="step", items=items(["img-a"], shape=(32, 256)))
        assert got["loaded"] == [] and got["wrong"] == 0
        # img-big (128 KiB) does not fit B's 64 KiB read buffer: vLLM skips it.
        got = b(op="step", items=items(["img-big"], shape=(128, 512), seed=5))
        assert got["loaded"] == [] and got["wrong"] == 0
        # The right shape still reads.
        got = b(op="step", items=items(["img-a"], shape=(16, 256)))
        assert got["loaded"] == ["img-a"] and got["wrong"] == 0
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("nodes", ["tcp"], indirect=True)
def test_a_dead_or_restarted_node_falls_back_to_the_encoder_and_never_stops_the_worker(nodes, tmp_path):
    a, b = Encoder(nodes, tmp_path), Encoder(nodes, tmp_path)
    try:
        outputs = items([f"img-{i}" for i in range(24)], shape=(4, 256))
        a(op="step", items=outputs)
        assert a(op="flush")["pending"] == 0
        nodes.kill(0)
        # A third of the outputs lived on the dead node: misses, encoded again
        # and published (their puts fail as vLLM's safe rejections), never an
        # error that would stop the worker, never a wrong byte.
        got = b(op="step", items=outputs)
        assert 0 < len(got["loaded"]) < 24 and got["wrong"] == 0
        assert b(op="flush")["pending"] == 0
        again = b(op="step", items=outputs)
        assert again["wrong"] == 0 and set(again["loaded"]) >= set(got["loaded"])
        # The node comes back empty at its address. An output that homes
        # there again is a miss to a client that asks it (another may still
        # read a copy put elsewhere meanwhile), so it is encoded and published
        # anew, until every output loads for both encoders: still no error
        # and no wrong byte on the way.
        nodes.restart(0)
        ids = sorted(i["id"] for i in outputs)
        loaded = {}
        for _ in range(20):
            time.sleep(0.4)  # past KVF_STORE_DOWN_RETRY_MS: the node is asked again
            for name, encoder in (("a", a), ("b", b)):
                got = encoder(op="step", items=outputs)
                assert got["wrong"] == 0
                assert encoder(op="flush")["pending"] == 0
                loaded[name] = got["loaded"]
            if loaded["a"] == ids and loaded["b"] == ids:
                break
        assert loaded["a"] == ids and loaded["b"] == ids, f"not all published anew: {loaded}"
    finally:
        a.close()
        b.close()
