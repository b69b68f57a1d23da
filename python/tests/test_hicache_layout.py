"""The HiCache backend's pure policies (kvfabric.integrations.hicache_layout):
keys, the buffers of a page, the options, and the options' documentation."""

import os
import types

import pytest

from kvfabric.integrations.hicache_layout import BackendConfig, key_scheme, options_markdown, page_buffers, parse_bytes

DOC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs", "sglang.md")


def config(**kw):
    base = dict(
        tp_rank=0,
        tp_size=1,
        pp_rank=0,
        pp_size=1,
        attn_cp_rank=0,
        attn_cp_size=1,
        is_mla_model=False,
        model_name="org/model",
    )
    base.update(kw)
    return types.SimpleNamespace(**base)


def test_mha_keys_name_the_tp_rank_and_mla_keys_are_shared():
    assert key_scheme(config(tp_rank=3, tp_size=4)).keys(["h1", "h2"]) == ["org/model/h1_3", "org/model/h2_3"]
    assert key_scheme(config(tp_rank=3, tp_size=4, is_mla_model=True)).keys(["h1"]) == ["org/model/h1"]
    assert key_scheme(config(tp_rank=0, is_mla_model=True)) == key_scheme(config(tp_rank=7, is_mla_model=True))


def test_shards_beyond_tp_are_named_and_nothing_else_is():
    assert key_scheme(config(tp_rank=1, pp_rank=2, pp_size=4)).suffix == "_1_pp2"
    assert key_scheme(config(tp_rank=1, attn_cp_rank=1, attn_cp_size=2)).suffix == "_1_cp1"
    assert key_scheme(config(is_mla_model=True, dcp_size=2, dcp_rank=1, pp_size=2, pp_rank=1)).suffix == "_dcp1_pp1"
    assert key_scheme(config(is_mla_model=True, dp_rank=3)).suffix == ""  # DP replicas share pages


def test_the_prefix_is_the_model_unless_given_and_copying_keys_are_apart():
    assert key_scheme(config(model_name=None)).prefix == ""
    assert key_scheme(config(), key_prefix="").prefix == ""
    assert key_scheme(config(), key_prefix="ns:").keys(["h"]) == ["ns:h_0"]
    assert key_scheme(config(), flat=True).keys(["h"]) == ["org/model/h_0#flat"]
    old = types.SimpleNamespace(tp_rank=2, is_mla_model=False, model_name="m")  # a config of fewer fields
    assert key_scheme(old).keys(["h"]) == ["m/h_2"]


def test_head_splitting_is_refused_saying_so():
    with pytest.raises(NotImplementedError, match="should_split_heads"):
        key_scheme(config(should_split_heads=True))


def test_page_buffers_group_each_pages_buffers_in_order():
    assert page_buffers([10, 20, 30, 40], [1, 2, 3, 4], 2) == [[(10, 1), (20, 2)], [(30, 3), (40, 4)]]
    assert page_buffers([10, 20], [5, 5], 2) == [[(10, 5)], [(20, 5)]]
    for ptrs, sizes, pages, what in [
        ([1, 2, 3], [1, 1, 1], 2, "not the same number per page"),
        ([1, 2], [1], 1, "addresses but"),
        ([], [], 1, "0 buffers"),
        ([1, 2], [1, 0], 1, "size 0"),
        ([1], [1], 0, "at least one"),
    ]:
        with pytest.raises(ValueError, match=what):
            page_buffers(ptrs, sizes, pages)


def test_byte_counts_parse_with_binary_units_and_refuse_nonsense():
    assert parse_bytes(4096, "x") == 4096
    assert parse_bytes("4gb", "x") == 4 << 30
    assert parse_bytes("4Gi", "x") == parse_bytes("4GiB", "x") == parse_bytes("4g", "x") == 4 << 30
    assert parse_bytes("512 MiB", "x") == 512 << 20
    assert parse_bytes("1.5k", "x") == 1536
    for bad in ("lots", "-1", "4 parsecs", True, ""):
        with pytest.raises(ValueError, match="x"):
            parse_bytes(bad, "x")


