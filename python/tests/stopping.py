"""Stopping a peer process for a test: SIGSTOP is delivered to each of its
threads in turn, and until the last has stopped its progress thread may
still serve a READ or acknowledge a WRITE."""

import os
import signal
import time


def stop(pid: int) -> None:
    """SIGSTOP, then waits until every thread of `pid` has stopped."""
    os.kill(pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except OSError:
                pass  # a thread that ended meanwhile
        if states and all(s in ("T", "t") for s in states):
            return
        time.sleep(0.005)
    raise RuntimeError(f"process {pid} did not stop within 5 s")
