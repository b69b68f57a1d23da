"""Notifications carry bytes, end to end, between real processes: a message
that is not UTF-8 reads back as its bytes, and no message can make the others
queued with it unreadable or lost."""

import json

import numpy as np
import pytest

import kvfabric
from kvfabric.compat.mooncake import TransferEngine, TransferNotify

# Text, bytes that are not UTF-8, every byte value, empty, a NUL, a lone
# continuation byte, and text again after them.
MESSAGES = [b"first", b"\xff\xfe not UTF-8", bytes(range(256)), b"", b"a\x00b", b"\x80", "caf\u00e9".encode(), b"last"]


def test_engine_notifies_are_the_bytes_sent(peer_factory):
    with kvfabric.Engine(protocol="tcp") as e:
        peer = peer_factory("tcp")
        # The peer sends them all before this engine reads any: one read takes
        # a queue holding text and non-UTF-8 messages together.
        assert peer.ask(f"send {e.name} " + " ".join(m.hex() or "-" for m in MESSAGES)) == "ok"
        got = e.notifies()
        assert got == MESSAGES
        assert all(type(m) is bytes for m in got)
        assert e.notifies() == []  # taken once

        # A str goes as UTF-8; bytearray and memoryview as their bytes.
        e.notify(peer.name, "caf\u00e9")
        e.notify(peer.name, bytearray(b"\x80\x81"))
        e.notify(peer.name, memoryview(b"view"))
        assert json.loads(peer.ask("notifies")) == ["caf\u00e9".encode().hex(), "8081", b"view".hex()]

        # What cannot be a message is refused before anything is sent.
        with pytest.raises(kvfabric.InvalidArgumentError, match="UTF-8"):
            e.notify(peer.name, "lone surrogate \udcff")
        with pytest.raises(kvfabric.InvalidArgumentError, match="bytes or str"):
            e.notify(peer.name, 5)
        assert json.loads(peer.ask("notifies")) == []


def test_mooncake_get_notifies_keeps_every_message(peer_factory):
    te = TransferEngine()
    assert te.initialize("127.0.0.1", "P2PHANDSHAKE", "tcp", "") == 0
    try:
        local = np.zeros(1 << 20, dtype=np.uint8)
        assert te.register_memory(local.ctypes.data, local.nbytes) == 0
        me = f"127.0.0.1:{te.get_rpc_port()}"
        raw = peer_factory("tcp")  # kvfabric.Engine.notify: bytes, not the shim's JSON
        shim = peer_factory("tcp", api="mooncake")  # transfer_sync with a TransferNotify
        nested = b"[" * 100000  # JSON-looking, too deep for the parser
        other_json = b'{"name": "x"}'  # JSON, not the shim's: kept whole
        assert raw.ask(f"send {me} " + " ".join(m.hex() for m in (b"plain", b"\xff raw", nested, other_json))) == "ok"
        name, msg = "req-\u00e9".encode(), b"\xc3\x28 not UTF-8 \x00"
        assert shim.ask(f"mwrite {me} {local.ctypes.data} 4096 {name.hex()} {msg.hex()}") == "0"
        assert shim.ask(f"mwrite {me} {local.ctypes.data} 4096 {b'kv'.hex()} {b'ready'.hex()}") == "0"

        got = te.get_notifies()
        # Mooncake's types: a list of TransferNotify whose name and msg are str.
        assert all(isinstance(n, TransferNotify) and type(n.name) is str and type(n.msg) is str for n in got)
        assert [(n.name_bytes, n.msg_bytes) for n in got] == [
            (b"", b"plain"),
            (b"", b"\xff raw"),
            (b"", nested),
            (b"", other_json),
            (name, msg),
            (b"kv", b"ready"),
        ]
        assert (got[0].msg, got[4].name, got[5].name, got[5].msg) == ("plain", "req-\u00e9", "kv", "ready")
        assert got[1].msg.encode("utf-8", "surrogateescape") == b"\xff raw"
        # Forwarded as read, a message keeps its bytes.
        again = TransferNotify(got[4].name, got[4].msg)
        assert (again.name_bytes, again.msg_bytes) == (name, msg)
        assert te.get_notifies() == []
    finally:
        te.close()


def test_transfer_notify_fields_read_as_str_like_mooncake():
    n = TransferNotify("a", b"b")
    assert (n.name, n.msg) == ("a", "b")
    n.msg = b"\xff"
    assert n.msg_bytes == b"\xff" and type(n.msg) is str
    n.name = "\u00e9"
    assert n.name_bytes == b"\xc3\xa9"
    with pytest.raises(TypeError, match="str or bytes"):
        n.msg = 5


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_write_notices_reach_the_target_once_with_their_bytes(protocol):
    with kvfabric.Engine(protocol=protocol) as sender, kvfabric.Engine(protocol=protocol) as target:
        chunk = 1 << 20
        src = np.random.default_rng(5).integers(0, 256, 3 * chunk, dtype=np.uint8)
        dst = np.zeros_like(src)
        sender.register(src)
        target.register(dst)
        seg = sender.open(target.name)
        base = dst.ctypes.data
        reqs = [
            kvfabric.Request(kvfabric.Op.WRITE, src[i * chunk : (i + 1) * chunk], base + i * chunk, notice=40 + i)
            for i in range(3)
        ]
        sender.transfer(reqs, seg)
        got = []
        while len(got) < 3:
            got += target.wait_notices(10)
        assert sorted(got) == [40, 41, 42]
        assert np.array_equal(src, dst)
        assert target.take_notices() == []  # each once
        assert sender.take_notices() == []  # the initiator learns nothing

        with pytest.raises(kvfabric.InvalidArgumentError, match="WRITE only"):
            sender.transfer([kvfabric.Request(kvfabric.Op.READ, src[:chunk], base, notice=5)], seg)
        with pytest.raises(kvfabric.InvalidArgumentError, match="notice"):
            sender.transfer([kvfabric.Request(kvfabric.Op.WRITE, src[:chunk], base, notice=1 << 16)], seg)
        with pytest.raises(TimeoutError):
            target.wait_notices(0.05)
