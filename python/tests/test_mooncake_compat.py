"""kvfabric.compat.mooncake.TransferEngine: Mooncake's names, arguments and
integer return codes, against a real second process."""

import json
import subprocess
import sys
import time

import numpy as np
import pytest

from kvfabric.compat.mooncake import TransferEngine, TransferNotify, TransferOpcode
from patterns import pattern

MiB = 1 << 20


@pytest.fixture
def engine(protocol):
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", protocol, "") == 0
    yield te
    te.close()


def test_sync_async_and_polled_transfers(protocol, engine, peer_factory):
    peer = peer_factory(protocol, api="mooncake")
    assert engine.get_rpc_port() > 0
    local = np.zeros(8 * MiB, dtype=np.uint8)
    base = local.ctypes.data
    assert engine.register_memory(base, local.nbytes) == 0
    assert engine.get_first_buffer_address(peer.name) == peer.addr
    assert engine.warmup_efa_segment(peer.name) == 0
    assert engine.send_probe(peer.name) == 0

    local[:MiB] = pattern(0, MiB, 21)
    assert engine.transfer_sync_write(peer.name, base, peer.addr, MiB) == 0
    assert peer.check(0, MiB, 21) == MiB
    assert engine.transfer_sync_read(peer.name, base + MiB, peer.addr + 2 * MiB, MiB) == 0
    assert np.array_equal(local[MiB : 2 * MiB], pattern(2 * MiB, MiB, 1))

    n, block = 8, 256 << 10
    local[: n * block] = pattern(0, n * block, 22)
    addrs = [base + i * block for i in range(n)]
    peers = [peer.addr + i * block for i in range(n)]
    assert engine.batch_transfer_sync_write(peer.name, addrs, peers, [block] * n) == 0
    assert peer.check(0, n * block, 22) == n * block
    assert engine.batch_transfer_sync_read(peer.name, [base + 4 * MiB], [peer.addr + 4 * MiB], [MiB]) == 0
    assert np.array_equal(local[4 * MiB : 5 * MiB], pattern(4 * MiB, MiB, 1))

    local[: n * block] = pattern(0, n * block, 23)
    b1 = engine.batch_transfer_async_write(peer.name, addrs, peers, [block] * n)
    b2 = engine.batch_transfer_async_read(peer.name, [base + 6 * MiB], [peer.addr + 6 * MiB], [MiB])
    assert b1 > 0 and b2 > 0 and b1 != b2
    assert engine.get_batch_transfer_status([b1, b2]) == 0
    assert peer.check(0, n * block, 23) == n * block
    assert np.array_equal(local[6 * MiB : 7 * MiB], pattern(6 * MiB, MiB, 1))

    local[:MiB] = pattern(0, MiB, 24)
    bid = engine.transfer_submit_write(peer.name, base, peer.addr, MiB)
    assert bid > 0
    deadline = time.monotonic() + 30
    while (rc := engine.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
        time.sleep(0.001)
    assert rc == 1
    assert peer.check(0, MiB, 24) == MiB
    assert engine.transfer_check_status(bid) == -1  # consumed: now unknown

    assert (
        engine.transfer_sync(peer.name, base, peer.addr, 16, TransferOpcode.WRITE, TransferNotify("req-7", "kv ready"))
        == 0
    )
    assert json.loads(peer.ask("notifies")) == [["req-7", "kv ready"]]
    assert engine.unregister_memory(base) == 0


def test_failure_codes(protocol, engine, peer_factory):
    local = np.zeros(MiB, dtype=np.uint8)
    base = local.ctypes.data
    assert engine.register_memory(base, MiB) == 0
    dead = "127.0.0.1:1"
    assert engine.transfer_sync_write(dead, base, 0, 16) < 0
    assert engine.batch_transfer_sync_read(dead, [base], [0], [16]) < 0
    assert engine.batch_transfer_async_write(dead, [base], [0], [16]) == 0
    assert engine.transfer_submit_write(dead, base, 0, 16) == 0  # Mooncake: 0, never -1
    assert engine.transfer_check_status(987654) == -1
    assert engine.get_batch_transfer_status([987654]) == -1
    assert engine.send_probe(dead) != 0
    assert engine.get_first_buffer_address(dead) == 0
    assert engine.batch_transfer_sync_write(dead, [base, base], [0], [16]) < 0  # mismatched lists
    assert engine.register_memory(base, MiB) < 0  # already registered (overlap)
    # Bad numbers are clear errors (logged) and -1, not binding errors
    assert engine.register_memory(base + MiB, -1) < 0
    assert engine.register_memory(base + MiB, 1 << 64) < 0
    assert engine.batch_register_memory([base + MiB], [-5]) < 0
    assert engine.unregister_memory(base + 1) < 0
    assert engine.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") < 0  # twice

    peer = peer_factory(protocol, api="mooncake")
    assert engine.transfer_sync_write(peer.name, base, peer.addr + peer.size - 8, 16) < 0  # out of range
    assert peer.check(peer.size - MiB, MiB, 1) == MiB
    assert engine.send_probe(peer.name) == 0
    peer.kill()
    assert engine.send_probe(peer.name) != 0


def test_check_status_reports_timeout(monkeypatch, peer_factory):
    monkeypatch.setenv("KVF_TRANSFER_TIMEOUT_MS", "1500")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        peer = peer_factory("tcp", api="mooncake")
        local = np.zeros(8 * MiB, dtype=np.uint8)
        assert te.register_memory(local.ctypes.data, local.nbytes) == 0
        assert te.warmup_efa_segment(peer.name) == 0
        peer.freeze()  # alive but silent: writes are never acknowledged
        bid = te.transfer_submit_write(peer.name, local.ctypes.data, peer.addr, 8 * MiB)
        assert bid > 0
        deadline = time.monotonic() + 20
        while (rc := te.transfer_check_status(bid)) == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert rc == -2
        peer.kill()
    finally:
        te.close()


def test_initialize_rejects_what_it_cannot_serve():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "zookeeper://127.0.0.1:2181", "tcp", "") == -1
    assert te.initialize("127.0.0.1", "etcd://127.0.0.1:1", "tcp", "") == -1  # nobody there
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "infiniband-please", "") == -1
    assert te.transfer_sync_write("127.0.0.1:1", 0, 0, 1) == -1  # not initialized
    assert te.get_rpc_port() == -1
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    te.close()