def test_options_come_from_the_extra_config_then_the_environment_then_defaults():
    env = {"KVF_HICACHE_PROTOCOL": "shm", "KVF_HICACHE_GLOBAL_SEGMENT_SIZE": "1gb"}
    c = BackendConfig.resolve(
        {"protocol": "tcp", "interface_v1": 1, "backend_name": "kvfabric"}, env, hostname=lambda: "10.1.2.3"
    )
    assert (c.protocol, c.global_segment_size, c.local_hostname) == ("tcp", 1 << 30, "10.1.2.3")
    assert (c.metadata_server, c.key_prefix, c.settings) == ("P2PHANDSHAKE", None, {})
    c = BackendConfig.resolve({"settings": {"KVF_STORE_DEADLINE_MS": 100}, "local_hostname": "h:1"}, {})
    assert c.settings == {"KVF_STORE_DEADLINE_MS": 100} and c.local_hostname == "h:1"
    with pytest.raises(ValueError, match="unknown option.*protocoll"):
        BackendConfig.resolve({"protocoll": "tcp"}, {})
    with pytest.raises(ValueError, match="settings"):
        BackendConfig.resolve({"settings": "KVF_X=1"}, {})
    with pytest.raises(ValueError, match="staging_bytes"):
        BackendConfig.resolve({"staging_bytes": 10}, {})


def test_the_documentation_lists_every_option_as_declared():
    with open(DOC) as f:
        text = f.read()
    assert options_markdown() in text, (
        "docs/sglang.md's option table differs from the declaration: "
        "python -m kvfabric.integrations.hicache_layout prints it"
    )


def test_pool_hits_follow_each_pools_policy():
    from kvfabric.integrations.hicache_layout import PoolPresence, pool_hits

    T, F = True, False
    # No extra pool: the KV prefix.
    assert pool_hits([T, T, F, T], []) == (2, {"kv": 2}, [1, 2])
    assert pool_hits([F, T], []) == (0, {}, [])
    # all_pages: the pool's own leading run cuts the prefix.
    dsa = PoolPresence("indexer", "all_pages", 0, [T, T, F, T])
    assert pool_hits([T, T, T, T], [dsa]) == (2, {"kv": 4, "indexer": 2}, [1, 2])
    # trailing_pages: only the last N pages before the cut must be there (Mamba states at a node's end).
    mamba = PoolPresence("mamba", "trailing_pages", 1, [F, F, T, F, T])
    assert pool_hits([T] * 5, [mamba]) == (5, {"kv": 5, "mamba": 5}, [3, 5])
    swa = PoolPresence("swa", "trailing_pages", 2, [F, T, T, F, T])
    assert pool_hits([T] * 5, [swa]) == (3, {"kv": 5, "swa": 3}, [3])
    # Every pool must allow a prefix; once none is left, later pools are not examined.
    assert pool_hits([T] * 5, [mamba, swa]) == (3, {"kv": 5, "mamba": 5, "swa": 3}, [3])
    none = PoolPresence("mamba", "trailing_pages", 1, [F] * 5)
    assert pool_hits([T] * 5, [none, dsa]) == (0, {"kv": 5}, [])
    with pytest.raises(ValueError, match="block_groups"):
        pool_hits([T], [PoolPresence("c4", "block_groups", 0, [T])])


def test_runs_within_pack_in_order_and_refuse_what_never_fits():
    from kvfabric.units import runs_within

    assert list(runs_within([3, 3, 3, 1, 5], 6, "{size}>{capacity}")) == [[0, 1], [2, 3], [4]]
    assert list(runs_within([], 6, "")) == []
    assert list(runs_within([6, 6], 6, "")) == [[0], [1]]
    with pytest.raises(ValueError, match="7>6"):
        list(runs_within([1, 7], 6, "{size}>{capacity}"))
