"""kvfabric.compat.mooncake_store.MooncakeDistributedStore: Mooncake Store's names,
positional forms and integer return codes, over kvfabric's store with its nodes
in other processes; every byte checked."""

import os

import numpy as np
import pytest

from kvfabric.compat.mooncake_store import (
    INVALID_PARAMS,
    OBJECT_ALREADY_EXISTS,
    OBJECT_NOT_FOUND,
    RPC_FAIL,
    MooncakeDistributedStore,
    MooncakeHostMemAllocator,
    ObjectDataType,
    ReplicateConfig,
)
from test_store import Nodes

MiB = 1 << 20


@pytest.fixture(params=["tcp", "shm"])
def mooncake_store(request, monkeypatch):
    nodes = Nodes(request.param, 2)
    # No master: with P2PHANDSHAKE the members come from KVF_STORE_MEMBERS.
    monkeypatch.setenv("KVF_STORE_MEMBERS", nodes.members)
    monkeypatch.setenv("KVF_STORE_DEADLINE_MS", "2000")
    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    store = MooncakeDistributedStore()
    # SGLang's and vLLM's positional form: hostname, metadata, global segment,
    # local buffer, protocol, devices, master.
    assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, request.param, "", "127.0.0.1:50051") == 0
    yield store
    assert store.close() == 0
    nodes.close()


def test_batches_from_registered_buffers_come_back_byte_exact(mooncake_store):
    store = mooncake_store
    rng = np.random.default_rng(7)
    src = rng.integers(0, 256, 8 * MiB, dtype=np.uint8)
    dst = np.zeros(8 * MiB, dtype=np.uint8)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    sizes = [int(n) for n in rng.integers(1, 200 << 10, 24)]
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    keys = [f"mc/page{i}" for i in range(len(sizes))]
    ptrs = [src.ctypes.data + o for o in offsets]
    assert store.batch_put_from(keys, ptrs, sizes, ReplicateConfig()) == [0] * len(keys)
    assert store.batch_is_exist(keys + ["mc/absent"]) == [1] * len(keys) + [0]
    assert store.is_exist(keys[3]) == 1 and store.is_exist("mc/absent") == 0
    got = store.batch_get_into(
        keys + ["mc/absent"], [dst.ctypes.data + o for o in offsets] + [dst.ctypes.data], sizes + [4096]
    )
    assert got[:-1] == sizes, "bytes read per key"
    assert got[-1] == OBJECT_NOT_FOUND
    for o, n in zip(offsets, sizes):
        assert np.array_equal(dst[o : o + n], src[o : o + n])

    # One key = several buffers (per-layer k and v), read back into another split.
    k, v = src[: 64 << 10], src[1 * MiB : 1 * MiB + (16 << 10)]
    assert store.batch_put_from_multi_buffers(
        ["mc/kv"], [[k.ctypes.data, v.ctypes.data]], [[k.nbytes, v.nbytes]], ReplicateConfig()
    ) == [0]
    dst[:] = 0
    half = (k.nbytes + v.nbytes) // 2
    assert store.batch_get_into_multi_buffers(
        ["mc/kv"], [[dst.ctypes.data, dst.ctypes.data + MiB]], [[half, k.nbytes + v.nbytes - half]]
    ) == [k.nbytes + v.nbytes]
    whole = np.concatenate([k, v])
    assert np.array_equal(dst[:half], whole[:half])
    assert np.array_equal(dst[MiB : MiB + whole.nbytes - half], whole[half:])

    # A buffer too small is Mooncake's -600; an unregistered one too, and nothing is stored.
    assert store.batch_get_into([keys[0]], [dst.ctypes.data], [sizes[0] - 1]) == [INVALID_PARAMS] or sizes[0] == 1
    loose = np.ones(4096, dtype=np.uint8)
    assert store.batch_put_from(["mc/loose"], [loose.ctypes.data], [4096]) == [INVALID_PARAMS]
    assert store.is_exist("mc/loose") == 0
    assert store.batch_put_from(["a", "b"], [src.ctypes.data], [1, 1]) == [INVALID_PARAMS] * 2

    assert store.remove(keys[0]) == 0
    assert store.remove(keys[0]) == OBJECT_NOT_FOUND
    assert store.get_into(keys[0], dst.ctypes.data, sizes[0]) == OBJECT_NOT_FOUND
    assert store.remove_all() == len(keys) - 1 + 1  # the rest, and mc/kv
    assert store.batch_is_exist(keys) == [0] * len(keys)
    assert store.unregister_buffer(src.ctypes.data) == 0
    assert store.unregister_buffer(dst.ctypes.data) == 0


