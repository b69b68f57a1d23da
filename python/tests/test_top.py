"""`kvfabric top` in a real terminal (tmux): it starts, shows the rails of a
live engine with their throughput, and quits on q."""
import os
import re
import shutil
import subprocess
import sys
import threading
import time

import pytest

import kvfabric
from kvfabric.engine import buffer_address

tmux = shutil.which("tmux")
pytestmark = pytest.mark.skipif(tmux is None, reason="tmux is not installed (scripts/install-deps.sh installs it)")



def test_top_shows_the_rails_live_and_quits_on_q(tmp_path):
    sock, done = str(tmp_path / "tmux.sock"), tmp_path / "exit"
    with kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS_LISTEN": "127.0.0.1:0"}) as a, \
            kvfabric.Engine(protocol="tcp") as b:
        address = a.stats()["metrics_address"]
        src, dst = bytearray(1 << 20), bytearray(1 << 20)
        a.register(src)
        b.register(dst)
        seg = a.open(b.name)
        stop = threading.Event()

        def traffic():
            while not stop.is_set():
                a.write(seg, src, buffer_address(dst)[0], 1 << 20)

        writer = threading.Thread(target=traffic)
        writer.start()
        cmd = "%s -m kvfabric top %s; echo $? > %s" % (sys.executable, address, done)
        env = dict(os.environ, TERM="xterm-256color")
        try:
            subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "160", "-y", "48", cmd], env=env,
                           check=True)
            screen, seen = "", False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE,
                                        text=True).stdout
                # The rail row (provider and domain), its state, a throughput,
                # and the peer with its traffic.
                seen = ("0 tcp;ofi_rxm lo" in screen and "in service" in screen and b.name in screen
                        and re.search(r"[0-9.]+ [KMG]B/s", screen) is not None and "write latency p50" in screen)
                if seen:
                    break
                time.sleep(0.3)
            assert seen, "kvfabric top did not show the rail and its traffic:\n" + screen
            assert "engine " + a.name in screen
            subprocess.run([tmux, "-S", sock, "send-keys", "q"], check=True)
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline and not done.exists():
                time.sleep(0.2)
            assert done.exists(), "kvfabric top did not quit on q"
            assert done.read_text().strip() == "0"
        finally:
            stop.set()
            writer.join()
            subprocess.run([tmux, "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)
