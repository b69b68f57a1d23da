"""The engine's life against the threads using it and against fork(), with
real peers over tcp and shm."""

import json
import os
import random
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import kvfabric
from patterns import pattern

MiB = 1 << 20
HERE = os.path.dirname(os.path.abspath(__file__))


def _writer(e, seg, mine, remote, t, outcome):
    """Writes, reads back and compares; submits and waits; submits and polls;
    until the engine refuses with ClosedError. Records how it ended."""
    n = 64 << 10
    base = mine.ctypes.data
    try:
        for i in range(1 << 30):
            at = (i % 16) * n
            if i % 3 == 0:
                data = pattern(remote + at, n, t * 1000 + i)
                mine[:n] = data
                e.write(seg, base, remote + at, n)
                e.read(seg, base + n, remote + at, n)
                if not np.array_equal(mine[n : 2 * n], data):
                    outcome[t] = "read back other bytes than written"
                    return
            elif i % 3 == 1:
                e.write_many_async(seg, [(base + (2 + k) * n, remote + at, n) for k in range(4)]).wait()
            else:
                tr = e.write_many_async(seg, [(base + (2 + k) * n, remote + at, n) for k in range(4)])
                while not tr.done():
                    pass
    except kvfabric.ClosedError:
        outcome[t] = "closed"
    except Exception as x:  # noqa: BLE001 - the test reports it
        outcome[t] = f"{type(x).__name__}: {x}"


def test_close_while_writers_run(protocol, peer_factory):
    """close() while four threads write, read, submit, wait
    and poll: no crash; each thread ends with ClosedError; later calls too."""
    slot = 4 * MiB
    peer = peer_factory(protocol, 4 * slot)
    rng = random.Random(4)
    for rnd in range(8):
        e = kvfabric.Engine(protocol=protocol)
        buf = np.zeros(4 * slot, dtype=np.uint8)
        e.register(buf)
        seg = e.open(peer.name)
        outcome = [None] * 4
        threads = [
            threading.Thread(
                target=_writer, args=(e, seg, buf[t * slot : (t + 1) * slot], peer.addr + t * slot, t, outcome)
            )
            for t in range(4)
        ]
        for th in threads:
            th.start()
        time.sleep(rng.random() * 0.05)
        t0 = time.monotonic()
        e.close()
        assert time.monotonic() - t0 < 5, f"round {rnd}: close took {time.monotonic() - t0:.1f} s"
        for th in threads:
            th.join(timeout=10)
            assert not th.is_alive(), f"round {rnd}: a writer hangs after close"
        assert outcome == ["closed"] * 4, f"round {rnd}: {outcome}"
        assert e.closed
        with pytest.raises(kvfabric.ClosedError, match="is closed; create a new Engine"):
            e.write(seg, buf.ctypes.data, peer.addr, 4096)
        with pytest.raises(kvfabric.ClosedError):
            e.submit([kvfabric.Request(kvfabric.OpCode.WRITE, buf.ctypes.data, peer.addr, 4096)], seg)
        e.close()  # again: nothing
    # The peer served every round; bytes written before the closes are there.
    with kvfabric.Engine(protocol=protocol) as e:
        buf = np.frombuffer(bytearray(pattern(0, MiB, 5).tobytes()), dtype=np.uint8)
        e.register(buf)
        e.write(peer.name, buf.ctypes.data, peer.addr, MiB)
    assert peer.check(0, MiB, 5) == MiB


def test_forked_child_leaves_the_parent_alone(protocol, peer_factory, http_metadata_uri):
    """A forked child's copies of an Engine and of a Mooncake
    TransferEngine refuse every call with a clear error; its normal exit
    leaves the parent's segments published and its transfers working."""
    peer = peer_factory(protocol, 16 * MiB, "engine", http_metadata_uri)
    run = subprocess.run(
        [sys.executable, os.path.join(HERE, "fork_parent.py"), protocol, http_metadata_uri, peer.name, str(peer.addr)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=HERE,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.strip().splitlines()[-1])
    child = out["child"]
    assert out["child_exit"] == 0, run.stderr[-3000:]
    for what in ("write", "open", "register", "submit"):
        assert child[what].startswith("ClosedError: "), (what, child[what])
        assert f"belongs to process {out['parent_pid']}" in child[what], child[what]
        assert "create a new Engine in the child" in child[what], child[what]
    assert child["closed"] is True
    assert child["shim_write"] == -1 and child["shim_register"] == -1
    assert "create a new Engine in the child" in run.stderr  # the shim logged why
    # The parent, after the child exited:
    assert out["store_write"] == "ok"  # its descriptor is still in the store
    assert out["store_write_landed"]
    assert out["shim_segment"] == "ok"  # the shim's too
    assert out["parent_write"] == "ok" and out["shim_parent_write"] == 0
    assert peer.check(0, MiB, 11) == MiB
    assert peer.check(MiB, MiB, 12) == MiB


SIGNALLED_CHILD = """
import signal, sys, time
if sys.argv[1] == "handler":
    signal.signal(signal.SIGTERM, lambda *_: (print("handled", flush=True), sys.exit(0)))
import kvfabric
with kvfabric.Engine(protocol="tcp") as e:
    print("ready", flush=True)
    t = time.monotonic()
    while time.monotonic() - t < 20:  # busy: the signal may reach any of the engine's threads
        pass
sys.exit(3)
"""


@pytest.mark.parametrize("mode", ["handler", "default"])
def test_sigterm_reaches_the_applications_handler_or_ends_the_process(mode):
    """A library beneath libfabric (libinfinipath, where the distribution's libfabric has the PSM providers)
    would replace SIGTERM's handler with one that exits 1: the application's own handler must run, and
    without one the process must die of the signal."""
    env = {k: v for k, v in os.environ.items() if k != "IPATH_NO_BACKTRACE"}
    p = subprocess.Popen(
        [sys.executable, "-c", SIGNALLED_CHILD, mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        text=True,
    )
    assert p.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    p.terminate()
    out, _ = p.communicate(timeout=30)
    if mode == "handler":
        assert (p.returncode, out.strip()) == (0, "handled")
    else:
        assert p.returncode == -15
