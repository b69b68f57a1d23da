"""Engine.stats(), the metrics endpoint it feeds, and the helpers that read
them (kvfabric.metrics): a transfer to another process shows in both the
same way, byte for byte."""

import math
import time
import urllib.error
import urllib.request

import pytest

import kvfabric
from kvfabric.engine import buffer_address
from kvfabric.metrics import from_prometheus, quantile, rates
from patterns import pattern
from ports import free_port


def scrape(address: str, path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://{address}{path}", timeout=5) as r:
        return r.read().decode()


def comparable(stats: dict) -> dict:
    """The fields a scrape carries (it has no rail labels beyond its own
    words, and no endpoint address)."""
    out = {k: v for k, v in stats.items() if k not in ("metrics_address", "rails", "latency", "store")}
    out["rails"] = [{k: v for k, v in r.items() if k != "label"} for r in stats["rails"]]
    out["latency"] = sorted((h["op"], h["size_class"], h["count"], tuple(h["buckets"])) for h in stats["latency"])
    return out


def test_stats_and_the_endpoint_agree_with_what_moved(protocol, peer_factory):
    peer = peer_factory(protocol, 8 << 20)
    with kvfabric.Engine(protocol=protocol, settings={"KVF_METRICS_LISTEN": "127.0.0.1:0"}) as e:
        buf = bytearray(4 << 20)
        e.register(buf)
        seg = e.open(peer.name)
        moved = 0
        for i, n in enumerate([4096, 65536, 1 << 20, 3 << 20]):
            buf[:n] = pattern(0, n, i).tobytes()
            e.write(seg, buf, peer.addr, n)
            assert peer.check(0, n, i) == n
            e.read(seg, buf, peer.addr, n)
            assert bytes(buf[:n]) == pattern(0, n, i).tobytes()
            moved += n
        st = e.stats()
        assert st["counting"] and st["engine"] == e.name
        (p,) = [x for x in st["peers"] if x["peer"] == peer.name]
        assert (p["write_requests"], p["read_requests"], p["failures"]) == (4, 4, 0)
        assert p["write_bytes"] == p["read_bytes"] == moved
        assert sum(r["write_bytes"] for r in st["rails"]) == moved
        assert sum(r["read_bytes"] for r in st["rails"]) == moved
        assert {(h["op"], h["size_class"]) for h in st["latency"]} == {
            (op, c) for op in ("write", "read") for c in ("4KiB", "64KiB", "1MiB", "16MiB")
        }
        assert [(r["buffers"], r["bytes"]) for r in st["registrations"]] == [(1, 4 << 20)]
        assert st["segments_open"] == 1 and st["failures"] == []
        # The scrape, read back, is the same figures.
        (scraped,) = from_prometheus(scrape(st["metrics_address"]))
        assert comparable(scraped) == comparable(e.stats())


def test_engines_of_one_process_share_an_endpoint_with_their_own_labels():
    spec = {"KVF_METRICS_LISTEN": "127.0.0.1:0"}
    with kvfabric.Engine(protocol="tcp", settings=spec) as a, kvfabric.Engine(protocol="tcp", settings=spec) as b:
        assert a.stats()["metrics_address"] == b.stats()["metrics_address"] != ""
        buf = bytearray(1 << 20)
        dst = bytearray(1 << 20)
        a.register(buf)
        b.register(dst)
        a.write(a.open(b.name), buf, buffer_address(dst)[0], 1 << 20)
        engines = {x["engine"]: x for x in from_prometheus(scrape(a.stats()["metrics_address"]))}
        assert set(engines) == {a.name, b.name}
        assert engines[a.name]["peers"][0]["write_bytes"] == 1 << 20
        assert engines[b.name]["peers"] == []


def test_metrics_off_leaves_the_rails_counting():
    with kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS": "0"}) as a, kvfabric.Engine(protocol="tcp") as b:
        src, dst = bytearray(65536), bytearray(65536)
        a.register(src)
        b.register(dst)
        a.write(a.open(b.name), src, buffer_address(dst)[0], 65536)
        st = a.stats()
        assert not st["counting"] and st["peers"] == [] and st["latency"] == []
        assert sum(r["write_bytes"] for r in st["rails"]) == 65536
        assert st["metrics_address"] == ""


def test_a_bad_listen_address_is_refused_and_other_paths_are_404():
    with pytest.raises(kvfabric.InvalidArgumentError, match="KVF_METRICS_LISTEN"):
        kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS_LISTEN": "9400"})
    with kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS_LISTEN": "127.0.0.1:0"}) as e:
        address = e.stats()["metrics_address"]
        assert scrape(address, "/healthz") == "ok\n"
        with pytest.raises(urllib.error.HTTPError) as nope:
            scrape(address, "/stats")
        assert nope.value.code == 404


def test_quantiles_and_rates():
    buckets = [(0.001, 5), (0.01, 4), (0.1, 1), (math.inf, 0)]
    assert quantile(buckets, 0.5) == 0.001
    assert quantile(buckets, 0.9) == 0.01
    assert quantile(buckets, 0.99) == 0.1
    assert quantile([(0.001, 0), (math.inf, 2)], 0.5) == math.inf
    assert quantile([(0.001, 0)], 0.5) is None
    before = {
        "rails": [{"index": 0, "write_bytes": 100, "read_bytes": 0, "stalls": 0, "errors": 0}],
        "peers": [
            {"peer": "p", "write_requests": 1, "read_requests": 0, "write_bytes": 100, "read_bytes": 0, "failures": 0}
        ],
        "failures": [],
        "latency": [{"op": "write", "size_class": "4KiB", "count": 1, "buckets": [(0.001, 1), (math.inf, 0)]}],
    }
    after = {
        "rails": [{"index": 0, "write_bytes": 300, "read_bytes": 50, "stalls": 1, "errors": 0}],
        "peers": [
            {"peer": "p", "write_requests": 3, "read_requests": 1, "write_bytes": 300, "read_bytes": 50, "failures": 1}
        ],
        "failures": [{"op": "read", "code": "Timeout", "count": 1}],
        "latency": [{"op": "write", "size_class": "4KiB", "count": 3, "buckets": [(0.001, 1), (math.inf, 2)]}],
    }
    r = rates(before, after, 2.0)
    assert r["rails"][0]["write_rate"] == 100 and r["rails"][0]["read_rate"] == 25
    assert r["rails"][0]["new_stalls"] == 1
    assert r["peers"][0]["request_rate"] == 1.5 and r["failures"] == 1
    # Only the interval's requests: two, both past the last bound.
    assert r["latency"]["write"] == {"p50": math.inf, "p99": math.inf, "count": 2}
    # A restarted engine's counters start again from zero.
    assert rates(after, before, 1.0)["rails"][0]["write_rate"] == 100


def test_a_stores_figures_are_served_beside_its_engines():
    import numpy as np
    from test_store import MISS, Nodes

    nodes = Nodes("tcp", 2)
    try:
        with kvfabric.Engine(
            protocol="tcp",
            settings={"KVF_METRICS_LISTEN": "127.0.0.1:0", "KVF_LOG_LEVEL": "error", "KVF_STORE_SHARE_POOLS": "0"},
        ) as e:
            store = kvfabric.Store(e, members=nodes.members)
            try:
                pages = [np.full(8192 + i, i, dtype=np.uint8) for i in range(8)]
                out = [np.zeros_like(p) for p in pages]
                for p in pages + out:
                    e.register(p)
                keys = ["metrics/page%d" % i for i in range(8)]
                assert store.batch_put(keys, [[p] for p in pages]) == [0] * 8
                got = store.batch_get(keys + ["metrics/absent"], [[o] for o in out] + [[out[0]]])
                assert got[:8] == [p.nbytes for p in pages] and got[8] == MISS
                assert all(np.array_equal(p, o) for p, o in zip(pages, out))
                assert store.batch_exists(keys[:3] + ["metrics/absent"]) == [True, True, True, False]
                text = scrape(e.stats()["metrics_address"])
            finally:
                store.close()
    finally:
        nodes.close()

    def value(name, **labels):
        for line in text.splitlines():
            if line.startswith(name) and all('%s="%s"' % kv in line for kv in labels.items()):
                return float(line.rsplit(" ", 1)[1])
        return None

    engine = {"engine": e.name}
    assert value("kvfabric_store_puts_total", **engine) == 8
    assert value("kvfabric_store_put_bytes_total", **engine) == sum(p.nbytes for p in pages)
    assert value("kvfabric_store_gets_total", **engine) == 9
    assert value("kvfabric_store_hits_total", **engine) == 8
    assert value("kvfabric_store_misses_total", reason="absent", **engine) == 1
    assert value("kvfabric_store_misses_total", reason="node_down", **engine) == 0
    assert value("kvfabric_store_exists_total", **engine) == 4
    assert value("kvfabric_store_exists_hits_total", **engine) == 3
    assert value("kvfabric_store_members", **engine) == 2
    assert value("kvfabric_store_control_round_trips_total", **engine) >= 3
    for call in ("put", "get", "exists"):
        assert value("kvfabric_store_call_latency_seconds_count", call=call, **engine) == 1, call
    # The client maps no pool (KVF_STORE_SHARE_POOLS=0): no page was copied,
    # no key's existence read from a node's table, and the engine's own
    # figures, in the same scrape, say the pages' bytes went by its rails.
    assert value("kvfabric_store_copied_pages_total", **engine) == 0
    assert value("kvfabric_store_exists_local_total", **engine) == 0
    assert value("kvfabric_rail_bytes_total", op="write", **engine) >= sum(p.nbytes for p in pages)


def node_traffic(nodes, rounds: int = 2) -> list:
    """Puts 8 pages through the nodes from a client of this process (pool not mapped: its pages go by the
    fabric), then reads them `rounds` times; the pages."""
    import numpy as np

    with kvfabric.Engine(protocol="tcp", settings={"KVF_LOG_LEVEL": "error", "KVF_STORE_SHARE_POOLS": "0"}) as e:
        store = kvfabric.Store(e, members=nodes.members)
        try:
            pages = [np.full(16384, i, dtype=np.uint8) for i in range(8)]
            out = [np.zeros_like(p) for p in pages]
            for p in pages + out:
                e.register(p)
            keys = ["served/page%d" % i for i in range(8)]
            assert store.batch_put(keys, pages) == [0] * 8
            for _ in range(rounds):
                assert store.batch_get(keys, out) == [16384] * 8
                time.sleep(0.25)  # past the client's touch interval: each round's reads are reported
        finally:
            store.close()
    return pages


def test_a_node_names_itself_and_counts_the_bytes_it_served():
    from test_store import Nodes

    port = free_port()
    nodes = Nodes("tcp", 1, {"KVF_METRICS_LISTEN": f"127.0.0.1:{port}", "KVF_LOG_LEVEL": "error"})
    try:
        pages = node_traffic(nodes)
        total = sum(p.nbytes for p in pages)
        deadline = time.monotonic() + 10
        while True:
            (node,) = from_prometheus(scrape(f"127.0.0.1:{port}"))
            store = node["store"]
            read = store["served"]["located"] + store["served"]["touched"]
            if read >= total or time.monotonic() > deadline:
                break
            time.sleep(0.1)
    finally:
        nodes.close()
    assert store["node"] == nodes.names[0]
    assert store["served"]["stored"] == total and store["pages"] == 8 and store["pool_bytes"] > 0
    # Each of the two rounds read every page: at least one round's bytes were located or reported.
    assert total <= read <= 2 * total, store
