"""The SGLang HiCache backend (kvfabric.integrations.sglang) as SGLang drives it.

SGLang's own storage base class, config and backend factory (released
sources, unpacked by `make test`; torch stubbed: see tools/common/sglang_interface.py)
load the backend through "dynamic"; host pools answer get_page_buffer_meta
as SGLang's MHA and MLA pools do (tools/common/hicache_pools.py). Ranks in other
processes (hicache_rank.py) read what this one wrote, byte for byte, over
store nodes in their own processes, over tcp and shm.
"""

import time

import numpy as np
import pytest

from hicache_pools import content
from json_process import JsonProcess
from sglang_interface import source_dir
from test_store import Nodes

pytestmark = pytest.mark.skipif(
    source_dir() is None,
    reason="SGLang's HiCache sources are not unpacked (make check / make test do it; or set KVF_SGLANG_SRC)",
)

if source_dir() is not None:
    from hicache_rank import check, fill, make_backend


def spec(protocol, nodes, kind="mha", layout="page_first", config=None, extra=None, pool=None):
    """A rank's spec (hicache_rank.py) for store nodes `nodes` (a Nodes, or a member list)."""
    members = nodes if isinstance(nodes, str) else nodes.members
    return {
        "kind": kind,
        "layout": layout,
        "config": config or {},
        "pool": pool or {},
        "extra": {
            "protocol": protocol,
            "local_hostname": "127.0.0.1",
            "settings": {
                "KVF_STORE_MEMBERS": members,
                "KVF_LOG_LEVEL": "error",
                "KVF_STORE_DEADLINE_MS": 2000,
                "KVF_STORE_DOWN_RETRY_MS": 300,
            },
            **(extra or {}),
        },
    }


class Rank(JsonProcess):
    """A rank in its own process (hicache_rank.py)."""

    def __init__(self, s: dict):
        super().__init__("hicache_rank.py", s, what="rank")


@pytest.fixture
def backends():
    made = []
    yield made
    for b in made:
        b.close()


def new(backends, s):
    backend, pool = make_backend(s)
    backends.append(backend)
    return backend, pool


@pytest.mark.parametrize("kind,layout", [("mha", "page_first"), ("mla", "page_first"), ("mla", "layer_first")])
def test_pages_set_in_one_process_come_back_in_another_byte_exact(nodes, backends, kind, layout):
    writer, pool = new(backends, spec(nodes.protocol, nodes, kind, layout))
    assert type(writer).__name__ == "HiCacheKvfabric" and writer.zero_copy
    hashes = [f"{kind}-{layout}-{i:03d}" for i in range(40)]
    slots = list(range(40))
    fill(pool, hashes, slots, 0)
    assert writer.batch_set_v1(hashes, pool.indices(slots)) == [True] * 40
    assert writer.batch_exists(hashes) == 40
    assert writer.batch_exists(hashes[:10] + ["absent"] + hashes[11:]) == 10
    reader = Rank(spec(nodes.protocol, nodes, kind, layout))
    try:
        assert reader(op="exists", hashes=hashes)["prefix"] == 40
        got = reader(op="get", hashes=hashes, slots=list(range(20, 60)), rank=0)
        assert got == {"results": [True] * 40, "wrong": 0}
        got = reader(op="get", hashes=hashes[:3] + ["absent"], slots=[1, 2, 3, 4], rank=0)
        assert got == {"results": [True, True, True, False], "wrong": 0}
    finally:
        reader.close()