def test_managed_buffers():
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    addr = te.allocate_managed_buffer(MiB)
    assert addr != 0 and addr % 4096 == 0
    assert te.write_bytes_to_buffer(addr + 10, b"hello kv", 8) == 0
    assert te.read_bytes_from_buffer(addr + 10, 8) == b"hello kv"
    assert te.write_bytes_to_buffer(addr + MiB - 4, b"too long", 8) == -1  # past the end
    assert te.read_bytes_from_buffer(12345, 8) == b""  # not a buffer of ours
    assert te.free_managed_buffer(addr, MiB - 1) == -1  # wrong length
    assert te.free_managed_buffer(addr, MiB) == 0
    assert te.free_managed_buffer(addr, MiB) == -1
    te.close()


def test_cli():
    def run(*a):
        return subprocess.run([sys.executable, "-m", "kvfabric", *a], capture_output=True, text=True, timeout=60)

    r = run("--help")
    assert r.returncode == 0 and "doctor" in r.stdout
    r = run("doctor", "--json")
    rows = json.loads(r.stdout)
    assert any("libfabric" in x["check"] for x in rows)
    r = run("topo", "--protocol=tcp")
    assert r.returncode == 0, r.stderr
    assert any(n["domain"] == "lo" and n["numa"] == -1 for n in json.loads(r.stdout)["nics"])
    r = run("probe", "127.0.0.1:1", "--protocol", "tcp")
    assert r.returncode == 1 and json.loads(r.stdout)["reachable"] is False
    r = run("bench", "initiator", "--help")
    assert r.returncode == 0 and "--segment_id" in r.stdout


