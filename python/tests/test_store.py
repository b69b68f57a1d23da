"""kvfabric.Store across processes: nodes in store_node.py processes, the
client here; every page checked byte for byte."""

import json
import os
import subprocess
import sys
import threading
import time
from typing import Optional

import numpy as np
import pytest

import kvfabric
from ports import free_port  # tools/common, on the path from conftest.py

HERE = os.path.dirname(os.path.abspath(__file__))
MISS = -kvfabric.NotFoundError.code


class Nodes:
    def __init__(self, protocol: str, count: int, settings: Optional[dict] = None):
        """`settings`: KVF_* variables of the nodes' environment."""
        self.names = [f"127.0.0.1:{free_port()}" for _ in range(count)]
        self.members = ",".join(self.names)
        self.protocol = protocol
        self.env = dict(os.environ, **(settings or {}))
        self.procs = [self._start(name) for name in self.names]

    def _start(self, name: str) -> subprocess.Popen:
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "store_node.py"), self.protocol, name, self.members],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
            env=self.env,
        )
        line = p.stdout.readline()
        assert line, f"store node {name} did not start (exit {p.wait()})"
        assert json.loads(line)["name"] == name
        return p

    def restart(self, i: int) -> None:
        """Node i, killed, starts again at its address: empty."""
        assert self.procs[i].poll() is not None, "kill it first"
        self.procs[i] = self._start(self.names[i])

    def stats(self, i: int) -> dict:
        """Node i's own counters (its pool, pins, evictions)."""
        self.procs[i].stdin.write("stats\n")
        self.procs[i].stdin.flush()
        return json.loads(self.procs[i].stdout.readline())

    def kill(self, i: int) -> None:
        self.procs[i].kill()
        self.procs[i].wait()

    def close(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait(timeout=15)


@pytest.fixture(params=["tcp", "shm"])
def cluster(request):
    nodes = Nodes(request.param, 3)
    engine = kvfabric.Engine(protocol=request.param, settings={"KVF_LOG_LEVEL": "error"})
    store = kvfabric.Store(
        engine, members=nodes.members, settings={"KVF_STORE_DEADLINE_MS": 2000, "KVF_STORE_DOWN_RETRY_MS": 300}
    )
    yield nodes, engine, store
    store.close()
    engine.close()
    nodes.close()


def pages(engine, count: int, seed: int):
    """`count` pages of mixed sizes, each a k and a v array (two buffers), registered."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(count):
        n = int(rng.integers(1, 96 << 10))
        k = rng.integers(0, 256, n, dtype=np.uint8)
        v = rng.integers(0, 256, int(rng.integers(1, 4096)), dtype=np.uint8)
        engine.register(k)
        engine.register(v)
        out.append((f"layer0/page{i}", k, v))
    return out


def test_pages_come_back_byte_exact_and_exists_counts_the_prefix(cluster):
    nodes, engine, store = cluster
    assert sorted(store.members()) == sorted(nodes.names)
    src = pages(engine, 64, 1)
    assert store.batch_put([k for k, _, _ in src], [[a, b] for _, a, b in src]) == [0] * 64
    dst = [(np.zeros_like(a), np.zeros_like(b)) for _, a, b in src]
    for a, b in dst:
        engine.register(a)
        engine.register(b)
    got = store.batch_get([k for k, _, _ in src], [[a, b] for a, b in dst])
    assert got == [a.nbytes + b.nbytes for _, a, b in src]
    for (_, a, b), (c, d) in zip(src, dst):
        assert np.array_equal(a, c) and np.array_equal(b, d)
    keys = [k for k, _, _ in src[:10]] + ["absent"] + [src[11][0]]
    assert store.batch_exists(keys) == [True] * 10 + [False, True]
    assert store.exists_prefix(keys) == 10
    assert store.batch_remove([src[3][0], "absent"]) == [0, MISS]
    assert store.batch_get([src[3][0]], [[dst[3][0], dst[3][1]]]) == [MISS]
    assert store.last_errors[0].key == src[3][0]
    assert isinstance(store.last_errors[0].exception(), kvfabric.NotFoundError)
    assert store.remove_all() == 63
    assert store.exists_prefix(keys) == 0
    stats = store.stats()
    assert stats["get_hits"] == 64 and stats["misses_absent"] == 1 and stats["members"] == 3


def test_bad_input_is_per_key_or_raises_before_anything_moves(cluster):
    _, engine, store = cluster
    page = np.arange(4096, dtype=np.uint8)
    engine.register(page)
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.batch_put(["a", "b"], [page])
    with pytest.raises(kvfabric.InvalidArgumentError):
        store.batch_put([3], [page])
    unregistered = np.ones(4096, dtype=np.uint8)
    codes = store.batch_put(["ok", "", "unregistered"], [page, page, unregistered])
    assert codes[0] == 0
    assert codes[1] == -kvfabric.InvalidArgumentError.code
    assert codes[2] < 0
    assert [e.index for e in store.last_errors] == [1, 2]
    small = np.zeros(100, dtype=np.uint8)
    engine.register(small)
    assert store.batch_get(["ok"], [small]) == [-kvfabric.InvalidArgumentError.code]
    assert store.batch_exists(["unregistered"]) == [False]


def test_a_killed_node_costs_only_its_keys(cluster):
    nodes, engine, store = cluster
    src = pages(engine, 60, 2)
    keys = [k for k, _, _ in src]
    assert store.batch_put(keys, [[a, b] for _, a, b in src]) == [0] * 60
    nodes.kill(1)
    t0 = time.monotonic()
    got = store.batch_get(keys, [[a, b] for _, a, b in src])
    took = time.monotonic() - t0
    assert took < 3.0
    ok = [g for g in got if g > 0]
    assert 0 < len(ok) < 60, "the dead node's keys fail, the others come back"
    assert all(g < 0 for g in got if g <= 0)
    assert all(e.code in (kvfabric.NetworkError.code, kvfabric.TransferTimeoutError.code) for e in store.last_errors)


def test_a_forked_childs_store_is_inert_and_the_parents_still_serves(cluster):
    """os.fork() with a live Store (multiprocessing's default on Linux): the
    child's copy refuses every call with ClosedError and closes without
    touching the parent's connections or membership; the parent's store
    serves on, byte-exact."""
    _, engine, store = cluster
    src = pages(engine, 16, 4)
    keys = [k for k, _, _ in src]
    assert store.batch_put(keys, [[a, b] for _, a, b in src]) == [0] * 16
    assert store.batch_exists(keys) == [True] * 16  # its control connections are open
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            for call in (
                lambda: store.batch_exists(keys),
                lambda: store.batch_remove(keys[:1]),
                lambda: store.batch_put(["from-child"], [src[0][1]]),
                lambda: store.remove_all(),
            ):
                try:
                    call()
                    code |= 1
                except kvfabric.ClosedError:
                    pass
            store.close()
        except BaseException:
            code |= 2
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
    dst = [(np.zeros_like(a), np.zeros_like(b)) for _, a, b in src]
    for a, b in dst:
        engine.register(a)
        engine.register(b)
    assert store.batch_get(keys, [[a, b] for a, b in dst]) == [a.nbytes + b.nbytes for _, a, b in src]
    for (_, a, b), (c, d) in zip(src, dst):
        assert np.array_equal(a, c) and np.array_equal(b, d)
    assert store.batch_exists(["from-child"]) == [False]


def test_last_errors_are_those_of_the_calling_thread(cluster):
    """Threads share a store: each sees the failed keys of its own latest call, whatever the others called since."""
    _, engine, store = cluster
    page = np.zeros(4096, dtype=np.uint8)
    engine.register(page)
    first_called, second_called = threading.Event(), threading.Event()
    seen = {}

    def first():
        seen["first code"] = store.batch_get(["absent-first"], [page])
        first_called.set()
        second_called.wait(10)
        seen["first"] = [e.key for e in store.last_errors]

    def second():
        first_called.wait(10)
        seen["second code"] = store.batch_get(["absent-second"], [page])
        second_called.set()
        seen["second"] = [e.key for e in store.last_errors]

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    assert seen == {"first code": [MISS], "second code": [MISS], "first": ["absent-first"], "second": ["absent-second"]}
    assert store.last_errors == [], "this thread made no call"


def test_the_store_node_command_serves_until_sigterm():
    import signal

    names = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "kvfabric",
                "store-node",
                "--pool",
                "16mb",
                "--protocol",
                "tcp",
                "--listen",
                n,
                "--members",
                ",".join(names),
                "--set",
                "KVF_LOG_LEVEL=error",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        for n in names
    ]
    try:
        for n, p in zip(names, procs):
            line = p.stdout.readline()
            assert line, f"store-node {n} did not start (exit {p.poll()})"
            assert json.loads(line)["name"] == n and json.loads(line)["pool_bytes"] == 16 << 20
        with kvfabric.Engine(protocol="tcp", settings={"KVF_LOG_LEVEL": "error"}) as engine:
            store = kvfabric.Store(engine, members=names)
            page = np.arange(8192, dtype=np.uint8)
            back = np.zeros_like(page)
            engine.register(page)
            engine.register(back)
            assert store.batch_put([f"cli/{i}" for i in range(8)], [page] * 8) == [0] * 8
            assert store.batch_get(["cli/5"], [back]) == [8192] and np.array_equal(page, back)
            store.close()
        for p in procs:
            p.send_signal(signal.SIGTERM)
            assert p.wait(timeout=15) == 0
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    bad = subprocess.run(
        [sys.executable, "-m", "kvfabric", "store-node", "--pool", "lots"], capture_output=True, text=True, timeout=30
    )
    assert bad.returncode == 1 and "--pool" in bad.stderr and "not a byte count" in bad.stderr


PINNER = """
import sys, numpy as np, kvfabric
e = kvfabric.Engine(protocol="tcp", settings={"KVF_LOG_LEVEL": "error"})
s = kvfabric.Store(e, members=sys.argv[1])
page = np.full(64 << 10, 7, dtype=np.uint8)
e.register(page)
keys = [f"pinned/{i}" for i in range(4)]
assert s.batch_put(keys, [page] * 4) == [0] * 4
assert s.batch_pin(keys) == [0] * 4
print("pinned", flush=True)
sys.stdin.readline()  # until killed
"""


def test_pins_of_a_process_that_died_are_released_and_only_their_owner_unpins():
    nodes = Nodes("tcp", 1)
    try:
        pinner = subprocess.Popen(
            [sys.executable, "-c", PINNER, nodes.members], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        assert pinner.stdout.readline().strip() == "pinned"
        assert nodes.stats(0)["pinned_pages"] == 4
        with kvfabric.Engine(protocol="tcp", settings={"KVF_LOG_LEVEL": "error"}) as engine:
            store = kvfabric.Store(engine, members=nodes.members)
            # Another client cannot end those pins: they are not its own.
            assert store.batch_unpin(["pinned/0"]) == [MISS]
            assert nodes.stats(0)["pinned_pages"] == 4
            # Its own pin, and unpin, of the same key count apart from the other's.
            assert store.batch_pin(["pinned/1"]) == [0]
            assert store.batch_unpin(["pinned/1"]) == [0]
            pinner.kill()
            pinner.wait()
            deadline = time.monotonic() + 5
            while nodes.stats(0)["pinned_pages"] and time.monotonic() < deadline:
                time.sleep(0.05)
            stats = nodes.stats(0)
            assert stats["pinned_pages"] == 0 and stats["pins_released"] == 4
            # The pages are still there, now evictable, and read back whole.
            back = np.zeros(64 << 10, dtype=np.uint8)
            engine.register(back)
            assert store.batch_get(["pinned/3"], [back]) == [64 << 10] and (back == 7).all()
            store.close()
    finally:
        nodes.close()


def test_a_member_that_comes_late_receives_its_keys_from_the_others():
    names = [f"127.0.0.1:{free_port()}" for _ in range(2)]
    members = ",".join(names)

    def start(name):
        p = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "store_node.py"), "tcp", name, members],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        assert json.loads(p.stdout.readline())["name"] == name
        return p

    def stats(p):
        p.stdin.write("stats\n")
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    a = start(names[0])  # the second member is not running yet
    b = None
    try:
        with kvfabric.Engine(protocol="tcp", settings={"KVF_LOG_LEVEL": "error"}) as engine:
            store = kvfabric.Store(engine, members=members, settings={"KVF_STORE_DOWN_RETRY_MS": 300})
            assert store.members() == [names[0]]
            pages = [np.full(8192, i, dtype=np.uint8) for i in range(40)]
            for p in pages:
                engine.register(p)
            keys = [f"back/{i}" for i in range(40)]
            assert store.batch_put(keys, pages) == [0] * 40
            assert stats(a)["pages"] == 40, "every key on the only member"
            b = start(names[1])
            deadline = time.monotonic() + 8
            while (stats(a)["pages"] == 40 or len(store.members()) < 2) and time.monotonic() < deadline:
                store.batch_exists(keys[:1])  # the client's view catches up too
                time.sleep(0.1)
            left = stats(a)
            assert 0 < left["pages"] < 40, "the keys that home on the member that came late left the other"
            assert left["removals"] == 40 - left["pages"]
            assert stats(b)["pages"] == 40 - left["pages"], "each handed over once"
            back = [np.zeros(8192, dtype=np.uint8) for _ in range(40)]
            for p in back:
                engine.register(p)
            assert store.batch_get(keys, back) == [8192] * 40, "every key reads, where it lives now"
            assert all((back[i] == i).all() for i in range(40))
            store.close()
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.stdin.write("quit\n")
                p.stdin.flush()
                p.wait(timeout=15)


def test_members_joining_and_leaving_are_logged(http_metadata_uri, capfd):
    """A client says at info level when a member joins placement and when one leaves the metadata store."""
    cluster = f"log{os.getpid()}"
    settings = {"KVF_STORE_CLUSTER": cluster, "KVF_STORE_MEMBERSHIP_REFRESH_MS": 200, "KVF_LOG_LEVEL": "info"}
    with (
        kvfabric.Engine(protocol="tcp", metadata=http_metadata_uri, settings=settings) as node_engine,
        kvfabric.Engine(protocol="tcp", metadata=http_metadata_uri, settings=settings) as engine,
    ):
        node = kvfabric.Store(node_engine, pool_bytes=8 << 20, settings=settings)
        store = kvfabric.Store(engine, settings=settings)
        assert store.members() == [node.name]
        node.close()
        deadline = time.monotonic() + 5
        while store.members() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.members() == []
        store.close()
    err = capfd.readouterr().err
    assert f"store member {node.name} joined placement" in err
    assert f"store member {node.name} left: its record is gone from" in err


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_copies_survive_a_node_and_nothing_older_is_read_after(protocol):
    """Pages put with two copies all come back, byte exact, with the first copy's node
    killed (before and after the others drop it); a remove reaches both copies; a put
    of one copy takes the older second copy away, so a later failure never reads it."""
    settings = {"KVF_STORE_MAX_COPIES": "2", "KVF_LOG_LEVEL": "error"}
    nodes = Nodes(protocol, 3, settings)
    engine = kvfabric.Engine(protocol=protocol, settings={"KVF_LOG_LEVEL": "error"})
    store = kvfabric.Store(
        engine,
        members=nodes.members,
        settings={"KVF_STORE_DEADLINE_MS": 2000, "KVF_STORE_DOWN_RETRY_MS": 300, "KVF_STORE_MAX_COPIES": 2},
    )
    try:
        src = pages(engine, 48, 9)
        keys = [k for k, _, _ in src]
        bufs = [[a, b] for _, a, b in src]
        assert store.batch_put(keys, bufs, copies=2) == [0] * 48
        held = [nodes.stats(i)["pages"] for i in range(3)]
        assert sum(held) == 96 and min(held) > 0, f"two copies of each page: {held}"
        with pytest.raises(kvfabric.InvalidArgumentError, match="KVF_STORE_MAX_COPIES"):
            store.batch_put(keys[:1], bufs[:1], copies=3)

        # Six keys removed (both copies go), six put again with one copy (the older second goes).
        assert store.batch_remove(keys[:6]) == [0] * 6
        assert store.batch_put(keys[6:12], bufs[6:12], copies=1) == [0] * 6
        assert sum(nodes.stats(i)["pages"] for i in range(3)) == 96 - 12 - 6

        nodes.kill(0)
        out = [[np.zeros_like(a), np.zeros_like(b)] for _, a, b in src]
        engine.register_many([x for pair in out for x in pair])
        for attempt in ("as it dies", "once it is left out"):
            got = store.batch_get(keys, out)
            lost = [k for k, g in zip(keys[12:], got[12:]) if g <= 0]
            assert not lost, f"{attempt}: pages with a copy left were lost: {lost[:3]} {store.last_errors[:2]}"
            for (_, a, b), (ga, gb), g in zip(src[12:], out[12:], got[12:]):
                assert g == a.nbytes + b.nbytes and np.array_equal(a, ga) and np.array_equal(b, gb)
            assert all(g < 0 for g in got[:6]), "removed keys stay removed (a miss, or the dead home's failure)"
        # Keys put with one copy since: back whole where their one copy lived, else a failure or a
        # miss, never the older page that their second copy held.
        for (_, a, b), (ga, gb), g in zip(src[6:12], out[6:12], got[6:12]):
            assert g < 0 or (np.array_equal(a, ga) and np.array_equal(b, gb))
    finally:
        store.close()
        engine.close()
        nodes.close()
