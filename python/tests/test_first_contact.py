"""First contact on a cluster, in the lab's two hosts (tests/lab/lab.sh: network namespaces A and B, one link,
A at 10.77.0.1 and B at 10.77.0.2): the README's store-node command as it is printed, one node per host, over
etcd and over kvfabric's metadata server, pages put from host B and read back byte for byte, some of them from
host A's node; and a node that would advertise a loopback address refused with the flag to set.

Needs root and network namespaces; skipped with the lab's reason otherwise.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
from conftest import LAB_ENV as ENV
from conftest import LAB_HOSTS as HOSTS
from conftest import in_host

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def readme_command(prefix: str) -> str:
    """The README's command that starts with `prefix`, as printed (between backticks)."""
    with open(os.path.join(ROOT, "README.md")) as f:
        m = re.search(r"`(" + re.escape(prefix) + r"[^`]*)`", f.read())
    assert m, f"README.md has no `{prefix}...` command"
    return m.group(1)


@pytest.fixture(params=["etcd", "http"])
def metadata(request, lab, tmp_path):
    """A metadata store in host A that both hosts reach: its URI."""
    a = HOSTS["A"]
    if request.param == "etcd":
        if shutil.which("etcd") is None:
            pytest.skip("no etcd binary (Debian: apt install etcd-server; make deps installs it)")
        client, peer = f"http://{a}:2379", "http://127.0.0.1:2380"
        proc = subprocess.Popen(
            in_host(
                "A",
                "etcd",
                "--name",
                "lab",
                "--data-dir",
                str(tmp_path / "etcd"),
                "--listen-client-urls",
                client,
                "--advertise-client-urls",
                client,
                "--listen-peer-urls",
                peer,
                "--initial-advertise-peer-urls",
                peer,
                "--initial-cluster",
                f"lab={peer}",
            ),
            env=ENV,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        uri = f"etcd://{a}:2379"
        probe = ["curl", "-sf", "-X", "POST", "-d", "{}", f"{client}/v3/maintenance/status"]
    else:
        proc = subprocess.Popen(
            in_host("A", sys.executable, "-m", "kvfabric", "metadata-server", "--host", a, "--port", "8080"),
            env=ENV,
            stdout=subprocess.DEVNULL,
        )
        uri = f"http://{a}:8080/metadata"
        probe = ["curl", "-s", "-o", "/dev/null", f"http://{a}:8080/metadata?key=probe"]
    deadline = time.monotonic() + 20
    while subprocess.run(in_host("B", *probe), env=ENV, capture_output=True).returncode != 0:
        assert proc.poll() is None and time.monotonic() < deadline, f"{request.param} did not start in host A"
        time.sleep(0.1)
    yield uri
    proc.terminate()
    proc.wait()


def node_command(host: str, uri: str) -> list:
    """The README's store-node command for `host`, its placeholders filled: the host's address, the metadata
    store, and a pool this machine can give twice."""
    text = readme_command("kvfabric store-node --pool")
    text = text.replace("etcd://ETCD_HOST:2379", uri).replace("HOST:", f"{HOSTS[host]}:")
    args = text.split()[1:]
    args[args.index("--pool") + 1] = "64mb"
    return [sys.executable, "-m", "kvfabric", *args, "--stats_every", "0.5"]


CLIENT = r"""
import json, sys, time
import numpy as np
import kvfabric
uri = sys.argv[1]
with kvfabric.Engine("10.77.0.2:0", uri, "tcp") as engine:
    store = kvfabric.Store(engine)
    deadline = time.monotonic() + 15
    while len(store.members()) < 2 and time.monotonic() < deadline:
        time.sleep(0.1)
    rng = np.random.default_rng(7)
    pages = [rng.integers(0, 256, 64 << 10, dtype=np.uint8) for _ in range(16)]
    back = [np.zeros(64 << 10, dtype=np.uint8) for _ in range(16)]
    for a in pages + back:
        engine.register(a)
    keys = [f"first-contact-{i}" for i in range(16)]
    put = store.batch_put(keys, pages)
    got = store.batch_get(keys, back)
    print(json.dumps({"members": store.members(), "put": put, "got": got,
                      "exact": sum(bool(np.array_equal(p, b)) for p, b in zip(pages, back))}), flush=True)
    store.close()
"""


def test_the_readme_store_nodes_serve_another_host(metadata):
    nodes = {
        h: subprocess.Popen(
            in_host(h, *node_command(h, metadata)), env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for h in HOSTS
    }
    try:
        started = {}
        for h, p in nodes.items():
            line = p.stdout.readline()
            assert line, f"the store node of host {h} did not start: {p.stderr.read()[-2000:]}"
            started[h] = json.loads(line)
            assert started[h]["segment"].startswith(HOSTS[h] + ":"), f"host {h} advertises {started[h]}"
        client = subprocess.run(
            in_host("B", sys.executable, "-c", CLIENT, metadata), env=ENV, capture_output=True, text=True, timeout=60
        )
        assert client.returncode == 0, client.stderr[-3000:]
        out = json.loads(client.stdout.splitlines()[-1])
        assert sorted(out["members"]) == sorted(s["name"] for s in started.values())
        assert out["put"] == [0] * 16 and out["got"] == [64 << 10] * 16, out
        assert out["exact"] == 16
        # Host A's node holds some of them: they crossed the link.
        pages = 0
        for line in nodes["A"].stdout:
            pages = json.loads(line).get("pages", 0)
            if pages:
                break
        assert pages > 0, "host A's node holds none of the pages"
    finally:
        for p in nodes.values():
            p.terminate()
            p.communicate(timeout=20)


def test_a_node_that_would_advertise_loopback_is_refused_with_the_flag_to_set(metadata):
    a = HOSTS["A"]
    cases = [
        (["--metadata", metadata], "--listen HOST:PORT"),
        (
            ["--listen", f"{a}:7401", "--local_server_name", "127.0.0.1:0", "--members", f"{a}:7401"],
            f"--local_server_name {a}:0",
        ),
    ]
    for args, advice in cases:
        r = subprocess.run(
            in_host("A", sys.executable, "-m", "kvfabric", "store-node", "--pool", "64mb", *args),
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert "loopback" in r.stderr and advice in r.stderr, r.stderr


TARGET = r"""
import sys, kvfabric
with kvfabric.Engine(sys.argv[1], protocol="tcp") as e:
    kv = bytearray(b"kv" * 4096)
    e.register(kv)
    print(e.name, flush=True)
    sys.stdin.read()
"""


def test_probe_from_another_host_reads_from_the_peer_over_the_link(lab):
    target = subprocess.Popen(
        in_host("A", sys.executable, "-c", TARGET, f"{HOSTS['A']}:15000"),
        env=ENV,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        name = target.stdout.readline().strip()
        assert name == f"{HOSTS['A']}:15000", target.stderr.read()[-2000:] if not name else name
        r = subprocess.run(
            in_host("B", sys.executable, "-m", "kvfabric", "probe", name, "--protocol", "tcp"),
            env=ENV,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 0, (r.stdout, r.stderr)
        out = json.loads(r.stdout)
        assert out["reachable"] and out["read_ms"] > 0, out
        assert [rail["domain"] for rail in out["rails"]] != ["lo"], out["rails"]  # a rail on the link, not loopback
    finally:
        target.stdin.close()
        target.wait(timeout=20)
    # Nothing serves that name now: unreachable, with the reason.
    r = subprocess.run(
        in_host("B", sys.executable, "-m", "kvfabric", "probe", name, "--protocol", "tcp"),
        env=ENV,
        capture_output=True,
        text=True,
        timeout=60,
    )
    out = json.loads(r.stdout)
    assert r.returncode == 1 and not out["reachable"] and "Connection refused" in out["error"], out