def test_mha_ranks_keep_their_own_heads_and_mla_ranks_share_one_writer(nodes, backends):
    hashes = [f"ranks-{i}" for i in range(8)]
    # MHA: rank 1's pages are its own; rank 0 finds none of them.
    mha1, pool1 = new(backends, spec(nodes.protocol, nodes, "mha", config={"tp_rank": 1, "tp_size": 2}))
    fill(pool1, hashes, range(8), 1)
    assert mha1.batch_set_v1(hashes, pool1.indices(range(8))) == [True] * 8
    mha0, pool0 = new(backends, spec(nodes.protocol, nodes, "mha", config={"tp_rank": 0, "tp_size": 2}))
    assert mha0.batch_exists(hashes) == 0
    assert mha0.batch_get_v1(hashes[:2], pool0.indices([0, 1])) == [False, False]
    # MLA: rank 1 is not SGLang's storage writer: its set writes nothing.
    mla1, mpool1 = new(backends, spec(nodes.protocol, nodes, "mla", config={"tp_rank": 1, "tp_size": 2}))
    assert not mla1.writer
    fill(mpool1, hashes, range(8), 1)
    assert mla1.batch_set_v1(hashes, mpool1.indices(range(8))) == [True] * 8
    assert mla1.batch_exists(hashes) == 0
    mla0, mpool0 = new(backends, spec(nodes.protocol, nodes, "mla", config={"tp_rank": 0, "tp_size": 2}))
    fill(mpool0, hashes, range(8), 0)
    assert mla0.batch_set_v1(hashes, mpool0.indices(range(8))) == [True] * 8
    got = mla1.batch_get_v1(hashes, mpool1.indices(range(20, 28)))
    assert got == [True] * 8 and check(mpool1, hashes, range(20, 28), got, 0) == 0
    # Another model never reads these pages.
    other, opool = new(backends, spec(nodes.protocol, nodes, "mla", config={"model_name": "other/model"}))
    assert other.batch_exists(hashes) == 0


def test_a_page_of_another_size_is_a_miss_never_a_partial_page(nodes, backends):
    small, spool = new(backends, spec(nodes.protocol, nodes, "mla", pool={"layers": 2}))
    big, bpool = new(backends, spec(nodes.protocol, nodes, "mla", pool={"layers": 4}))
    hashes = ["size-a", "size-b"]
    fill(spool, hashes, [0, 1], 0)
    assert small.batch_set_v1(hashes, spool.indices([0, 1])) == [True, True]
    # The smaller page fills only part of the larger page's buffers: reported missing, so
    # SGLang frees those slots and recomputes.
    assert big.batch_get_v1(hashes, bpool.indices([5, 6])) == [False, False]
    assert big.stats()["hicache_failed_short_page"] == 2
    # A larger page never fits the smaller pool's buffers.
    big.clear()
    fill(bpool, hashes, [0, 1], 0)
    assert big.batch_set_v1(hashes, bpool.indices([0, 1])) == [True, True]
    assert small.batch_get_v1(hashes, spool.indices([3, 4])) == [False, False]
    assert small.stats()["hicache_failed_InvalidArgumentError"] == 2


