import json
import os
import signal
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


class Peer:
    """A target engine in another process (peer.py)."""

    def __init__(self, protocol: str, size: int, api: str = "engine"):
        self.proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "peer.py"), protocol, str(size), api],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=HERE)
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
        os.kill(self.proc.pid, signal.SIGSTOP)

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


@pytest.fixture
def peer_factory():
    peers = []

    def make(protocol: str, size: int = 16 << 20, api: str = "engine") -> Peer:
        p = Peer(protocol, size, api)
        peers.append(p)
        return p

    yield make
    for p in peers:
        p.close()
