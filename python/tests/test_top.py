"""`kvfabric top` in a real terminal (tmux): it starts, shows the rails of a
live engine with their throughput, and quits on q."""

import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.request

import pytest

import kvfabric
from kvfabric.engine import buffer_address

tmux = shutil.which("tmux")
pytestmark = pytest.mark.skipif(tmux is None, reason="tmux is not installed (scripts/install-deps.sh installs it)")


def test_top_shows_the_rails_live_and_quits_on_q(tmp_path):
    sock, done = str(tmp_path / "tmux.sock"), tmp_path / "exit"
    with (
        kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS_LISTEN": "127.0.0.1:0"}) as a,
        kvfabric.Engine(protocol="tcp") as b,
    ):
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
            subprocess.run([tmux, "-S", sock, "new-session", "-d", "-x", "160", "-y", "48", cmd], env=env, check=True)
            screen, seen = "", False
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                screen = subprocess.run(
                    [tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE, text=True
                ).stdout
                # The rail row (provider and domain), its state, a throughput,
                # and the peer with its traffic.
                seen = (
                    "0 tcp;ofi_rxm lo" in screen
                    and "in service" in screen
                    and b.name in screen
                    and re.search(r"[0-9.]+ [KMG]B/s", screen) is not None
                    and "write latency p50" in screen
                )
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


def test_names_show_as_written_never_as_markup(tmp_path):
    """An engine named by an IPv6 address and a peer whose name holds "[/]"
    (markup's closing tag) show as written, and top keeps running."""
    import http.server

    with (
        kvfabric.Engine(protocol="tcp", settings={"KVF_METRICS_LISTEN": "127.0.0.1:0"}) as a,
        kvfabric.Engine(protocol="tcp") as b,
    ):
        src, dst = bytearray(1 << 16), bytearray(1 << 16)
        a.register(src)
        b.register(dst)
        a.write(a.open(b.name), src, buffer_address(dst)[0], 1 << 16)
        with urllib.request.urlopen("http://%s/metrics" % a.stats()["metrics_address"]) as r:
            scrape = r.read().decode()
    scrape = scrape.replace('engine="%s"' % a.name, 'engine="[::1]:7400"').replace(
        'peer="%s"' % b.name, 'peer="[/]peer[b]"'
    )
    assert "[::1]:7400" in scrape and "[/]peer[b]" in scrape

    class Scrape(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = scrape.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Scrape)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    sock, done = str(tmp_path / "tmux.sock"), tmp_path / "exit"
    cmd = "%s -m kvfabric top 127.0.0.1:%d; echo $? > %s" % (sys.executable, server.server_address[1], done)
    try:
        subprocess.run(
            [tmux, "-S", sock, "new-session", "-d", "-x", "160", "-y", "48", cmd],
            env=dict(os.environ, TERM="xterm-256color"),
            check=True,
        )
        screen, deadline = "", time.monotonic() + 30
        while time.monotonic() < deadline:
            screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE, text=True).stdout
            if "engine [::1]:7400" in screen and "[/]peer[b]" in screen:
                break
            time.sleep(0.3)
        assert "engine [::1]:7400" in screen and "[/]peer[b]" in screen, screen
        time.sleep(1.5)  # a few refreshes more
        assert not done.exists(), "kvfabric top ended:\n" + screen
    finally:
        subprocess.run([tmux, "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)
        server.shutdown()


def test_a_store_node_is_named_and_shows_what_it_served(tmp_path):
    """A node's engine is titled by the node's name, with its pages and the bytes it stored and served for
    reading while a client puts and gets through it."""
    from ports import free_port
    from test_metrics import node_traffic
    from test_store import Nodes

    port = free_port()
    nodes = Nodes("tcp", 1, {"KVF_METRICS_LISTEN": f"127.0.0.1:{port}", "KVF_LOG_LEVEL": "error"})
    sock = str(tmp_path / "tmux.sock")
    stop = threading.Event()
    client = threading.Thread(target=lambda: [node_traffic(nodes, rounds=4) for _ in iter(stop.is_set, True)])
    try:
        client.start()
        cmd = "%s -m kvfabric top 127.0.0.1:%d --interval 0.5" % (sys.executable, port)
        subprocess.run(
            [tmux, "-S", sock, "new-session", "-d", "-x", "200", "-y", "48", cmd],
            env=dict(os.environ, TERM="xterm-256color"),
            check=True,
        )
        screen, seen, deadline = "", False, time.monotonic() + 30
        while time.monotonic() < deadline and not seen:
            screen = subprocess.run([tmux, "-S", sock, "capture-pane", "-p"], stdout=subprocess.PIPE, text=True).stdout
            m = re.search(r"served: stored ([0-9.]+) ([KMG]?B)/s, read ([0-9.]+) ([KMG]?B)/s", screen)
            seen = (
                f"store node {nodes.names[0]}" in screen
                and "pages 8," in screen
                and m is not None
                and float(m.group(1)) > 0
                and float(m.group(3)) > 0
            )
            time.sleep(0.3)
        assert seen, "kvfabric top did not show the node and what it served:\n" + screen
    finally:
        stop.set()
        client.join()
        subprocess.run([tmux, "-S", sock, "kill-server"], stderr=subprocess.DEVNULL)
        nodes.close()
