#!/usr/bin/env python3
"""Multi-rail integration tests on the emulated fabric (tests/lab/lab.sh).

Two hosts (network namespaces) joined by four rails (veth pairs, each shaped
to 2 Gbit/s); a kvfabric-bench target in host A, initiators in host B. Every
run checks the bytes it moved (--verify reads them back). Proves:
  - data moves across 4 rails byte-exact, WRITE and READ;
  - every rail carries a fair share of the traffic;
  - a rail whose link goes down mid-run does not fail the transfer, and the
    initiator's metrics endpoint shows the stall and the reroutes;
  - a READ moved off that rail never lands later, when the link comes back,
    in a buffer its caller has reused (kvfabric-lab-late-landing).

Needs root and network namespaces: exits 77 (ctest's skip code) with the
reason otherwise. Usage: lab_test.py --build BUILD_DIR
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
LAB = os.path.join(HERE, "lab.sh")
RAILS = 4
RATE = "2gbit"
PORT = 17300
METRICS_PORT = 17390
BUILD = None
ENV = dict(os.environ, KVF_LAB_PREFIX="kvftest%d" % os.getpid())


def lab(*args, check=True):
    return subprocess.run([LAB, *args], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, check=check)


def bench():
    return os.path.join(BUILD, "tools", "kvfabric-bench")


class Target:
    """A kvfabric-bench target serving every rail of host A."""

    def __init__(self, extra_env=None):
        devices = ",".join("a%d" % i for i in range(RAILS))
        self.proc = subprocess.Popen(
            [
                LAB,
                "exec",
                "A",
                "env",
                *["%s=%s" % kv for kv in (extra_env or {}).items()],
                bench(),
                "--mode=target",
                "--protocol=tcp",
                "--nic_filter=" + devices,
                "--local_server_name=10.77.0.1:%d" % PORT,
                "--buffer_size=%d" % (256 << 20),
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.time() + 30
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"--segment_id=(\S+)", line)
            if m:
                self.segment = m.group(1)
                return
        self.proc.kill()
        self.proc.wait()
        raise RuntimeError("target did not start in host A: " + self.proc.stderr.read()[-2000:])

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.communicate()


def initiate(segment, op, block, duration, extra_env=None):
    """Runs an initiator in host B over every rail; returns its JSON point."""
    devices = ",".join("b%d" % i for i in range(RAILS))
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        cmd = [
            LAB,
            "exec",
            "B",
            "env",
            *["%s=%s" % kv for kv in (extra_env or {}).items()],
            bench(),
            "--mode=initiator",
            "--protocol=tcp",
            "--nic_filter=" + devices,
            "--local_server_name=10.77.0.2:0",
            "--segment_id=" + segment,
            "--operation=" + op,
            "--block_size=%d" % block,
            "--batch_size=32",
            "--threads=2",
            "--duration=%g" % duration,
            "--verify",
            "--json_out=" + out.name,
        ]
        r = subprocess.run(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError("initiator failed (%d): %s\n%s" % (r.returncode, r.stdout[-1000:], r.stderr[-3000:]))
        with open(out.name) as f:
            doc = json.load(f)
    assert len(doc["points"]) == 1, doc
    point = doc["points"][0]
    point["stderr"] = r.stderr
    return point


def closes_connections():
    """Whether this build's tcp rails close a stalled rail's connections before
    its operations move (KVF_CLOSE_CONNECTIONS 'auto': libfabric 1.18 on)."""
    tool = os.path.join(BUILD, "tests", "kvfabric-lab-late-landing")
    out = subprocess.run([tool, "closes-connections"], stdout=subprocess.PIPE, text=True, check=True).stdout
    return out.strip() == "yes"


def scrape(host, port):
    """The /metrics text of the endpoint on 127.0.0.1:port inside `host`."""
    code = (
        "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:%d/metrics', timeout=5)"
        ".read().decode())" % port
    )
    return lab("exec", host, sys.executable, "-c", code).stdout


def sample(text, name, **labels):
    """The sum of the samples of `name` whose labels include `labels`, or None."""
    total = None
    for line in text.splitlines():
        if not (line.startswith(name + "{") or line.startswith(name + " ")):
            continue
        if all('%s="%s"' % kv in line for kv in labels.items()):
            total = (total or 0) + float(line.rsplit(" ", 1)[1])
    return total


class MultiRailTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        lab("up", "--rails", str(RAILS), "--rates", RATE)

    @classmethod
    def tearDownClass(cls):
        lab("down", check=False)

    def setUp(self):
        # A fresh target per test: no test sees another's traffic.
        self.target = Target()

    def tearDown(self):
        self.target.stop()

    def check_spread(self, point):
        total = sum(point["rail_bytes"])
        self.assertGreater(total, 0)
        for i, b in enumerate(point["rail_bytes"]):
            # Least-loaded choice on equal rails: each near a quarter.
            self.assertGreater(b, total * 0.15, "rail %d carried %d of %d bytes: %s" % (i, b, total, point))

    def test_write_moves_every_byte_over_every_rail(self):
        p = initiate(self.target.segment, "write", 1 << 20, 2)
        self.assertEqual(p["verify"], "verified")
        self.assertEqual(p["rails"], RAILS)
        self.check_spread(p)

    def test_read_moves_every_byte_over_every_rail(self):
        p = initiate(self.target.segment, "read", 64 << 10, 2)
        self.assertEqual(p["verify"], "verified")
        self.check_spread(p)

    def test_rails_near_the_buffer_carry_its_traffic(self):
        # A topology file puts b0, b1 on NUMA node 0 and b2, b3 on node 1;
        # the bench registers its buffer at cpu:0, so rails 2 and 3 idle.
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
            json.dump({"nics": {"b0": {"numa": 0}, "b1": {"numa": 0}, "b2": {"numa": 1}, "b3": {"numa": 1}}}, f)
        try:
            p = initiate(self.target.segment, "write", 1 << 20, 1.5, {"KVF_TOPOLOGY_FILE": f.name})
        finally:
            os.unlink(f.name)
        self.assertEqual(p["verify"], "verified")
        b = p["rail_bytes"]
        self.assertGreater(b[0], 0, p)
        self.assertGreater(b[1], 0, p)
        # The read-back of --verify may use any rail; the timed run may not.
        self.assertLess(b[2] + b[3], (b[0] + b[1]) * 0.05, p)

    def test_a_request_with_no_rail_pair_holding_its_memory_is_refused_with_the_reason(self):
        # Near-only registration on both hosts, with topologies that put the
        # two buffers behind different NICs: the initiator's cpu:0 buffer on
        # b2, b3, the target's on a0, a1. Over tcp a rail reaches only its
        # twin subnet, so no pair holds both ends: refused before posting,
        # naming the rails of each side.
        self.target.stop()
        with (
            tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as ft,
            tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as fi,
        ):
            json.dump({"nics": {"a0": {"numa": 0}, "a1": {"numa": 0}, "a2": {"numa": 1}, "a3": {"numa": 1}}}, ft)
            json.dump({"nics": {"b0": {"numa": 1}, "b1": {"numa": 1}, "b2": {"numa": 0}, "b3": {"numa": 0}}}, fi)
        try:
            self.target = Target({"KVF_TOPOLOGY_FILE": ft.name})
            with self.assertRaises(AssertionError) as refused:
                initiate(self.target.segment, "write", 1 << 20, 0.5, {"KVF_TOPOLOGY_FILE": fi.name})
            self.assertIn("no rail pair holds this memory on both ends", str(refused.exception))
            self.assertIn("registered on rails {2,3}", str(refused.exception))
            self.assertIn("on its rails {0,1}", str(refused.exception))
            # Registered on every rail, the same buffer moves (on rails 0 and 1).
            p = initiate(
                self.target.segment, "write", 1 << 20, 0.5, {"KVF_TOPOLOGY_FILE": fi.name, "KVF_REGISTER_RAILS": "all"}
            )
            self.assertEqual(p["verify"], "verified")
            self.assertEqual(p["rail_bytes"][2] + p["rail_bytes"][3], 0, p)
        finally:
            os.unlink(ft.name)
            os.unlink(fi.name)

    def test_rail_link_down_mid_run_does_not_fail_the_transfer(self):
        # Rail 2's link goes down 3 s into a 6 s run and stays down: its
        # in-flight work must move to the other rails (stall detection at
        # 500 ms) and every byte still arrive. (Not sooner: on a loaded host
        # rail 2 may not carry its first bytes for over a second, and a cut
        # before the rail is in use tests nothing.)
        # The initiator serves its metrics in host B; scraped 2 s after the
        # cut (rail 2 stays out of service for KVF_RAIL_RETRY_MS, 5 s).
        scraped = {}

        def cut():
            time.sleep(3.0)
            lab("link", "a2", "down")
            time.sleep(2.0)
            scraped["text"] = scrape("B", METRICS_PORT)

        t = threading.Thread(target=cut)
        t.start()
        try:
            p = initiate(
                self.target.segment,
                "write",
                1 << 20,
                6,
                {"KVF_RAIL_STALL_MS": "500", "KVF_METRICS_LISTEN": "127.0.0.1:%d" % METRICS_PORT},
            )
        finally:
            t.join()
            lab("link", "a2", "up")
        self.assertEqual(p["verify"], "verified")
        m = scraped.get("text", "")
        self.assertGreaterEqual(sample(m, "kvfabric_rail_stalls_total", rail="2") or 0, 1, m)
        self.assertEqual(sample(m, "kvfabric_rail_in_service", rail="2"), 0, m)
        self.assertEqual(sample(m, "kvfabric_rail_in_service"), RAILS - 1, m)
        # From libfabric 1.18 the stalled rail's operations in flight have
        # their connection closed: they fail, and move as failed operations
        # do. Before it (KVF_CLOSE_CONNECTIONS=auto) they move as stalled.
        if closes_connections():
            self.assertGreater(sample(m, "kvfabric_reroutes_total", reason="failed") or 0, 0, m)
            self.assertRegex(p["stderr"], r"closed the connection to .* its rail stalled \(KVF_RAIL_STALL_MS\)")
        else:
            self.assertGreater(sample(m, "kvfabric_reroutes_total", reason="stalled") or 0, 0, m)
        for r in (0, 1, 3):
            self.assertEqual(sample(m, "kvfabric_rail_stalls_total", rail=str(r)), 0, m)
        self.assertEqual(sample(m, "kvfabric_request_failures_total"), None, "no request failed: " + m)
        self.assertIn("rail 2 (tcp;ofi_rxm b2): nothing completed", p["stderr"])
        total = sum(p["rail_bytes"])
        # The rail moved its share until the cut, then (nearly) nothing.
        self.assertLess(p["rail_bytes"][2], total * 0.2, p)
        self.assertGreater(p["rail_bytes"][2], 0, p)

    def test_a_read_moved_off_a_stalled_rail_never_lands_later(self):
        # The initiator READs 64 MiB over the 4 rails again and again; rail
        # 2's link goes down, the rail stalls (500 ms) and its READs move to
        # the others, so the request completes. The initiator then reuses
        # its buffer (fills it with 0xEE); the link comes back, and nothing
        # of the READs that were on rail 2 may land in it. Unless the engine
        # closes a stalled rail's connections, they do when TCP retransmits.
        # It closes them from libfabric 1.18 (KVF_CLOSE_CONNECTIONS=auto):
        # 1.17's tcp provider crashes closing a connection while a READ's
        # bytes arrive, as they do here, so there the hazard stays
        # (docs/design/engine-failures.md, "libfabric 1.17's tcp provider and KVF_CLOSE_CONNECTIONS").
        if not closes_connections():
            self.skipTest(
                "libfabric before 1.18: a stalled rail's READs move without their connection closed "
                "(KVF_CLOSE_CONNECTIONS=auto), and may land later"
            )
        tool = os.path.join(BUILD, "tests", "kvfabric-lab-late-landing")

        def nics(h):
            return ",".join("%s%d" % (h, i) for i in range(RAILS))

        target = subprocess.Popen(
            [LAB, "exec", "A", tool, "target", nics("a"), "10.77.0.1:%d" % (PORT + 1)],
            env=ENV,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        initiator = None
        try:
            line = target.stdout.readline()
            self.assertTrue(line.startswith("segment "), line + target.stderr.read()[-2000:] if not line else line)
            segment = line.split()[1]
            initiator = subprocess.Popen(
                [
                    LAB,
                    "exec",
                    "B",
                    "env",
                    "KVF_RAIL_STALL_MS=500",
                    tool,
                    "initiator",
                    nics("b"),
                    "10.77.0.2:0",
                    segment,
                ],
                env=ENV,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            time.sleep(1.0)  # its READs run on every rail
            lab("link", "a2", "down")
            try:
                line = initiator.stdout.readline()
                self.assertEqual(line.strip(), "reused", initiator.stderr.read()[-3000:] if not line else line)
            finally:
                lab("link", "a2", "up")
            initiator.stdin.write("up\n")
            initiator.stdin.flush()
            out, err = initiator.communicate(timeout=60)
            self.assertEqual(initiator.returncode, 0, err[-3000:])
            m = re.match(r"late (\d+) wrong (\d+)", out.strip())
            self.assertIsNotNone(m, out + err[-3000:])
            self.assertEqual(int(m.group(2)), 0, "READs got wrong bytes before the reuse")
            self.assertEqual(
                int(m.group(1)), 0, "bytes landed in the reused buffer after their READ completed: " + err[-3000:]
            )
            self.assertRegex(
                err, r"closed the connection to .* its rail stalled", "the stalled rail closed no connection"
            )
        finally:
            for p in (initiator, target):
                if p is not None and p.poll() is None:
                    p.kill()
                    p.communicate()


def main():
    global BUILD
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", required=True, help="the CMake build directory (holds tools/kvfabric-bench)")
    args, rest = ap.parse_known_args()
    BUILD = os.path.abspath(args.build)
    # lab.sh itself decides whether this machine can build the lab.
    r = subprocess.run(
        [LAB, "up", "--rails", "1", "--rates", "none"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    lab("down", check=False)
    if r.returncode == 77:
        print(r.stderr.strip(), file=sys.stderr)
        return 77
    if r.returncode != 0:
        print("lab: could not build the emulated fabric:\n" + r.stderr, file=sys.stderr)
        return 1
    prog = unittest.main(argv=[sys.argv[0], "-v", *rest], exit=False)
    return 0 if prog.result.wasSuccessful() else 1


if __name__ == "__main__":
    sys.exit(main())
