import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "tools", "common"))  # ports.py

from stopping import stop  # noqa: E402


class Peer:
    """A target engine in another process (peer.py)."""

    def __init__(self, protocol: str, size: int, api: str = "engine", metadata: str = "P2PHANDSHAKE"):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), protocol, str(size), api, metadata],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=HERE,
        )
        line = self.proc.stdout.readline()
        if not line:
            self.proc.kill()
            raise RuntimeError(f"peer.py {protocol} did not start (exit {self.proc.wait()})")
        info = json.loads(line)
        self.name, self.addr, self.size, self.pid = info["name"], info["addr"], info["size"], info["pid"]

    def ask(self, cmd: str) -> str:
        self.proc.stdin.write(cmd + "\n")
        self.proc.stdin.flush()
        return self.proc.stdout.readline().strip()

    def check(self, off: int, n: int, seed: int) -> int:
        return int(self.ask(f"check {off} {n} {seed}"))

    def fill(self, off: int, n: int, seed: int) -> None:
        assert self.ask(f"fill {off} {n} {seed}") == "ok"

    def freeze(self) -> None:
        stop(self.proc.pid)  # every thread stopped: none serves a transfer after this

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        # A killed shm process leaves its regions in /dev/shm.
        for f in os.listdir("/dev/shm"):
            if f.startswith(f"{self.pid}:"):
                try:
                    os.unlink(os.path.join("/dev/shm", f))
                except OSError:
                    pass

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write("quit\n")
                self.proc.stdin.flush()
                self.proc.wait(timeout=10)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()


@pytest.fixture(params=["tcp", "shm"])
def protocol(request):
    return request.param


@pytest.fixture(params=["tcp", "shm"])
def nodes(request):
    """Three store nodes in their own processes (test_store.Nodes), over tcp, then shm."""
    from test_store import Nodes

    n = Nodes(request.param, 3)
    yield n
    n.close()


@pytest.fixture
def peer_factory():
    peers = []

    def make(protocol: str, size: int = 16 << 20, api: str = "engine", metadata: str = "P2PHANDSHAKE") -> Peer:
        p = Peer(protocol, size, api, metadata)
        peers.append(p)
        return p

    yield make
    for p in peers:
        p.close()


@pytest.fixture(scope="session")
def etcd_uri(tmp_path_factory):
    """A real etcd on loopback, for the whole session (skips without the binary)."""
    import shutil
    import time
    import urllib.request

    if shutil.which("etcd") is None:
        pytest.skip("no etcd binary (Debian: apt install etcd-server; make deps installs it)")
    from ports import free_port

    client, peer = free_port(), free_port()
    c, p = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    proc = subprocess.Popen(
        [
            "etcd",
            "--name",
            "kvf-py",
            "--data-dir",
            str(tmp_path_factory.mktemp("etcd")),
            "--listen-client-urls",
            c,
            "--advertise-client-urls",
            c,
            "--listen-peer-urls",
            p,
            "--initial-advertise-peer-urls",
            p,
            "--initial-cluster",
            f"kvf-py={p}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 20
    while True:
        try:
            urllib.request.urlopen(urllib.request.Request(c + "/v3/maintenance/status", data=b"{}"), timeout=1)
            break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("etcd did not start")
            time.sleep(0.05)
    yield f"etcd://127.0.0.1:{client}"
    proc.terminate()
    proc.wait()


@pytest.fixture(scope="session")
def http_metadata_uri():
    """kvfabric metadata-server on loopback, for the whole session."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvfabric", "metadata-server", "--port", "0"], stdout=subprocess.PIPE, text=True
    )
    line = proc.stdout.readline()
    if "metadata http://" not in line:
        proc.kill()
        pytest.fail(f"kvfabric metadata-server did not start: {line!r}")
    yield line.split("metadata ", 1)[1].strip()
    proc.terminate()
    proc.wait()


# The lab's two hosts (tests/lab/lab.sh): network namespaces A and B joined
# by one link, A at 10.77.0.1 and B at 10.77.0.2, named for this process.
LAB = os.path.join(HERE, "..", "..", "tests", "lab", "lab.sh")
LAB_ENV = dict(os.environ, KVF_LAB_PREFIX=f"kvfpy{os.getpid()}", KVF_LOG_LEVEL="warn")
LAB_HOSTS = {"A": "10.77.0.1", "B": "10.77.0.2"}


def in_host(host: str, *cmd: str) -> list:
    """`cmd` run inside the lab's host `host`."""
    return [LAB, "exec", host, *cmd]


@pytest.fixture(scope="session")
def lab():
    """The lab's two hosts, up for the session; skipped with the lab's reason where it cannot run (it needs
    root and network namespaces)."""
    up = subprocess.run([LAB, "up", "--rails", "1", "--rates", "none"], env=LAB_ENV, capture_output=True, text=True)
    if up.returncode == 77:
        pytest.skip(up.stderr.strip())
    assert up.returncode == 0, up.stderr
    yield LAB_HOSTS
    subprocess.run([LAB, "down"], env=LAB_ENV, capture_output=True)
