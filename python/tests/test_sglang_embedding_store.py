"""SGLang's multimodal embedding store (``--enable-mm-global-cache``,
``mm_global_cache_backend`` "mooncake"), as SGLang 0.5.23 released it,
unchanged, over kvfabric's ``mooncake.store``: encoder outputs one SGLang
instance stores are found and read by another without running the encoder.

SGLang's EmbeddingStoreFactory makes its MooncakeEmbeddingStore in processes
of their own (sglang_embedding_rank.py), configured from Mooncake's
environment variables as SGLang reads them, against store nodes in theirs,
over tcp and shm. Each registers one pool tensor of pages, as SGLang's
EmbeddingCacheController does, and moves embeddings between its pages and
the store; every byte read back is checked.
"""

import os

import pytest

from json_process import JsonProcess
from sglang_interface import embedding_store_present

pytestmark = pytest.mark.skipif(
    not embedding_store_present(),
    reason="SGLang's embedding store is not unpacked (make check / make test do it; or set KVF_SGLANG_SRC)",
)

PAGE = 16 << 10


class Instance(JsonProcess):
    def __init__(self, nodes):
        env = {
            "MOONCAKE_MASTER": "127.0.0.1:50051",
            "MOONCAKE_PROTOCOL": nodes.protocol,
            "MOONCAKE_DEVICE": "",
            "MOONCAKE_TE_META_DATA_SERVER": "P2PHANDSHAKE",
            "MOONCAKE_GLOBAL_SEGMENT_SIZE": "0",
            "MOONCAKE_LOCAL_HOSTNAME": "127.0.0.1",
            "KVF_STORE_MEMBERS": nodes.members,
            "KVF_LOG_LEVEL": "error",
            "KVF_STORE_DEADLINE_MS": 2000,
            "KVF_STORE_DOWN_RETRY_MS": 300,
        }
        super().__init__(
            "sglang_embedding_rank.py",
            {"env": env, "page_bytes": PAGE, "pages": 64},
            env=dict(os.environ),
            what="SGLang instance",
        )


def test_sglangs_embedding_store_puts_and_another_instance_gets_byte_exact(nodes):
    a, b = Instance(nodes), Instance(nodes)
    try:
        assert (
            a.info["backend"] == "sglang.srt.mem_cache.storage.mooncake_store.mooncake_embedding_store."
            "MooncakeEmbeddingStore"
        )
        assert a.info["store"] == "kvfabric.compat.mooncake_store.MooncakeDistributedStore"
        images = ["img-a", "img-b", "img-c"]
        # Runs of pool pages, the last cut to the embedding's bytes, as
        # SGLang's controller builds them; the reader's runs split the same
        # bytes differently.
        nbytes = [2 * PAGE + 1000, 2 * PAGE, 300]
        assert b(op="exists", hashes=images)["results"] == [False] * 3
        put = a(op="put", hashes=images, runs=[[[0, 1], [4, 2]], [[8, 2]], [[12, 1]]], nbytes=nbytes, multi=True)
        assert put["results"] == [True] * 3
        assert b(op="exists", hashes=images + ["img-z"])["results"] == [True] * 3 + [False]
        got = b(op="get", hashes=images, runs=[[[20, 3]], [[24, 1], [30, 1]], [[40, 1]]], nbytes=nbytes, multi=True)
        assert got["results"] == [True] * 3 and got["wrong"] == 0
        # A put of embeddings partly stored already: SGLang asks which exist
        # and puts the rest (the stored ones are True without a put).
        more = ["img-c", "img-d"]
        put = b(op="put", hashes=more, runs=[[[40, 1]], [[44, 2]]], nbytes=[300, PAGE + 7], multi=True)
        assert put["results"] == [True, True]
        got = a(op="get", hashes=more, runs=[[[50, 1]], [[51, 1], [53, 1]]], nbytes=[300, PAGE + 7], multi=True)
        assert got["results"] == [True, True] and got["wrong"] == 0
        # The single-buffer calls, and a miss, which is False, never bytes.
        assert a(op="put", hashes=["img-e"], runs=[[[60, 1]]], nbytes=[PAGE], multi=False)["results"] == [True]
        got = b(op="get", hashes=["img-e", "img-never"], runs=[[[61, 1]], [[62, 1]]], nbytes=[PAGE, PAGE], multi=False)
        assert got["results"] == [True, False] and got["wrong"] == 0
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("nodes", ["tcp"], indirect=True)  # failure handling, not the fabric: one is enough
def test_a_dead_node_is_false_for_its_embeddings_never_an_exception(nodes):
    a, b = Instance(nodes), Instance(nodes)
    try:
        images = [f"img-{i}" for i in range(24)]
        runs = [[[i * 2, 2]] for i in range(24)]
        nbytes = [2 * PAGE - 100] * 24
        assert a(op="put", hashes=images, runs=runs, nbytes=nbytes, multi=True)["results"] == [True] * 24
        nodes.kill(0)
        got = b(op="get", hashes=images, runs=runs, nbytes=nbytes, multi=True)
        assert 0 < sum(got["results"]) < 24 and got["wrong"] == 0
        exists = b(op="exists", hashes=images)["results"]
        assert [bool(r) for r in got["results"]] == exists, "what exists is what reads"
        # Putting them again: the stored ones are True without a put (SGLang
        # asks first), and the dead node's share is a result, not an exception.
        again = b(op="put", hashes=images, runs=runs, nbytes=nbytes, multi=True)["results"]
        assert all(again[i] for i, e in enumerate(exists) if e)
    finally:
        a.close()
        b.close()