def test_bytes_go_through_the_local_buffer(mooncake_store):
    store = mooncake_store
    value = bytes(range(256)) * 1000
    assert store.put("mc/warmup", value) == 0
    assert store.get("mc/warmup") == value
    assert store.get("mc/never") == b"", "a miss is empty bytes, as Mooncake answers"
    assert store.put("mc/big", b"x" * (5 * MiB)) == INVALID_PARAMS, "larger than the local buffer"
    assert store.put_from("mc/empty", 0, 0) == 0, "Mooncake stores nothing for size 0 and answers 0"
    assert store.is_exist("mc/empty") == 0


def test_bytes_in_batches_go_through_the_local_buffer_in_runs(mooncake_store):
    store = mooncake_store  # a 4 MiB local buffer
    values = [bytes([i]) * (1 * MiB + i) for i in range(7)]  # 7 MiB in all: two runs and more
    keys = [f"mc/batch{i}" for i in range(7)]
    assert store.put_batch(keys, values, ReplicateConfig()) == 0
    assert store.get_batch(keys[:3] + ["mc/absent"] + keys[3:]) == values[:3] + [b""] + values[3:]
    assert store.get_size(keys[2]) == 1 * MiB + 2 and store.get_size("mc/absent") == OBJECT_NOT_FOUND
    desc = store.batch_get_replica_desc([keys[0], "mc/absent"])
    assert desc[keys[0]][0].is_memory_replica() and not desc[keys[0]][0].is_disk_replica()
    assert desc["mc/absent"] == []
    assert store.put_batch(["mc/huge"], [b"x" * (5 * MiB)]) == INVALID_PARAMS, "larger than the local buffer"
    assert store.put_batch(["a", "b"], [b"x"]) == INVALID_PARAMS
    assert store.is_exist("mc/huge") == 0


def test_vllms_encoder_cache_call_sequence(mooncake_store):
    """vLLM's Mooncake encoder-cache client: a tensor put as [header, data] from buffers
    registered for the call, read back into one registered read buffer, header checked."""
    import ctypes
    import struct

    store = mooncake_store
    assert store._buffer is None, "the local buffer is made at first use, not at setup"
    config = ReplicateConfig()
    config.data_type = ObjectDataType.TENSOR
    header_fmt = struct.Struct("<IIQQ")
    embeddings = {
        f"ec/mm{i}": np.random.default_rng(i).integers(0, 256, (16 + i) * 1024, dtype=np.uint8) for i in range(3)
    }
    for key, data in embeddings.items():
        header = (ctypes.c_ubyte * header_fmt.size).from_buffer_copy(header_fmt.pack(0x4D4F4F4E, 12, 16, data.nbytes))
        hptr = ctypes.addressof(header)
        assert store.register_buffer(data.ctypes.data, data.nbytes) == 0
        assert store.register_buffer(hptr, header_fmt.size) == 0
        assert store.batch_put_from_multi_buffers(
            [key], [[hptr, data.ctypes.data]], [[header_fmt.size, data.nbytes]], config
        ) == [0]
        assert store.unregister_buffer(data.ctypes.data) == 0 and store.unregister_buffer(hptr) == 0
    assert store.batch_is_exist(list(embeddings)) == [1, 1, 1]
    read = np.zeros(1 * MiB, dtype=np.uint8)
    assert store.register_buffer(read.ctypes.data, read.nbytes) == 0
    sizes = [header_fmt.size + d.nbytes for d in embeddings.values()]
    offsets = np.cumsum([0] + sizes[:-1]).tolist()
    got = store.batch_get_into(list(embeddings), [read.ctypes.data + o for o in offsets], sizes)
    assert got == sizes
    for (key, data), o in zip(embeddings.items(), offsets):
        assert header_fmt.unpack(read[o : o + header_fmt.size].tobytes())[3] == data.nbytes
        assert np.array_equal(read[o + header_fmt.size : o + header_fmt.size + data.nbytes], data)
    assert store.unregister_buffer(read.ctypes.data, read.nbytes) == 0


