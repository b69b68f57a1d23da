"""A TCP port for a server that must be named before it starts.

A port the kernel picks (bind to 0) comes from its ephemeral range, from
which it also picks the ports of every outgoing connection and of every
listener bound to port 0: libfabric's tcp provider takes some for each
engine. Between asking and the server's own bind, such a port can go to
someone else, and the server then fails with "Address already in use".
Ports below the ephemeral range are only taken by a bind that names them.
"""

from __future__ import annotations

import os
import random
import socket

_rng = random.SystemRandom()
# Ports this process handed out: a caller often names several servers
# before it starts any, and a port is free until its server binds it.
_given: set[int] = set()


def _share(low: int, high: int) -> tuple[int, int]:
    """This process's part of [low, high): pytest-xdist workers, which run
    tests at the same time, each pick from a part of their own."""
    worker, count = os.environ.get("PYTEST_XDIST_WORKER", ""), os.environ.get("PYTEST_XDIST_WORKER_COUNT", "")
    if not (worker.startswith("gw") and worker[2:].isdigit() and count.isdigit() and int(count) > 0):
        return low, high
    index, parts = int(worker[2:]) % int(count), int(count)
    size = (high - low) // parts
    return low + index * size, low + (index + 1) * size


def _ephemeral_low() -> int:
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(host: str, port: int) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError:
            return 0
        return s.getsockname()[1]


def free_port(host: str = "127.0.0.1") -> int:
    """A port of `host` that was free a moment ago, below the ephemeral range,
    not handed out by this process before, and, under pytest-xdist, from this
    worker's own part of the range."""
    low, floor = _ephemeral_low(), 10000
    if low - floor >= 1000:
        first, end = _share(floor, low)
        for _ in range(200):
            pick = _rng.randrange(first, end)
            port = 0 if pick in _given else _bindable(host, pick)
            if port:
                _given.add(port)
                return port
    port = _bindable(host, 0)
    if not port:
        raise OSError(f"no free TCP port on {host}")
    return port
