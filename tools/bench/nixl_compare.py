#!/usr/bin/env python3
"""NIXL beside kvfabric: the same WRITEs, alternating, over tcp and shared memory.

A transfer is --requests WRITEs of --block bytes each from host memory of
one process to host memory of another on this host. NIXL (PyPI ``nixl`` and
``nixl-cu12``, installed without torch into --nixl_python's environment)
moves it with its UCX backend: ``UCX_TLS=tcp``, or shared memory with
``UCX_TLS=shm,self`` and ``ucx_error_handling_mode=none``; ``UCX_MODULES=^ib``
keeps UCX from loading its InfiniBand module. One NIXL transfer request
holds the --requests descriptors and is posted again as soon as it is done.
kvfabric-bench runs one thread with batches of --requests, over tcp and
shm, and the bare fabric (kvfabric-fabric-bench, --requests in flight) is
the ceiling of the same run. Runs alternate; medians of --reps.

Each side is a target process and an initiator process; NIXL's target
hands its agent metadata and buffer descriptors to the initiator through
this script (stdout, then stdin).
"""

import argparse
import base64
import json
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402

UCX_TLS = {"tcp": "tcp", "shm": "shm,self"}


def nixl_agent(name, proto):
    from nixl._api import nixl_agent as agent_class
    from nixl._api import nixl_agent_config

    agent = agent_class(name, nixl_agent_config(backends=[]))
    params = {"ucx_error_handling_mode": "none"} if proto == "shm" else {}
    agent.create_backend("UCX", params)
    return agent


def descs(agent, base, block, requests):
    return agent.get_xfer_descs([(base + i * block, block, 0) for i in range(requests)], "DRAM")


def role_target(a):
    import numpy as np

    agent = nixl_agent("target", a.proto)
    buf = np.zeros(a.block * a.requests, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    remote = agent.get_serialized_descs(descs(agent, buf.ctypes.data, a.block, a.requests))
    hello = {"meta": base64.b64encode(agent.get_agent_metadata()).decode(), "descs": base64.b64encode(remote).decode()}
    print(json.dumps(hello), flush=True)
    sys.stdin.read()  # serves until the initiator is done


def role_initiator(a):
    import numpy as np

    hello = json.loads(sys.stdin.readline())
    agent = nixl_agent("initiator", a.proto)
    buf = np.ones(a.block * a.requests, dtype=np.uint8)
    agent.register_memory([(buf.ctypes.data, buf.nbytes, 0, "")], "DRAM")
    peer = agent.add_remote_agent(base64.b64decode(hello["meta"]))
    remote = agent.deserialize_descs(base64.b64decode(hello["descs"]))
    handle = agent.initialize_xfer("WRITE", descs(agent, buf.ctypes.data, a.block, a.requests), remote, peer)

    def once():
        state = agent.transfer(handle)
        while state == "PROC":
            state = agent.check_xfer_state(handle)
        if state != "DONE":
            raise RuntimeError("NIXL transfer ended in " + state)

    once()  # connects
    moved, start = 0, time.perf_counter()
    cpu0 = time.process_time()
    until = start + a.duration
    while time.perf_counter() < until:
        once()
        moved += a.block * a.requests
    secs = time.perf_counter() - start
    cpu = time.process_time() - cpu0
    ops = moved // a.block
    print(json.dumps({"bytes_per_s": moved / secs, "cpu_us_per_op": 1e6 * cpu / max(ops, 1)}), flush=True)


def nixl_run(a, proto, block):
    env = dict(os.environ, UCX_TLS=UCX_TLS[proto], UCX_MODULES="^ib", NIXL_LOG_LEVEL="WARN")
    me = [a.nixl_python, os.path.abspath(__file__), "--proto", proto, "--block", str(block)]
    me += ["--requests", str(a.requests), "--duration", str(a.duration)]
    target = subprocess.Popen(
        me + ["--role", "target"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        hello = target.stdout.readline()
        if not hello:
            raise RuntimeError("the NIXL target did not start (is nixl installed in %s?)" % a.nixl_python)
        out = subprocess.run(
            me + ["--role", "initiator"],
            input=hello,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            timeout=120,
        )
        if out.returncode != 0:
            raise RuntimeError("NIXL initiator failed: " + out.stderr[-2000:])
        return json.loads(out.stdout.strip().splitlines()[-1])
    finally:
        target.stdin.close()
        target.wait(timeout=30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--role", choices=["target", "initiator"], help=argparse.SUPPRESS)
    ap.add_argument("--proto", default="tcp", help=argparse.SUPPRESS)
    ap.add_argument("--block", type=int, default=1 << 20, help=argparse.SUPPRESS)
    ap.add_argument("--build", default="build")
    ap.add_argument("--nixl_python", default="build/nixl-venv/bin/python")
    ap.add_argument("--protocols", default="tcp,shm")
    ap.add_argument("--blocks", default="65536,1048576")
    ap.add_argument("--requests", type=int, default=64, help="WRITEs per transfer (a batch)")
    ap.add_argument("--duration", type=float, default=2)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--json_out")
    a = ap.parse_args()
    if a.role == "target":
        return role_target(a)
    if a.role == "initiator":
        return role_initiator(a)
    # kvfabric-bench and the bare tool with compare.py's runs: one thread, batches of --requests.
    a.buffer = max(256 << 20, 2 * a.requests * max(int(b) for b in a.blocks.split(",")))
    a.batch, a.threads, a.queue_depth = a.requests, 1, a.requests
    a.verify, a.engine_set, a.transmit_complete = False, [], False
    rows = []
    print("%d WRITEs per transfer, %d x %g s runs alternating, medians; GB/s" % (a.requests, a.reps, a.duration))
    print("%-5s %8s %9s %9s %9s %9s" % ("proto", "block", "bare", "kvfabric", "NIXL", "kvf/NIXL"))
    for proto in a.protocols.split(","):
        for block in (int(b) for b in a.blocks.split(",")):
            got = {"bare": [], "kvfabric": [], "nixl": []}
            for _ in range(a.reps):
                got["bare"].append(compare.bare(a, proto, "write", block)["bytes_per_s"] / 1e9)
                got["kvfabric"].append(compare.engine(a, proto, "write", block)["bytes_per_s"] / 1e9)
                got["nixl"].append(nixl_run(a, proto, block)["bytes_per_s"] / 1e9)
            med = {k: statistics.median(v) for k, v in got.items()}
            rows.append({"protocol": proto, "block_size": block, "samples": got, "median": med})
            print(
                "%-5s %8d %9.2f %9.2f %9.2f %8.2fx"
                % (proto, block, med["bare"], med["kvfabric"], med["nixl"], med["kvfabric"] / med["nixl"])
            )
            sys.stdout.flush()
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump({"args": vars(a), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
