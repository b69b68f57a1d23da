"""The soak's page ledger (tools/soak/page_ledger.py): a real node's debug lines read back as page events, and
the accounting of an acknowledged page that a client found gone."""

import os
import sys
import time

import numpy as np

import kvfabric
from ports import free_port  # tools/common, on the path from conftest.py

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "soak"))
import page_ledger  # noqa: E402
from page_ledger import PageEvent  # noqa: E402


def test_a_node_logging_at_debug_level_writes_where_each_page_went(tmp_path, capfd):
    settings = {"KVF_LOG_LEVEL": "debug"}
    with (
        kvfabric.Engine(protocol="tcp", settings=settings) as node_engine,
        kvfabric.Engine(protocol="tcp", settings=settings) as engine,
    ):
        name = f"127.0.0.1:{free_port()}"
        node = kvfabric.Store(node_engine, pool_bytes=8 << 20, listen=name, members=name)
        store = kvfabric.Store(engine, members=node.name)
        page = np.arange(64 << 10, dtype=np.uint8)
        engine.register(page)
        t0 = time.monotonic()
        assert store.batch_put(["a", "b", "a"], [page, page, page[:4096]]) == [0, 0, 0]
        assert store.batch_remove(["b"]) == [0]
        t1 = time.monotonic()
        store.close()
        node.close()
    log = tmp_path / "node.log"
    log.write_text(capfd.readouterr().err)
    ledger = page_ledger.read_ledger([(node.name, 0, str(log))], {"a", "b"})
    assert [(e.what, e.generation) for e in ledger["b"]] == [("stored", 2), ("removed", 2)]
    assert [e.what for e in ledger["a"]] == ["stored", "overwritten", "stored"]
    assert all(e.node == node.name and t0 - 0.01 <= e.at <= t1 + 0.01 for e in ledger["a"] + ledger["b"])


def event(at, node, what, generation, incarnation=0):
    return PageEvent(at, node, incarnation, what, generation)


ASKED = {"put_start": 10.0, "put_end": 10.1, "audit_start": 20.0, "audit_end": 20.1}


def test_an_evicted_page_or_one_whose_node_ended_is_accounted_for():
    stored = event(10.05, "n1", "stored", 7)
    assert page_ledger.account(ASKED, [stored, event(15, "n1", "evicted", 7)], {})[0] == "evicted"
    assert page_ledger.account(ASKED, [stored], {("n1", 0): 18.0})[0] == "node gone"
    # Followed through a hand-over to the node that stored it before its old home let it go.
    moved = [
        stored,
        event(12.0, "n2", "stored", 3),
        event(12.01, "n1", "handed over", 7),
        event(16, "n2", "evicted", 3),
    ]
    verdict, path = page_ledger.account(ASKED, moved, {})
    assert verdict == "evicted"
    assert [e.node for e in path] == ["n1", "n1", "n2", "n2"]
    assert page_ledger.account(ASKED, moved[:3], {("n2", 0): 19.0})[0] == "node gone"
    # Handed over to a node that began to serve just before the question: the client had not seen it yet.
    fresh = [stored, event(19.9, "n2", "stored", 1, 1), event(19.91, "n1", "handed over", 7)]
    assert page_ledger.account(ASKED, fresh, {}, {("n2", 1): 19.5}, 4.5)[0] == "on a member not seen yet"
    assert page_ledger.account(ASKED, fresh, {}, {("n2", 1): 12.0}, 4.5)[0] == "lost: still in its pool"
    # Still in the pool of a member the client had left out of its placement (it failed a call): a miss.
    out = {**ASKED, "members": ["n1"]}
    assert page_ledger.account(out, fresh, {}, {("n2", 1): 12.0}, 4.5)[0] == "on a member out of the client's view"
    assert page_ledger.account({**ASKED, "members": ["n1", "n2"]}, fresh, {})[0] == "lost: still in its pool"


def test_the_page_of_the_put_is_the_one_of_its_length():
    # A later put of the key stores its page within the stamps' slack after this put ended: the page of
    # this put is the one of its length, evicted before the question.
    asked = {**ASKED, "length": 2097152}
    events = [
        PageEvent(10.05, "n1", 0, "stored", 7, 2097152),
        PageEvent(10.1, "n1", 0, "evicted", 7, 2097152),
        PageEvent(10.104, "n1", 0, "stored", 8, 3632),
    ]
    assert page_ledger.account(asked, events, {})[0] == "evicted"
    assert page_ledger.account(ASKED, events, {})[0] == "lost: still in its pool", "by time alone, the later page"
    assert page_ledger.account({**ASKED, "length": 512}, events, {})[0] == "lost: no node stored it during its put"


def test_a_page_gone_any_other_way_is_lost():
    stored = event(10.05, "n1", "stored", 7)
    assert page_ledger.account(ASKED, [], {})[0] == "lost: no node stored it during its put"
    assert page_ledger.account(ASKED, [stored], {})[0] == "lost: still in its pool"
    assert page_ledger.account(ASKED, [stored], {("n1", 0): 25.0})[0] == "lost: still in its pool"
    assert page_ledger.account(ASKED, [stored, event(11, "n1", "removed", 7)], {})[0] == "lost: removed"
    assert page_ledger.account(ASKED, [stored, event(11, "n1", "overwritten", 7)], {})[0] == "lost: overwritten"
    assert (
        page_ledger.account(ASKED, [stored, event(11, "n1", "handed over", 7)], {})[0]
        == "lost: handed over, and no other node stored it"
    )
    # An eviction after the question was asked does not explain it; one of another page of the key neither.
    assert page_ledger.account(ASKED, [stored, event(21, "n1", "evicted", 7)], {})[0] == "lost: still in its pool"
    assert page_ledger.account(ASKED, [stored, event(15, "n1", "evicted", 6)], {})[0] == "lost: still in its pool"
    # The page is the last one stored during the put, not an older one.
    older = [event(5, "n1", "stored", 6), event(15, "n1", "evicted", 6), event(10.05, "n2", "stored", 2)]
    assert page_ledger.account(ASKED, older, {})[0] == "lost: still in its pool"