def test_cli_probe_live_peer(peer_factory):
    peer = peer_factory("tcp")
    r = subprocess.run(
        [sys.executable, "-m", "kvfabric", "probe", peer.name, "--protocol", "tcp"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["reachable"] and out["buffers"][0]["addr"] == peer.addr


def test_shim_serves_mooncake_imports(tmp_path):
    """`kvfabric mooncake-shim install` makes `from mooncake.engine import
    TransferEngine` give kvfabric's class, working, in a fresh interpreter
    (a site directory of the test's own: the environment is not touched)."""
    import os

    def run(*a, **kw):
        return subprocess.run([sys.executable, *a], capture_output=True, text=True, timeout=60, **kw)

    site = str(tmp_path)
    r = run("-m", "kvfabric", "mooncake-shim", "install", "--site_dir", site)
    assert r.returncode == 0, r.stdout + r.stderr
    code = (
        f"import site; site.addsitedir({site!r}); from mooncake.engine import TransferEngine; "
        "te = TransferEngine(); print(type(te).__module__, te.initialize('127.0.0.1', 'P2PHANDSHAKE', 'tcp', ''), "
        "te.get_rpc_port() > 0); te.close()"
    )
    r = run("-c", code)
    assert r.stdout.split() == ["kvfabric.compat.mooncake", "0", "True"], r.stderr[-2000:]
    r = run("-c", code, env={**os.environ, "KVF_MOONCAKE_SHIM": "0"})
    assert r.returncode != 0 and "ModuleNotFoundError" in r.stderr
    assert run("-m", "kvfabric", "mooncake-shim", "uninstall", "--site_dir", site).returncode == 0


@pytest.mark.parametrize("backend", ["etcd", "http", "bare_etcd"])
def test_cluster_metadata_backends(backend, request, peer_factory):
    """The same transfers with segments found through etcd or the http store."""
    uri = request.getfixturevalue("http_metadata_uri" if backend == "http" else "etcd_uri")
    if backend == "bare_etcd":  # Mooncake's form: host:port means etcd
        uri = uri[len("etcd://") :]
    peer = peer_factory("tcp", api="mooncake", metadata=uri)
    te = TransferEngine()
    assert te.initialize("127.0.0.1", uri, "tcp", "") == 0
    try:
        local = np.zeros(MiB, dtype=np.uint8)
        assert te.register_memory(local.ctypes.data, MiB) == 0
        assert te.get_first_buffer_address(peer.name) == peer.addr
        local[:] = pattern(0, MiB, 31)
        assert te.transfer_sync_write(peer.name, local.ctypes.data, peer.addr, MiB) == 0
        assert peer.check(0, MiB, 31) == MiB
        assert te.transfer_sync_read(peer.name, local.ctypes.data, peer.addr + MiB, MiB) == 0
        assert np.array_equal(local, pattern(MiB, MiB, 1))
        assert te.get_first_buffer_address("127.0.0.1:1") == 0  # never published
    finally:
        te.close()


def test_a_batch_seen_ended_can_always_be_freed(peer_factory):
    """transfer_check_status frees a batch as soon as it reports it ended: a
    task's state and its batch's count of ended tasks must agree, or the free
    in between is refused (BusyError out of a call that must return a code)."""
    peer = peer_factory("tcp", api="mooncake")
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        local = np.zeros(4096, dtype=np.uint8)
        assert te.register_memory(local.ctypes.data, local.nbytes) == 0
        for _ in range(2000):
            bid = te.transfer_submit_write(peer.name, local.ctypes.data, peer.addr, 4096)
            assert bid != 0
            while (rc := te.transfer_check_status(bid)) == 0:
                pass
            assert rc == 1
    finally:
        te.close()


def test_bad_numbers_are_logged_clearly_and_change_nothing(peer_factory, capfd):
    # -1, 2^64 or a float is checked before it reaches the binding, whose
    # TypeError ("incompatible function arguments") would say nothing useful.
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        peer = peer_factory("tcp", api="mooncake")
        local = np.zeros(MiB, dtype=np.uint8)
        base = local.ctypes.data
        assert te.register_memory(base, MiB) == 0
        capfd.readouterr()
        cases = [
            (
                lambda: te.transfer_sync_write(peer.name, base, -1, 16),
                -1,
                "peer_buffer_addresses[0] -1 is out of range",
            ),
            (
                lambda: te.transfer_sync_read(peer.name, 1.5, peer.addr, 16),
                -1,
                "buffers[0] must be an integer, not float",
            ),
            (
                lambda: te.batch_transfer_sync_write(peer.name, [base, base], [peer.addr, 1 << 64], [16, 16]),
                -1,
                "peer_buffer_addresses[1] 18446744073709551616 is out of range",
            ),
            (
                lambda: te.batch_transfer_sync_read(peer.name, [base], [peer.addr], [16.0]),
                -1,
                "lengths[0] must be an integer",
            ),
            (
                lambda: te.batch_transfer_async_write(peer.name, [base], [peer.addr], [-1]),
                0,
                "lengths[0] -1 is out of range",
            ),
            (
                lambda: te.transfer_submit_write(peer.name, base, peer.addr, 1 << 64),
                0,
                "lengths[0] 18446744073709551616",
            ),
            (lambda: te.transfer_sync(peer.name, base, peer.addr, 16, 7), -1, "opcode 7"),
            (lambda: te.batch_transfer_async(peer.name, [base], [peer.addr], [16], 1 << 64), 0, "opcode"),
            (lambda: te.transfer_check_status(-1), -1, "batch id -1 is out of range"),
            (lambda: te.get_batch_transfer_status([1 << 64]), -1, "batch id 18446744073709551616 is out of range"),
            (lambda: te.register_memory(base + 2 * MiB, 4096.0), -1, "length 4096.0 is not a positive byte count"),
            (lambda: te.unregister_memory(-1), -1, "address -1 is out of range"),
            (lambda: te.batch_unregister_memory([base, 1 << 64]), -1, "buffer_addresses[1] 18446744073709551616"),
            (lambda: te.batch_register_memory([base + 2 * MiB], [2.5]), -1, "length 2.5"),
            (lambda: te.allocate_managed_buffer(-1), 0, "length -1 is out of range"),
            (lambda: te.allocate_managed_buffer(1 << 64), 0, "length 18446744073709551616 is out of range"),
            (lambda: te.write_bytes_to_buffer(base, b"abc", -1), -1, "length -1 is out of range"),
            (lambda: te.read_bytes_from_buffer(base, 1 << 64), b"", "length 18446744073709551616 is out of range"),
        ]
        for call, failure, message in cases:
            assert call() == failure, message
            err = capfd.readouterr().err
            assert message in err, err
            assert "incompatible function arguments" not in err
        assert te.allocate_managed_buffer(1 << 62) == 0  # more than the machine maps: a failure, not an exception
        assert peer.check(0, MiB, 1) == MiB  # nothing was written
        local[:16] = 0x42
        assert te.transfer_sync_write(peer.name, base, peer.addr, 16) == 0  # still registered
        assert te.unregister_memory(base) == 0
    finally:
        te.close()