def test_setup_dummy_is_a_client_of_the_node_at_its_address(monkeypatch):
    nodes = Nodes("tcp", 2)
    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    try:
        # SGLang's standalone mode: (mem_pool_size, local_buffer_size, server_address).
        monkeypatch.delenv("KVF_STORE_MEMBERS", raising=False)
        one = MooncakeDistributedStore()
        assert one.setup_dummy(64 * MiB, 2 * MiB, nodes.names[0]) == 0
        assert one.put("dummy/a", b"alpha") == 0 and one.get("dummy/a") == b"alpha"
        assert one._store.members() == [nodes.names[0]]
        assert one.close() == 0
        # With KVF_STORE_MEMBERS, every member, as every other client places keys.
        monkeypatch.setenv("KVF_STORE_MEMBERS", nodes.members)
        both = MooncakeDistributedStore()
        assert both.setup_dummy(64 * MiB, 2 * MiB, nodes.names[0]) == 0
        assert sorted(both._store.members()) == sorted(nodes.names)
        assert both.close() == 0
        monkeypatch.delenv("KVF_STORE_MEMBERS")
        from ports import free_port

        assert MooncakeDistributedStore().setup_dummy(MiB, MiB, f"127.0.0.1:{free_port()}") == RPC_FAIL
        assert MooncakeDistributedStore().setup_dummy(MiB, MiB, "no port here") == INVALID_PARAMS
    finally:
        nodes.close()


def test_calls_before_setup_answer_mooncakes_codes_and_raise_nothing():
    store = MooncakeDistributedStore()
    assert store.batch_put_from(["a"], [1], [1]) == [INVALID_PARAMS]
    assert store.batch_get_into(["a"], [1], [1]) == [INVALID_PARAMS]
    assert store.batch_put_from_multi_buffers(["a"], [[1]], [[1]]) == []
    assert store.batch_is_exist(["a", "b"]) == [INVALID_PARAMS] * 2
    assert store.is_exist("a") == INVALID_PARAMS
    assert store.get("a") == b""
    assert store.put("a", b"x") == INVALID_PARAMS
    assert store.register_buffer(1, 1) == INVALID_PARAMS
    assert store.remove("a") == INVALID_PARAMS
    assert store.remove_all() == INVALID_PARAMS
    assert store.put_batch(["a"], [b"x"]) == INVALID_PARAMS and store.get_batch(["a"]) == [b""]
    assert store.get_size("a") == INVALID_PARAMS and store.batch_get_replica_desc(["a"]) == {"a": []}
    assert store.unregister_buffer(1, 1) == INVALID_PARAMS, "vLLM's encoder cache passes a size too"
    assert store.close() == 0
    assert store.setup({"local_hostname": "127.0.0.1"}) == INVALID_PARAMS, "no metadata server in the config"


def test_replicate_config_and_host_allocator_look_like_mooncakes():
    cfg = ReplicateConfig()
    assert (cfg.replica_num, cfg.with_hard_pin, cfg.preferred_segment, cfg.prefer_alloc_in_same_node) == (
        1,
        False,
        "",
        False,
    )
    assert hasattr(cfg, "group_ids") and not hasattr(cfg, "session_ids")
    alloc = MooncakeHostMemAllocator()
    ptr = alloc.alloc(1 << 20)
    assert ptr % 4096 == 0 and ptr > 0
    assert alloc.free(ptr) == 0
    assert alloc.free(ptr) == -1
    with pytest.raises(RuntimeError):
        alloc.alloc(0)


