"""A TCP port for a server that must be named before it starts.

A port the kernel picks (bind to 0) comes from its ephemeral range, from
which it also picks the ports of every outgoing connection and of every
listener bound to port 0: libfabric's tcp provider takes some for each
engine. Between asking and the server's own bind, such a port can go to
someone else, and the server then fails with "Address already in use".
Ports below the ephemeral range are only taken by a bind that names them.
"""

from __future__ import annotations

import random
import socket

_rng = random.SystemRandom()


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
    """A port of `host` that was free a moment ago, below the ephemeral range."""
    low, floor = _ephemeral_low(), 10000
    if low - floor >= 1000:
        for _ in range(200):
            port = _bindable(host, _rng.randrange(floor, low))
            if port:
                return port
    port = _bindable(host, 0)
    if not port:
        raise OSError(f"no free TCP port on {host}")
    return port