def test_failures_are_false_or_a_shorter_prefix_never_an_exception(nodes, backends):
    writer, pool = new(backends, spec(nodes.protocol, nodes, "mha"))
    hashes = [f"fail-{i:02d}" for i in range(30)]
    fill(pool, hashes, range(30), 0)
    assert writer.batch_set_v1(hashes, pool.indices(range(30))) == [True] * 30

    # A corrupted page in a node's pool: a miss, counted; the others come back.
    store = writer.store
    codes, where = store.batch_locate([writer.scheme.keys([hashes[4]])[0]])
    assert codes == [0]
    segment, addr, length, _ = where[0]
    junk = np.full(64, 0xA5, dtype=np.uint8)
    writer.engine.register(junk)
    writer.engine.write(segment, junk, addr + length // 2)
    got = writer.batch_get_v1(hashes, pool.indices(range(30, 60)))
    assert got == [i != 4 for i in range(30)]
    assert check(pool, hashes, range(30, 60), got, 0) == 0
    assert writer.stats()["misses_checksum"] == 1

    # A dead node: its pages are misses within the deadline, the rest come back.
    nodes.kill(2)
    t0 = time.monotonic()
    got = writer.batch_get_v1(hashes, pool.indices(range(30, 60)))
    assert time.monotonic() - t0 < 4.0
    assert 0 < sum(got) < 29 and check(pool, hashes, range(30, 60), got, 0) == 0
    assert writer.batch_exists(hashes) < 30
    assert all(isinstance(ok, bool) for ok in writer.batch_set_v1(hashes, pool.indices(range(30))))


def test_a_full_pool_evicts_and_refuses_as_false_when_it_cannot(backends):
    # One node, a 32 MiB pool, whose operator lets pins hold all of it.
    one = Nodes("tcp", 1, settings={"KVF_STORE_MAX_PINNED_SHARE": "100"})
    try:
        writer, pool = new(backends, spec("tcp", one, "mla", pool={"tokens": 64 * 24, "layers": 61, "page_size": 64}))
        page = pool.page_nbytes()  # 61 x 576 x 64 bytes: 2.1 MiB
        fits = (32 << 20) // page
        hashes = [f"full-{i}" for i in range(fits + 8)]
        fill(pool, hashes[:24], range(24), 0)
        # More pages than the pool holds: the oldest are evicted, every put succeeds.
        for i in range(0, fits + 8, 8):
            run = hashes[i : i + 8]
            assert writer.batch_set_v1(run, pool.indices([j % 24 for j in range(i, i + len(run))])) == [True] * len(run)
        keys = writer.scheme.keys(hashes)
        present = writer.store.batch_exists(keys)
        assert 0 < sum(present) < len(hashes) and present[-1]
        # Every page pinned: nothing can be evicted, so new pages are refused: False, no exception.
        held = [k for k, p in zip(keys, present) if p]
        assert writer.store.batch_pin(held) == [0] * len(held)
        more = [f"more-{i}" for i in range(4)]
        fill(pool, more, range(4), 0)
        assert writer.batch_set_v1(more, pool.indices(range(4))) == [False] * 4
        assert writer.stats()["hicache_failed_BusyError"] == 4
        assert writer.store.batch_unpin(held) == [0] * len(held)
        assert writer.batch_set_v1(more, pool.indices(range(4))) == [True] * 4
    finally:
        one.close()


def test_the_copying_calls_without_interface_v1(nodes, backends):
    s = spec(nodes.protocol, nodes, "mha", extra={"interface_v1": 0, "staging_bytes": 3 * 32768})
    backend, pool = new(backends, s)
    assert not backend.zero_copy and backend.scheme.suffix.endswith("#flat")
    values = [np.frombuffer(content(f"flat-{i}", 0, 32768), dtype=np.uint8).copy() for i in range(7)]
    assert backend.batch_set([f"flat-{i}" for i in range(7)], values) is True  # in runs of 3 through staging
    assert backend.set("flat-x", values[0]) is True
    assert backend.exists("flat-3") and not backend.exists("flat-9")
    assert backend.batch_exists([f"flat-{i}" for i in range(9)]) == 7
    targets = [np.zeros(32768, dtype=np.uint8) for _ in range(8)]
    got = backend.batch_get([f"flat-{i}" for i in range(7)] + ["flat-9"], targets)
    assert got[-1] is None
    for v, t, g in zip(values, targets, got):
        assert g is t and np.array_equal(v, t)
    assert backend.get("flat-x", np.zeros(32768, dtype=np.uint8)) is not None
    with pytest.raises(ValueError, match="staging_bytes"):
        backend.batch_set(["too-big"], [np.zeros(4 * 32768, dtype=np.uint8)])
    # The zero-copy backend's keys never meet the copying calls' keys.
    zc, _ = new(backends, spec(nodes.protocol, nodes, "mha"))
    assert zc.batch_exists(["flat-0"]) == 0


def test_stats_follow_sglangs_storage_metrics(nodes, backends):
    backend, pool = new(backends, spec(nodes.protocol, nodes, "mla", config={"enable_storage_metrics": True}))
    hashes = [f"stats-{i}" for i in range(6)]
    fill(pool, hashes, range(6), 0)
    assert backend.batch_set_v1(hashes, pool.indices(range(6))) == [True] * 6
    assert backend.batch_get_v1(hashes, pool.indices(range(10, 16))) == [True] * 6
    m = backend.get_stats()
    assert m.backup_pgs == [6] and m.prefetch_pgs == [6]
    assert m.backup_bandwidth[0] > 0 and m.prefetch_bandwidth[0] > 0
    again = backend.get_stats()
    assert again.backup_pgs == [] and again.prefetch_pgs == []
    assert backend.stats()["get_hits"] == 6


def test_bad_configuration_and_misuse_raise_saying_what(nodes, backends):
    with pytest.raises(ValueError, match="unknown option"):
        make_backend(spec(nodes.protocol, nodes, extra={"global_segment_sise": "1gb"}))
    with pytest.raises(ValueError, match="not a byte count"):
        make_backend(spec(nodes.protocol, nodes, extra={"global_segment_size": "lots"}))
    with pytest.raises(NotImplementedError, match="should_split_heads"):
        make_backend(spec(nodes.protocol, nodes, config={"should_split_heads": True, "tp_lcm_size": 4}))
    backend, pool = new(backends, spec(nodes.protocol, nodes, "mha"))
    with pytest.raises(ValueError, match="not the same number per page"):
        backend.batch_get_v1(["a", "b", "c"], pool.indices([0, 1]))
    assert backend.batch_get_v1([], pool.indices([])[:0]) == []


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_ranks_can_be_the_nodes(protocol, backends):
    # Two ranks giving memory, found through the static list they are on.
    from ports import free_port

    names = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    members = ",".join(names)
    made = []
    for name in names:
        s = spec(
            protocol,
            members,
            "mla",
            extra={
                "global_segment_size": "32mb",
                "settings": {
                    "KVF_STORE_MEMBERS": members,
                    "KVF_STORE_LISTEN": name,
                    "KVF_LOG_LEVEL": "error",
                    "KVF_STORE_DOWN_RETRY_MS": 100,
                },
            },
        )
        made.append(new(backends, s))
    (a, apool), (b, bpool) = made
    # The first rank found the second down when it started; both see both within the retry.
    deadline = time.monotonic() + 5
    while len(a.store.members()) < 2 and time.monotonic() < deadline:
        a.batch_exists(["warm-up"])
        time.sleep(0.05)
    assert sorted(a.store.members()) == sorted(names)
    hashes = [f"node-{i}" for i in range(16)]
    fill(apool, hashes, range(16), 0)
    assert a.batch_set_v1(hashes, apool.indices(range(16))) == [True] * 16
    got = b.batch_get_v1(hashes, bpool.indices(range(16)))
    assert got == [True] * 16 and check(bpool, hashes, range(16), got, 0) == 0
    assert a.store.stats()["pages"] + b.store.stats()["pages"] == 16
    assert a.store.stats()["pages"] > 0 and b.store.stats()["pages"] > 0


def test_hybrid_pools_through_the_v2_calls(nodes, backends):
    from hicache_pools import MLAPool
    from sglang_interface import hicache_storage

    hs = hicache_storage()
    PoolTransfer, PoolName, Policy = hs.PoolTransfer, hs.PoolName, hs.PoolHitPolicy
    backend, kv = new(backends, spec(nodes.protocol, nodes, "mha"))
    mamba = MLAPool(tokens=16 * 8, page_size=1, layers=2, dim=256)  # one state slot per page, page-first
    indexer = MLAPool(tokens=16 * 64, page_size=16, layers=2, dim=64)
    backend.register_mem_host_pool_v2(mamba, PoolName.MAMBA)
    backend.register_mem_host_pool_v2(indexer, PoolName.INDEXER)
    hashes = [f"hybrid-{i}" for i in range(6)]
    fill(kv, hashes, range(6), 0)
    fill(indexer, hashes, range(6), 0)
    ends = [hashes[2], hashes[5]]  # Mamba states are kept at the end of each radix node
    fill(mamba, ends, [0, 1], 0)
    done = backend.batch_set_v2(
        [
            PoolTransfer(PoolName.KV, host_indices=kv.indices(range(6)), keys=hashes),
            PoolTransfer(PoolName.INDEXER, host_indices=indexer.indices(range(6)), keys=hashes),
            PoolTransfer(PoolName.MAMBA, host_indices=mamba.indices([0, 1]), keys=ends),
        ]
    )
    assert done == {PoolName.KV: [True] * 6, PoolName.INDEXER: [True] * 6, PoolName.MAMBA: [True, True]}

    def exists(*transfers):
        return backend.batch_exists_v2(hashes, list(transfers))

    trailing = PoolTransfer(PoolName.MAMBA, keys=["x"], hit_policy=Policy.TRAILING_PAGES)
    every = PoolTransfer(PoolName.INDEXER, keys=hashes, hit_policy=Policy.ALL_PAGES)
    r = exists(trailing, every)
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (6, [3, 6])
    assert r.extra_pool_hit_pages == {PoolName.KV: 6, PoolName.MAMBA: 6, PoolName.INDEXER: 6}
    assert r.extra_pool_hit_pages.get(PoolName.KV) == 6  # SGLang looks it up by its enum
    # The last node's state gone: the prefix ends at the first node.
    assert backend.store.batch_remove(backend.scheme.keys([hashes[5]])) == [0]  # its KV page too
    backend.store.batch_remove([k + "@mamba" for k in backend.scheme.keys([hashes[5]])])
    fill(kv, hashes[5:], [5], 0)
    assert backend.batch_set_v2([PoolTransfer(PoolName.KV, host_indices=kv.indices([5]), keys=hashes[5:])]) == {
        PoolName.KV: [True]
    }
    r = exists(trailing, every)
    assert (r.kv_hit_pages, r.restorable_prefix_pages) == (3, [3])
    # An indexer page missing cuts every prefix past it.
    backend.store.batch_remove([k + "@indexer" for k in backend.scheme.keys([hashes[1]])])
    assert exists(trailing, every).kv_hit_pages == 0
    assert exists(every).kv_hit_pages == 1

    # Reads: every pool's pages come back byte for byte in another process's pools.
    got = backend.batch_get_v2(
        [
            PoolTransfer(PoolName.KV, host_indices=kv.indices(range(10, 13)), keys=hashes[:3]),
            PoolTransfer(PoolName.MAMBA, host_indices=mamba.indices([5]), keys=[hashes[2]]),
            PoolTransfer(PoolName.INDEXER, host_indices=indexer.indices([10, 11]), keys=hashes[:2]),
        ]
    )
    assert got == {PoolName.KV: [True] * 3, PoolName.MAMBA: [True], PoolName.INDEXER: [True, False]}
    assert check(kv, hashes[:3], range(10, 13), got[PoolName.KV], 0) == 0
    assert mamba.page_bytes(5) == content(hashes[2], 0, mamba.page_nbytes())
    assert indexer.page_bytes(10) == content(hashes[0], 0, indexer.page_nbytes())
    with pytest.raises(ValueError, match="never registered"):
        backend.batch_get_v2([PoolTransfer(PoolName.SWA, host_indices=kv.indices([0]), keys=["a"])])
    with pytest.raises(ValueError, match="block_groups"):
        exists(PoolTransfer(PoolName.DEEPSEEK_V4_C4, keys=hashes, hit_policy=Policy.BLOCK_GROUPS))


def test_pools_as_sglang_hands_them_over(nodes, backends):
    """A KV pool given through register_mem_host_pool_v2 alone, its buffer offering only
    data_ptr(), numel() and element_size(), serves the v1 and v2 calls; a page the store
    holds at another size is written again, not answered True unwritten."""
    from sglang_interface import hicache_storage

    hs = hicache_storage()
    PoolTransfer, PoolName = hs.PoolTransfer, hs.PoolName
    small, spool = new(backends, spec(nodes.protocol, nodes, "mla", pool={"layers": 2}))
    s = spec(nodes.protocol, nodes, "mla", pool={"layers": 4})
    backend, pool = new(backends, dict(s, register="v2", tensor_like=True))
    hashes = [f"handed-{i}" for i in range(4)]
    fill(spool, hashes[:2], [0, 1], 0)
    assert small.batch_set_v1(hashes[:2], spool.indices([0, 1])) == [True, True]
    fill(pool, hashes, range(4), 0)
    done = backend.batch_set_v2([PoolTransfer(PoolName.KV, host_indices=pool.indices(range(4)), keys=hashes)])
    assert done == {PoolName.KV: [True] * 4}
    assert backend.stats()["put_keys"] == 4, "the two pages held at another size were written again"
    reader, rpool = new(backends, s)
    got = reader.batch_get_v1(hashes, rpool.indices(range(8, 12)))
    assert got == [True] * 4 and check(rpool, hashes, range(8, 12), got, 0) == 0
    got = backend.batch_get_v2([PoolTransfer(PoolName.KV, host_indices=pool.indices(range(4, 8)), keys=hashes)])
    assert got == {PoolName.KV: [True] * 4} and check(pool, hashes, range(4, 8), got[PoolName.KV], 0) == 0
    assert backend.batch_get_v1(hashes[:1], pool.indices([9])) == [True]