def test_workers_that_give_memory_find_each_other_through_etcd(etcd_uri, monkeypatch):
    """SGLang's HiCache shape: every worker calls setup with a global segment,
    no master; the members come from etcd, and the pages spread over them."""
    import json
    import os
    import subprocess
    import sys
    import time

    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    monkeypatch.setenv("KVF_STORE_CLUSTER", f"mc-{os.getpid()}")
    here = os.path.dirname(os.path.abspath(__file__))
    other = subprocess.Popen(
        [sys.executable, os.path.join(here, "mooncake_store_node.py"), "tcp", etcd_uri],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        cwd=here,
    )
    store = MooncakeDistributedStore()
    try:
        started = json.loads(other.stdout.readline())
        assert started["setup"] == 0, started
        assert store.setup("127.0.0.1", etcd_uri, 32 * MiB, 1 * MiB, "tcp", "", "ignored:50051") == 0
        until = time.monotonic() + 10
        while len(store._store.members()) < 2 and time.monotonic() < until:
            time.sleep(0.1)
        assert len(store._store.members()) == 2, store._store.members()
        rng = np.random.default_rng(3)
        src = rng.integers(0, 256, 4 * MiB, dtype=np.uint8)
        dst = np.zeros_like(src)
        assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
        assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
        keys = [f"hicache/{i}" for i in range(64)]
        ptrs = [src.ctypes.data + i * 65536 for i in range(64)]
        assert store.batch_put_from(keys, ptrs, [65536] * 64) == [0] * 64
        at = [dst.ctypes.data + i * 65536 for i in range(64)]
        assert store.batch_get_into(keys, at, [65536] * 64) == [65536] * 64
        assert np.array_equal(src, dst)
    finally:
        store.close()
        other.stdin.write("quit\n")
        other.stdin.flush()
        other.wait(timeout=15)


def test_setup_on_the_callers_transfer_engine_leaves_it_open(monkeypatch):
    """vLLM hands setup its TransferEngine: the store uses it and close() leaves it to its owner."""
    from kvfabric.compat.mooncake import TransferEngine

    nodes = Nodes("tcp", 1)
    monkeypatch.setenv("KVF_STORE_MEMBERS", nodes.members)
    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    store = MooncakeDistributedStore()
    try:
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, MiB, "tcp", "", "", te) == 0
        assert store.get_hostname() == te.get_local_hostname()
        assert store.put("shared", b"on the caller's engine") == 0
        assert store.get("shared") == b"on the caller's engine"
        assert store.close() == 0
        assert not te.get_engine().closed
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", "", te) == 0, "set up again on it"
        assert store.get("shared") == b"", "no local buffer: get answers empty bytes"
    finally:
        store.close()
        te.get_engine().close()
        nodes.close()


