#!/usr/bin/env python3
"""Registration time on the emulated multi-rail fabric (tests/lab/lab.sh):
a kvfabric-bench initiator in host B (4 rails, a topology file putting b0
and b1 on NUMA node 0, its buffer at cpu:0) registers --buffer_size bytes
under KVF_REGISTER_RAILS near|all x KVF_REGISTER_PARALLEL 1|0, the four
alternating round after round; prints the median register_ms of each.
It measures what threads cost where registering is a table insert (tcp):
the reason tcp and shm register on the caller's thread whatever
KVF_REGISTER_PARALLEL says, so on tcp the two PARALLEL rows match; on a
verbs or EFA lab they differ. Needs root. Usage: lab_register.py --build BUILD [--bytes N] [--rounds N]
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
LAB = os.path.join(HERE, "..", "..", "tests", "lab", "lab.sh")
ENV = dict(os.environ, KVF_LAB_PREFIX="kvfreg%d" % os.getpid())


def lab(*args):
    subprocess.run([LAB, *args], env=ENV, check=True, stdout=subprocess.DEVNULL)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", required=True)
    ap.add_argument("--bytes", type=int, default=1 << 30)
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    bench = os.path.join(os.path.abspath(a.build), "tools", "kvfabric-bench")
    lab("up", "--rails", "4", "--rates", "2gbit")
    target = None
    try:
        target = subprocess.Popen(
            [
                LAB,
                "exec",
                "A",
                bench,
                "--mode=target",
                "--protocol=tcp",
                "--nic_filter=a0,a1,a2,a3",
                "--local_server_name=10.77.0.1:17400",
                "--buffer_size=%d" % (64 << 20),
            ],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        segment = None
        while segment is None:
            line = target.stdout.readline()
            if not line:
                sys.exit("target did not start")
            m = re.search(r"--segment_id=(\S+)", line)
            segment = m.group(1) if m else None
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as topo:
            json.dump({"nics": {"b0": {"numa": 0}, "b1": {"numa": 0}, "b2": {"numa": 1}, "b3": {"numa": 1}}}, topo)
        combos = [("near", "1"), ("all", "1"), ("near", "0"), ("all", "0")]
        times = {c: [] for c in combos}
        for r in range(a.rounds):
            for rails, par in combos:
                with tempfile.NamedTemporaryFile(suffix=".json") as out:
                    subprocess.run(
                        [
                            LAB,
                            "exec",
                            "B",
                            "env",
                            "KVF_TOPOLOGY_FILE=" + topo.name,
                            "KVF_REGISTER_RAILS=" + rails,
                            "KVF_REGISTER_PARALLEL=" + par,
                            "KVF_LOG_LEVEL=warn",
                            bench,
                            "--mode=initiator",
                            "--protocol=tcp",
                            "--nic_filter=b0,b1,b2,b3",
                            "--local_server_name=10.77.0.2:0",
                            "--segment_id=" + segment,
                            "--operation=write",
                            "--block_size=65536",
                            "--batch_size=1",
                            "--threads=1",
                            "--duration=0.05",
                            "--buffer_size=%d" % a.bytes,
                            "--json_out=" + out.name,
                        ],
                        env=ENV,
                        check=True,
                        stdout=subprocess.DEVNULL,
                        timeout=120,
                    )
                    times[(rails, par)].append(json.load(open(out.name))["points"][0]["register_ms"])
        os.unlink(topo.name)
        print(
            "registering %d MiB of host memory on a 4-rail host (2 rails near it), median of %d rounds:"
            % (a.bytes >> 20, a.rounds)
        )
        for (rails, par), v in times.items():
            print(
                "  KVF_REGISTER_RAILS=%-4s KVF_REGISTER_PARALLEL=%s  %8.3f ms  (all: %s)"
                % (rails, par, statistics.median(v), ", ".join("%.3f" % x for x in v))
            )
    finally:
        if target:
            target.terminate()
            target.wait()
        subprocess.run([LAB, "down"], env=ENV, stdout=subprocess.DEVNULL)


if __name__ == "__main__":
    main()
