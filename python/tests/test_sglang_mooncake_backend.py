"""SGLang's own Mooncake HiCache backend (``--hicache-storage-backend
mooncake``), as SGLang 0.5.23 released it, unchanged, over kvfabric's
``mooncake.store``: what an SGLang user who already runs Mooncake's backend
gets by installing kvfabric's shim instead of Mooncake.

Its ``mooncake_store.py`` is loaded from SGLang's wheel (unpacked by `make
test`) and made by SGLang's own backend factory, with torch and the host pool
classes stood in (tools/common/sglang_interface.py). Each rank runs in its own
process (hicache_rank.py) against store nodes in theirs, over tcp and shm:
SGLang's start-up (setup with its positional arguments and its master
address, its warmup put/is_exist/get), register_mem_pool_host, then its
batch_set_v1, batch_exists and batch_get_v1 of MHA and MLA pages, read back by
another rank byte for byte.
"""

import pytest

from sglang_interface import mooncake_backend_present
from test_sglang_hicache import Rank

pytestmark = pytest.mark.skipif(
    not mooncake_backend_present(),
    reason="SGLang's Mooncake backend is not unpacked (make check / make test do it; or set KVF_SGLANG_SRC)",
)


def mooncake_spec(protocol, nodes, kind, tp_rank=0, tp_size=1):
    """A rank of SGLang's Mooncake backend, configured as its docs say (extra
    config with a master address), the store's members in the environment."""
    return {
        "backend": "mooncake",
        "kind": kind,
        "layout": "page_first",
        "config": {"tp_rank": tp_rank, "tp_size": tp_size},
        "extra": {
            "master_server_address": "127.0.0.1:50051",
            "metadata_server": "P2PHANDSHAKE",
            "protocol": protocol,
            "device_name": "",
            "global_segment_size": 0,
            "local_hostname": "127.0.0.1",
            "check_server": False,
        },
        "env": {"KVF_STORE_MEMBERS": nodes.members, "KVF_LOG_LEVEL": "error", "KVF_STORE_DEADLINE_MS": 2000},
    }


@pytest.mark.parametrize("kind", ["mha", "mla"])
def test_sglangs_mooncake_backend_sets_and_another_rank_gets_byte_exact(nodes, kind):
    writer = Rank(mooncake_spec(nodes.protocol, nodes, kind))
    reader = Rank(mooncake_spec(nodes.protocol, nodes, kind))
    try:
        assert writer.info["backend"] == "sglang.srt.mem_cache.storage.mooncake_store.mooncake_store.MooncakeStore"
        assert writer.info["store"] == "kvfabric.compat.mooncake_store.MooncakeDistributedStore"
        hashes = [f"{kind}-page-{i}" for i in range(6)]
        assert reader(op="exists", hashes=hashes)["prefix"] == 0
        assert writer(op="set", hashes=hashes[:4], slots=[3, 1, 7, 0])["results"] == [True] * 4
        assert reader(op="exists", hashes=hashes)["prefix"] == 4, "the leading run of pages stored"
        got = reader(op="get", hashes=hashes[:4], slots=[5, 6, 2, 9], rank=0)
        assert got["results"] == [True] * 4 and got["wrong"] == 0
        # A set of pages partly stored already: SGLang's backend asks which
        # exist and puts the rest.
        assert writer(op="set", hashes=hashes[2:], slots=[7, 0, 4, 8])["results"] == [True] * 4
        got = reader(op="get", hashes=hashes, slots=[10, 11, 12, 13, 14, 15], rank=0)
        assert got["results"] == [True] * 6 and got["wrong"] == 0
        # Pages nobody set are misses, as False: never bytes.
        got = reader(op="get", hashes=["absent-a", "absent-b"], slots=[1, 2], rank=0)
        assert got["results"] == [False, False] and got["wrong"] == 0
    finally:
        writer.close()
        reader.close()


@pytest.mark.parametrize("nodes", ["tcp"], indirect=True)  # the keys, not the fabric: one is enough
def test_sglangs_mha_keys_name_the_tp_rank_so_ranks_keep_their_own_heads(nodes):
    ranks = [Rank(mooncake_spec(nodes.protocol, nodes, "mha", tp_rank=r, tp_size=2)) for r in (0, 1)]
    try:
        hashes = ["shared-prefix-0", "shared-prefix-1"]
        assert ranks[0](op="set", hashes=hashes, slots=[0, 1])["results"] == [True, True]
        assert ranks[1](op="exists", hashes=hashes)["prefix"] == 0, "rank 1's heads are not stored yet"
        assert ranks[1](op="set", hashes=hashes, slots=[2, 3])["results"] == [True, True]
        for r in (0, 1):
            got = ranks[r](op="get", hashes=hashes, slots=[4, 5], rank=r)
            assert got["results"] == [True, True] and got["wrong"] == 0, f"rank {r} read another rank's heads"
    finally:
        for rank in ranks:
            rank.close()


@pytest.mark.parametrize("nodes", ["tcp"], indirect=True)  # over shm: the native backend's failure tests
def test_a_dead_node_is_false_for_its_pages_never_an_exception(nodes):
    writer = Rank(mooncake_spec(nodes.protocol, nodes, "mla"))
    try:
        # 32 pages over three nodes: node 1 holds some, and not all
        # (otherwise: (2/3)^32, about 2e-6).
        hashes = [f"doomed-{i}" for i in range(32)]
        assert writer(op="set", hashes=hashes, slots=list(range(32)))["results"] == [True] * 32
        nodes.kill(1)
        # SGLang's prefetch thread calls these: they answer, False where the
        # page was on the dead node, and the pages that come back are whole.
        got = writer(op="get", hashes=hashes, slots=list(range(32, 64)), rank=0)
        assert got["wrong"] == 0
        assert 0 < got["results"].count(True) < 32, "the live nodes' pages, and only those"
        assert writer(op="exists", hashes=hashes)["prefix"] < 32
        assert writer(op="set", hashes=["after-0", "after-1"], slots=[0, 1])["results"] == [True, True], (
            "new pages go to the live nodes"
        )
    finally:
        writer.close()