def test_ranged_reads_in_a_session_read_parts_of_pages(mooncake_store):
    """SGLang's layer-wise load: a session per batch of keys, then each layer's range of every page."""
    store = mooncake_store
    layers, per_layer = 4, 8192
    rng = np.random.default_rng(11)
    src = rng.integers(0, 256, 8 * layers * per_layer, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    page = layers * per_layer
    keys = [f"layerwise/{i}" for i in range(8)]
    assert store.batch_put_from(keys, [src.ctypes.data + i * page for i in range(8)], [page] * 8) == [0] * 8
    assert store.batch_get_session_start(keys + ["layerwise/absent"]) == [0] * 8 + [OBJECT_NOT_FOUND]
    # Overwritten after the session started: the session still reads the page it found.
    assert store.batch_put_from([keys[0]], [src.ctypes.data + page], [page]) == [0]
    for layer in range(layers):
        got = store.batch_get_into_multi_buffer_ranges(
            keys,
            [[dst.ctypes.data + i * page + layer * per_layer] for i in range(8)],
            [[per_layer]] * 8,
            [[layer * per_layer]] * 8,
        )
        assert got == [per_layer] * 8, (layer, got)
    assert np.array_equal(dst, src)
    assert store.batch_get_into_multi_buffer_ranges(["layerwise/absent"], [[dst.ctypes.data]], [[1]], [[0]]) == [
        OBJECT_NOT_FOUND
    ]
    assert store.batch_get_into_multi_buffer_ranges([keys[1]], [[dst.ctypes.data]], [[2]], [[page - 1]]) == [
        INVALID_PARAMS
    ], "a range past the page's end"
    assert store.batch_get_session_end(keys) == 0
    assert store.batch_get_into_multi_buffer_ranges([keys[1]], [[dst.ctypes.data]], [[1]], [[0]]) == [
        OBJECT_NOT_FOUND
    ], "after the session"


def test_ranged_writes_in_a_session_put_whole_pages(mooncake_store):
    """A layer-wise save (vLLM-Ascend's store backends): a put session per batch of keys,
    each layer's range of every page written as it is computed, then the pages put whole;
    a revoked session puts nothing; misuse answers Mooncake's codes and changes nothing."""
    store = mooncake_store
    layers, per_layer, n = 4, 8192, 6
    page = layers * per_layer
    rng = np.random.default_rng(12)
    src = rng.integers(0, 256, n * page, dtype=np.uint8)
    dst = np.zeros_like(src)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.register_buffer(dst.ctypes.data, dst.nbytes) == 0
    keys = [f"layersave/{i}" for i in range(n)]
    assert store.batch_put_session_start(keys + ["layersave/bad"], [page] * n + [0]) == [0] * n + [INVALID_PARAMS]
    assert store.batch_put_session_start([keys[0]], [page]) == [OBJECT_ALREADY_EXISTS], "a session already open"
    assert store.batch_is_exist(keys) == [0] * n, "nothing is put before the session ends"
    for layer in reversed(range(layers)):  # any order
        got = store.batch_put_from_multi_buffer_ranges(
            keys,
            [[src.ctypes.data + i * page + layer * per_layer] for i in range(n)],
            [[per_layer]] * n,
            [[layer * per_layer]] * n,
        )
        assert got == [0] * n, (layer, got)
    assert store.batch_put_from_multi_buffer_ranges([keys[1]], [[src.ctypes.data]], [[2]], [[page - 1]]) == [
        INVALID_PARAMS
    ], "a range past the page's end"
    assert store.batch_put_from_multi_buffer_ranges(["layersave/none"], [[src.ctypes.data]], [[1]], [[0]]) == [
        OBJECT_NOT_FOUND
    ]
    unregistered = np.ones(16, dtype=np.uint8)
    assert store.batch_put_from_multi_buffer_ranges([keys[2]], [[unregistered.ctypes.data]], [[16]], [[0]]) == [
        INVALID_PARAMS
    ], "a range from memory the engine does not know"
    assert store.batch_put_session_revoke([keys[-1], "layersave/none"]) == [0, OBJECT_NOT_FOUND]
    assert store.batch_put_session_end(keys) == [0] * (n - 1) + [OBJECT_NOT_FOUND]
    assert store.batch_put_session_end(keys[:1]) == [OBJECT_NOT_FOUND], "ended already"
    assert store.batch_is_exist(keys) == [1] * (n - 1) + [0], "the revoked key was never put"
    got = store.batch_get_into(keys[:-1], [dst.ctypes.data + i * page for i in range(n - 1)], [page] * (n - 1))
    assert got == [page] * (n - 1)
    assert np.array_equal(dst[: (n - 1) * page], src[: (n - 1) * page])
    # A session left open at close is let go with it.
    assert store.batch_put_session_start(["layersave/open"], [page]) == [0]


def test_sizes_as_mooncake_writes_them_and_rdma_devices_on_tcp(monkeypatch, capfd):
    """setup takes sizes as Mooncake's own setup does ("16MB", "4 GB": powers of 1024), in the dict form LMCache
    passes and the positional one; an invalid size is INVALID_PARAMS, never an exception; an RDMA device list
    on tcp is ignored with an info line, as Mooncake ignores it there."""
    nodes = Nodes("tcp", 1)
    monkeypatch.setenv("KVF_STORE_MEMBERS", nodes.members)
    monkeypatch.setenv("KVF_LOG_LEVEL", "info")
    try:
        store = MooncakeDistributedStore()
        assert (
            store.setup(
                {
                    "local_hostname": "127.0.0.1",
                    "metadata_server": "P2PHANDSHAKE",
                    "global_segment_size": "0MB",
                    "local_buffer_size": "2 MB",
                    "protocol": "tcp",
                    "device_name": "ibp6s0,mlx5_1",
                    "master_server_address": "127.0.0.1:50051",
                }
            )
            == 0
        )
        try:
            assert store._buffer_bytes == 2 * MiB
            assert store.put("sized", b"x" * 4096) == 0 and store.get("sized") == b"x" * 4096
        finally:
            assert store.close() == 0
        assert "device name(s) ibp6s0, mlx5_1 ignored on tcp" in capfd.readouterr().err
        for bad in ("50%", "-1", "16 parsecs", [16]):
            again = MooncakeDistributedStore()
            assert again.setup("127.0.0.1", "P2PHANDSHAKE", 0, bad, "tcp", "", "") == INVALID_PARAMS, bad
            assert (
                again.setup(
                    {
                        "local_hostname": "127.0.0.1",
                        "metadata_server": "P2PHANDSHAKE",
                        "global_segment_size": bad,
                        "protocol": "tcp",
                    }
                )
                == INVALID_PARAMS
            ), bad
            err = capfd.readouterr().err
            assert (
                "local_buffer_size" in err
                and "global_segment_size" in err
                and "is not a byte count" in err
                or "is negative" in err
            ), err
    finally:
        nodes.close()


def test_values_in_parts_and_buffer_handles_as_lmcache_calls_them(mooncake_store):
    """LMCache's default path: put_parts(key, header, payload) stores one value;
    batch_get_buffer answers handles with the buffer protocol (None for a miss)."""
    store = mooncake_store
    header, payload = bytes(range(48)), np.arange(300_000, dtype=np.uint16).view(np.uint8)
    assert store.put_parts("mc/parts", header, payload) == 0
    assert store.put_parts("mc/parts2", b"x", memoryview(b"yz")) == 0
    got = store.batch_get_buffer(["mc/parts", "mc/absent", "mc/parts2"])
    assert got[1] is None and bytes(got[2]) == b"xyz"
    handle = got[0]
    assert handle.size() == len(handle) == 48 + payload.nbytes and handle.ptr() != 0
    view = memoryview(handle)
    assert bytes(view[:48]) == header and np.array_equal(np.frombuffer(view[48:], dtype=np.uint8), payload)
    assert bytes(store.get_buffer("mc/parts2")) == b"xyz" and store.get_buffer("mc/absent") is None
    with pytest.raises(RuntimeError, match="1-D bytes"):
        store.put_parts("mc/2d", np.zeros((2, 2), dtype=np.uint8))
    with pytest.raises(RuntimeError, match="1-D bytes"):
        store.put_parts("mc/wide", np.zeros(4, dtype=np.uint32))
    assert store.put_parts("mc/none") == INVALID_PARAMS
    assert store.is_exist("mc/2d") == 0 and store.is_exist("mc/none") == 0


def test_upserts_replace_and_a_config_without_copies_is_refused(mooncake_store):
    store = mooncake_store
    src = np.arange(64 << 10, dtype=np.uint8)
    assert store.register_buffer(src.ctypes.data, src.nbytes) == 0
    assert store.upsert("mc/u", b"first") == 0 and store.upsert("mc/u", b"second!") == 0
    assert store.get("mc/u") == b"second!"
    assert store.upsert_parts("mc/u", b"th", b"ird") == 0 and store.get("mc/u") == b"third"
    assert store.upsert_batch(["mc/u", "mc/v"], [b"4", b"5"]) == 0 and store.get_batch(["mc/u", "mc/v"]) == [b"4", b"5"]
    assert store.upsert_from("mc/u", src.ctypes.data, 100) == 0 and store.get_size("mc/u") == 100
    assert store.batch_upsert_from(["mc/u", "mc/w"], [src.ctypes.data, src.ctypes.data + 7], [10, 20]) == [0, 0]
    assert store.get("mc/w") == src[7:27].tobytes()
    none = ReplicateConfig()
    none.replica_num = 0
    assert store.put("mc/zero", b"x", none) == INVALID_PARAMS
    assert store.batch_put_from(["mc/zero"], [src.ctypes.data], [8], none) == [INVALID_PARAMS]
    assert store.put_from("mc/zero", src.ctypes.data, 8, none) == INVALID_PARAMS
    assert store.is_exist("mc/zero") == 0
    assert store.unregister_buffer(src.ctypes.data) == 0


def test_ranges_of_pages_land_where_each_buffer_asks(mooncake_store):
    store = mooncake_store
    rng = np.random.default_rng(11)
    pages = {f"mc/r{i}": rng.integers(0, 256, 40_000 + i, dtype=np.uint8) for i in range(3)}
    for key, page in pages.items():
        assert store.put(key, page) == 0
    a, b = np.zeros(8192, dtype=np.uint8), np.zeros(4096, dtype=np.uint8)
    assert store.register_buffer(a.ctypes.data, a.nbytes) == 0 and store.register_buffer(b.ctypes.data, b.nbytes) == 0
    got = store.get_into_ranges(
        [a.ctypes.data, b.ctypes.data],
        [["mc/r0", "mc/r2"], ["mc/r1", "mc/absent"]],
        [[[0, 1000], [2000]], [[0, 100], [0]]],  # offsets into each buffer
        [[[5, 39_000], [40_001]], [[123, 40_001], [0]]],  # offsets into each page
        [[[1000, 1000], [1]], [[100, 1], [16]]],
    )  # sizes
    assert got == [[[1000, 1000], [1]], [[100, INVALID_PARAMS], [OBJECT_NOT_FOUND]]], (
        "bytes per range; a range past its page's end is -600, an absent key -704"
    )
    assert np.array_equal(a[:1000], pages["mc/r0"][5:1005]) and np.array_equal(a[1000:2000], pages["mc/r0"][39_000:])
    assert a[2000] == pages["mc/r2"][40_001] and np.array_equal(b[:100], pages["mc/r1"][123:223])
    mismatched = store.get_into_ranges([a.ctypes.data], [["mc/r0"], ["mc/r1"]], [[[0]]], [[[0]]], [[[1]]])
    assert mismatched == [[[INVALID_PARAMS]]]
    assert store.unregister_buffer(a.ctypes.data) == 0 and store.unregister_buffer(b.ctypes.data) == 0


def test_a_dummy_clients_pool_memory_is_registered_for_zero_copy_calls(monkeypatch):
    nodes = Nodes("tcp", 1)
    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    monkeypatch.delenv("KVF_STORE_MEMBERS", raising=False)
    try:
        store = MooncakeDistributedStore()
        assert store.alloc_from_mem_pool(4096) == 0, "not set up"
        assert store.setup_dummy(64 * MiB, 2 * MiB, nodes.names[0]) == 0
        ptr = store.alloc_from_mem_pool(1 * MiB)
        assert ptr != 0 and store.alloc_from_mem_pool(0) == 0 and store.alloc_from_mem_pool(-1) == 0
        import ctypes

        ctypes.memmove(ptr, b"pool bytes" * 100, 1000)
        assert store.put_from("dummy/pool", ptr, 1000) == 0
        ctypes.memset(ptr, 0, 1000)
        assert store.get_into("dummy/pool", ptr + 4096, 1000) == 1000
        assert ctypes.string_at(ptr + 4096, 1000) == b"pool bytes" * 100
        assert store.close() == 0
    finally:
        nodes.close()


def test_put_options_are_checked_as_mooncakes_binding_checks_them():
    from kvfabric.compat.mooncake_store import SoftPinAction

    cfg = ReplicateConfig()
    assert [a.name for a in SoftPinAction] == ["PRESERVE", "ENABLE", "DISABLE"]
    cfg.soft_pin_action = SoftPinAction.ENABLE
    cfg.soft_pin_ttl_ms = 30_000
    cfg.soft_pin_ttl_ms = None
    cfg.replica_num = 2
    cfg.group_ids = ["a", "b"]
    cfg.preferred_segments = ["127.0.0.1:17000"]
    for field, value in [
        ("soft_pin_ttl_ms", -1),
        ("soft_pin_ttl_ms", 1 << 64),
        ("replica_num", -1),
        ("replica_num", "2"),
        ("replica_num", 2.0),
        ("soft_pin_action", 1),
        ("data_type", 3),
        ("group_ids", [1, 2]),
        ("preferred_segment", None),
        ("preferred_segments", "one"),
    ]:
        with pytest.raises(TypeError, match=field):
            setattr(cfg, field, value)
    with pytest.raises(AttributeError):
        cfg.replicas = 2
    assert (cfg.replica_num, cfg.soft_pin_action, cfg.group_ids) == (2, SoftPinAction.ENABLE, ["a", "b"])
    import copy

    for twin in (copy.copy(cfg), copy.deepcopy(cfg)):
        assert (twin.replica_num, twin.soft_pin_action, twin.group_ids) == (2, SoftPinAction.ENABLE, ["a", "b"])
        twin.group_ids.append("c")
        twin.replica_num = 3
    assert (cfg.replica_num, cfg.group_ids) == (2, ["a", "b"]), "a copy is a config of its own"
    assert ReplicateConfig().soft_pin_ttl_ms is None and ReplicateConfig().preferred_segments == []


def test_tensor_headers_are_laid_out_as_mooncakes():
    """The 304-byte header of a tensor value, packed and checked without torch."""
    import struct

    from kvfabric.compat.mooncake_tensor import HEADER_BYTES, pack_header, parse_header

    header = pack_header(12, [4, 6], [4, 3], 4 * 3 * 2, tp=(1, 2, 1))  # a bfloat16 shard
    assert len(header) == HEADER_BYTES == 304
    magic, version, size, dtype, ndim, kind = struct.unpack_from("<IHHiiI", header)
    assert (magic, version, size, dtype, ndim, kind) == (0x4D4F4F4E, 1, 304, 12, 2, 1)
    value = header + bytes(24)
    layout = parse_header(value, len(value))
    assert layout.shape == (4, 3) and layout.data_offset == 304 and layout.data_bytes == 24
    assert parse_header(value, len(value) + 1) is None, "the bytes must be what the header says"
    assert parse_header(value[:300], 300) is None
    assert parse_header(b"\0" * 400, 400) is None
    whole = pack_header(0, [], [], 4) + bytes(4)  # a float32 scalar
    assert parse_header(whole, len(whole)).shape == ()


def test_replica_num_copies_each_page_on_that_many_nodes(monkeypatch):
    nodes = Nodes("tcp", 2, {"KVF_STORE_MAX_COPIES": "2"})
    monkeypatch.setenv("KVF_STORE_MEMBERS", nodes.members)
    monkeypatch.setenv("KVF_LOG_LEVEL", "error")
    try:
        two = ReplicateConfig()
        two.replica_num = 2
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "", "") == 0
        assert store.put("mc/two", b"x" * 1000, two) == INVALID_PARAMS, "more copies than KVF_STORE_MAX_COPIES"
        assert store.close() == 0
        monkeypatch.setenv("KVF_STORE_MAX_COPIES", "2")
        store = MooncakeDistributedStore()
        assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 4 * MiB, "tcp", "", "") == 0
        assert store.put_batch([f"mc/two{i}" for i in range(10)], [bytes([i]) * 1000 for i in range(10)], two) == 0
        assert store.put_parts("mc/parts", b"a", b"b", config=two) == 0
        assert [nodes.stats(i)["pages"] for i in range(2)] == [11, 11], "a copy of every page on each node"
        nodes.kill(0)
        assert store.get_batch([f"mc/two{i}" for i in range(10)]) == [bytes([i]) * 1000 for i in range(10)]
        assert store.close() == 0
    finally:
        nodes.close()


def test_a_store_clients_port_and_soft_pin_options_follow_mooncake(mooncake_store):
    store = mooncake_store
    longest = MooncakeDistributedStore()  # Mooncake's positional form to its end: engine, SSD offload, ...
    assert (
        longest.setup("127.0.0.1", "P2PHANDSHAKE", 0, MiB, "tcp", "", "", None, False, "", "default", False, 9300) == 0
    )
    assert longest.close() == 0
    port = int(store.get_hostname().rsplit(":", 1)[1])
    assert 12300 <= port <= 14300, "a bare host name takes a port of MC_STORE_CLIENT_MIN_PORT..MAX_PORT"
    from kvfabric.compat.mooncake_store import SoftPinAction

    pinned = ReplicateConfig()
    pinned.soft_pin_action = SoftPinAction.ENABLE
    pinned.soft_pin_ttl_ms = 1000
    assert store.put("mc/soft", b"x", pinned) == 0
    for action in (SoftPinAction.PRESERVE, SoftPinAction.DISABLE):
        ttl_only = ReplicateConfig()
        ttl_only.soft_pin_action = action
        ttl_only.soft_pin_ttl_ms = 1000
        assert store.upsert("mc/soft", b"y", ttl_only) == INVALID_PARAMS, "a TTL goes with ENABLE only"
    assert store.get("mc/soft") == b"x"


def test_lines_logged_before_any_engine_obey_kvf_log_level():
    """setup logs (the master address it ignores) before it makes its engine: those lines
    follow KVF_LOG_LEVEL from the environment as the engine's own do."""
    import subprocess
    import sys

    code = "from kvfabric import _core; _core.log('info', 'an info line'); _core.log('error', 'an error line')"
    quiet = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "KVF_LOG_LEVEL": "error"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "an error line" in quiet.stderr and "an info line" not in quiet.stderr, quiet.stderr
    loud = subprocess.run(
        [sys.executable, "-c", code],
        env={k: v for k, v in os.environ.items() if k != "KVF_LOG_LEVEL"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "an info line" in loud.stderr, "info by default"
