#!/usr/bin/env python3
"""kvfabric soak: a randomized multi-process run that checks every byte.

The driver starts TARGETS target processes (tcp and shm mixed, fixed names so
a restart keeps its name) and INITIATORS initiator processes. Each initiator
owns a slice of every target's buffer and, for DURATION seconds, issues
random batches (sizes 4 KiB to 4 MiB, WRITE then READ-back, or READ-verify of
what it wrote before) against random targets, keeping a shadow copy of what
each owned slice must hold. Meanwhile the driver kills a random target every
RESTART_EVERY seconds (SIGKILL) and restarts it under the same name.

A failed request to a target is an injected failure when a kill of that
target falls within its time window; any other failure is an error. After a
failure the initiator rewrites its whole slice of that target (a restarted
target lost it) before verifying again. Every read is compared with the
shadow: a difference is a data error.

Targets and initiators share a secret (KVF_AUTH_TOKEN, random per run unless
--auth_token gives one). An intruder process, with a wrong token or none,
keeps asking random targets for their segment, a probe or a notification
throughout the run: each attempt must be refused (PermissionDeniedError).

Alongside, for the same DURATION, store traffic (store_driver.py, store_soak.py): STORE_NODES
kvfabric.Store nodes (tcp and auto mixed) with small pools over a metadata
server, STORE_CLIENTS client processes of THREADS threads each doing random
batch puts, gets, exists, removals, pins and audits of pages derived from
(key, version), more of them than the pools hold (so pages are evicted); the
driver kills a random node every STORE_RESTART_EVERY seconds (SIGKILL) and
restarts it under its name, and every 6 s has a new node join or one that
joined leave. Every GET's bytes must be exactly a version put for that key,
and not one superseded before the GET began unless placement was moving (a
node down or just back); per-key errors, stale pages and lost pins must fall
around a membership change, refusals with pinned pages while pins are held;
every acknowledged page the store no longer has must have been evicted or
lost with its node, by the nodes' page ledgers.

The run fails unless errors and data errors are both 0, no intruder attempt
was admitted, and some were refused; and, for the store, no wrong bytes, no
lost page, no unexplained issue, some hits and some evictions.

    python tools/soak/soak.py --duration 120 --json_out soak.json
"""

from __future__ import annotations

import argparse
import json
import os
import random
import secrets
import signal
import subprocess
import sys
import time

import store_driver  # this directory; puts tools/common on the path
from ports import free_port  # tools/common

MiB = 1 << 20
KVF_TIMEOUT_MS = 2000


# -- target ----------------------------------------------------------------
def run_target(protocol: str, size: int, name: str) -> None:
    import numpy as np

    import kvfabric

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # before the engine's threads, which inherit it
    e = kvfabric.Engine(
        local_server_name=name,
        protocol=protocol,
        settings={"KVF_TRANSFER_TIMEOUT_MS": KVF_TIMEOUT_MS, "KVF_LOG_LEVEL": "error"},
    )
    buf = np.zeros(size, dtype=np.uint8)
    e.register(buf)
    print(json.dumps({"name": e.name, "addr": int(buf.ctypes.data)}), flush=True)
    signal.sigwait({signal.SIGTERM})
    e.close()


# -- initiator ---------------------------------------------------------------
def run_initiator(index: int, count: int, targets: list, duration: float, seed: int, out_path: str) -> None:
    import numpy as np

    import kvfabric

    rng = random.Random(seed)
    e = kvfabric.Engine(protocol="auto", settings={"KVF_TRANSFER_TIMEOUT_MS": KVF_TIMEOUT_MS, "KVF_LOG_LEVEL": "off"})
    slice_len = targets[0]["size"] // count
    local = np.zeros(2 * 8 * MiB, dtype=np.uint8)
    e.register(local)
    shadow = {t["name"]: np.zeros(slice_len, dtype=np.uint8) for t in targets}
    dirty = {t["name"]: True for t in targets}  # slice content unknown: rewrite first
    stats = {"ops": 0, "bytes": 0, "failures": [], "data_errors": 0, "resyncs": 0}

    def base_of(t):
        return t["addr"] + index * slice_len

    def transfer(t, reqs):
        t0 = time.monotonic()
        try:
            e.submit(reqs, t["name"]).wait()
            return True
        except kvfabric.KvfabricError as err:
            stats["failures"].append(
                {"target": t["name"], "start": t0, "end": time.monotonic(), "error": str(err)[:300]}
            )
            dirty[t["name"]] = True
            return False

    def resync(t) -> bool:
        try:
            bufs = e.buffers(t["name"])  # a restarted target has a new buffer
            if not bufs:  # restarted and serving, but its buffer not registered yet
                raise kvfabric.NotFoundError(f"{t['name']} has no registered buffer yet", 2)
            t["addr"] = bufs[0].addr
        except kvfabric.KvfabricError as err:
            stats["failures"].append(
                {"target": t["name"], "start": time.monotonic(), "end": time.monotonic(), "error": str(err)[:300]}
            )
            return False
        """Rewrites the whole owned slice with fresh bytes."""
        data = np.frombuffer(rng.randbytes(slice_len), dtype=np.uint8)
        step = 8 * MiB
        for off in range(0, slice_len, step):
            n = min(step, slice_len - off)
            local[:n] = data[off : off + n]
            if not transfer(t, [kvfabric.Request(kvfabric.Op.WRITE, local.ctypes.data, base_of(t) + off, n)]):
                return False
        shadow[t["name"]][:] = data
        dirty[t["name"]] = False
        stats["resyncs"] += 1
        return True

    end = time.monotonic() + duration
    while time.monotonic() < end:
        t = rng.choice(targets)
        if dirty[t["name"]]:
            if not resync(t):
                time.sleep(0.05)
            continue
        nreq = rng.randint(1, 8)
        spans, total = [], 0
        for _ in range(nreq):
            n = rng.choice([4096, 65536, 256 << 10, MiB, 4 * MiB])
            n = min(n, 8 * MiB - total)
            if n <= 0:
                break
            # Requests of one batch may run in any order: writes to
            # overlapping target ranges would have no defined result.
            for _ in range(20):
                off = rng.randrange(0, slice_len - n + 1)
                if all(off + n <= o or o + m <= off for _, o, m in spans):
                    break
            else:
                break
            spans.append((total, off, n))
            total += n
        if rng.random() < 0.5:
            # WRITE random bytes, then READ them back into the other half of local.
            data = np.frombuffer(rng.randbytes(total), dtype=np.uint8)
            local[:total] = data
            w = [
                kvfabric.Request(kvfabric.Op.WRITE, local.ctypes.data + lo, base_of(t) + off, n) for lo, off, n in spans
            ]
            if not transfer(t, w):
                continue
            for lo, off, n in spans:
                shadow[t["name"]][off : off + n] = local[lo : lo + n]
        r = [
            kvfabric.Request(kvfabric.Op.READ, local.ctypes.data + 8 * MiB + lo, base_of(t) + off, n)
            for lo, off, n in spans
        ]
        if not transfer(t, r):
            continue
        for lo, off, n in spans:
            got = local[8 * MiB + lo : 8 * MiB + lo + n]
            want = shadow[t["name"]][off : off + n]
            if not np.array_equal(got, want):
                stats["data_errors"] += 1
                bad = int(np.argmax(got != want))
                print(
                    f"initiator {index}: DATA ERROR at {t['name']} slice offset {off} length {n}: first difference "
                    f"at +{bad}, {int(np.count_nonzero(got != want))} bytes differ (t={time.monotonic():.3f})",
                    file=sys.stderr,
                )
        stats["ops"] += 1
        stats["bytes"] += 2 * total
    e.close()
    with open(out_path, "w") as f:
        json.dump(stats, f)


# -- intruder ----------------------------------------------------------------
def run_intruder(targets: list, duration: float, seed: int, out_path: str) -> None:
    """Engines without the cluster's secret (a wrong one, or none) ask the
    targets for what only members may have; every answer must be a refusal."""
    import kvfabric

    rng = random.Random(seed)
    engines = {
        "wrong token": kvfabric.Engine(
            protocol="tcp", settings={"KVF_AUTH_TOKEN": "not-" + secrets.token_hex(8), "KVF_LOG_LEVEL": "off"}
        ),
        "no token": kvfabric.Engine(protocol="tcp", settings={"KVF_AUTH_TOKEN": "", "KVF_LOG_LEVEL": "off"}),
    }
    stats = {"attempts": 0, "refused": 0, "unreachable": 0, "admitted": [], "other_errors": []}
    calls = {
        "open": lambda e, n: e.open(n),
        "probe": lambda e, n: e.probe(n),
        "notify": lambda e, n: e.notify(n, b"let me in"),
    }
    end = time.monotonic() + duration
    while time.monotonic() < end:
        who = rng.choice(list(engines))
        what = rng.choice(list(calls))
        name = rng.choice(targets)["name"]
        stats["attempts"] += 1
        try:
            calls[what](engines[who], name)
            stats["admitted"].append({"who": who, "call": what, "target": name, "time": time.monotonic()})
        except kvfabric.PermissionDeniedError:
            stats["refused"] += 1
        except kvfabric.NetworkError:  # the target is being restarted
            stats["unreachable"] += 1
        except kvfabric.KvfabricError as err:
            stats["other_errors"].append({"who": who, "call": what, "target": name, "error": str(err)[:300]})
        time.sleep(0.05)
    for e in engines.values():
        e.close()
    with open(out_path, "w") as f:
        json.dump(stats, f)


# -- driver ------------------------------------------------------------------
def remove_shm_regions(pid: int) -> None:
    """What a killed shm process left in /dev/shm."""
    for f in os.listdir("/dev/shm"):
        if f.startswith(f"{pid}:"):
            try:
                os.unlink(os.path.join("/dev/shm", f))
            except OSError:
                pass


def start_target(protocol, size, name):
    p = subprocess.Popen(
        [sys.executable, __file__, "--role", "target", "--protocol", protocol, "--size", str(size), "--name", name],
        stdout=subprocess.PIPE,
        text=True,
    )
    line = p.stdout.readline()
    if not line:
        raise RuntimeError(f"target {name} did not start")
    return p, json.loads(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--duration", type=float, default=120)
    ap.add_argument("--targets", type=int, default=3)
    ap.add_argument("--initiators", type=int, default=2)
    ap.add_argument("--restart_every", type=float, default=10)
    ap.add_argument("--size", type=int, default=64 * MiB, help="each target's buffer")
    ap.add_argument("--seed", type=int, default=int(time.time()))
    ap.add_argument("--json_out")
    ap.add_argument("--store_nodes", type=int, default=3, help="store node processes (0: no store traffic)")
    ap.add_argument("--store_clients", type=int, default=2)
    ap.add_argument("--store_threads", type=int, default=2, help="threads of each store client")
    ap.add_argument("--store_pool", type=int, default=16 * MiB, help="each store node's pool")
    ap.add_argument("--store_keys", type=int, default=100, help="keys of each store client")
    ap.add_argument("--store_restart_every", type=float, default=9)
    ap.add_argument("--auth_token", default="", help="KVF_AUTH_TOKEN of targets and initiators (default: random)")
    ap.add_argument("--role", default="driver", help=argparse.SUPPRESS)
    ap.add_argument("--protocol", help=argparse.SUPPRESS)
    ap.add_argument("--name", help=argparse.SUPPRESS)
    ap.add_argument("--index", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--targets_json", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.role == "target":
        run_target(a.protocol, a.size, a.name)
        return 0
    if a.role == "initiator":
        run_initiator(a.index, a.initiators, json.loads(a.targets_json), a.duration, a.seed, a.out)
        return 0
    if a.role == "intruder":
        run_intruder(json.loads(a.targets_json), a.duration, a.seed, a.out)
        return 0

    # Every process of the cluster has the secret through its environment
    # (not its command line); the intruder overrides it in its settings.
    os.environ["KVF_AUTH_TOKEN"] = a.auth_token or secrets.token_hex(16)
    rng = random.Random(a.seed)
    protos = ["tcp", "shm"]
    targets, procs = [], {}
    for i in range(a.targets):
        name = f"127.0.0.1:{free_port()}"
        proto = protos[i % 2]
        p, info = start_target(proto, a.size, name)
        procs[name] = (p, proto)
        targets.append({"name": name, "addr": info["addr"], "size": a.size, "protocol": proto})
    outs = [f"/tmp/kvf-soak-{os.getpid()}-{i}.json" for i in range(a.initiators)]
    inits = [
        subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--role",
                "initiator",
                "--index",
                str(i),
                "--initiators",
                str(a.initiators),
                "--targets_json",
                json.dumps(targets),
                "--duration",
                str(a.duration),
                "--seed",
                str(a.seed + i),
                "--out",
                outs[i],
            ]
        )
        for i in range(a.initiators)
    ]
    intruder_out = f"/tmp/kvf-soak-{os.getpid()}-intruder.json"
    intruder = subprocess.Popen(
        [
            sys.executable,
            __file__,
            "--role",
            "intruder",
            "--targets_json",
            json.dumps(targets),
            "--duration",
            str(max(1.0, a.duration - 3)),
            "--seed",
            str(a.seed - 1),
            "--out",
            intruder_out,
        ],
        env={k: v for k, v in os.environ.items() if k != "KVF_AUTH_TOKEN"},
    )
    store = None
    kills = []  # (target name, kill time, back-up time)
    t_end = time.monotonic() + a.duration
    next_kill = time.monotonic() + a.restart_every
    try:
        if a.store_nodes:  # the store's traffic ends with the rest: its start-up comes out of its share
            store = store_driver.Traffic(
                a.store_nodes,
                a.store_clients,
                a.store_threads,
                a.store_pool,
                a.store_keys,
                t_end,
                a.store_restart_every,
                a.seed,
                f"/tmp/kvf-soak-{os.getpid()}",
            )
        while time.monotonic() < t_end:
            time.sleep(0.1)
            if store:
                store.tick(time.monotonic(), t_end - 3, remove_shm_regions)
            if time.monotonic() >= next_kill and time.monotonic() < t_end - 3:
                name = rng.choice(list(procs))
                p, proto = procs[name]
                killed = time.monotonic()
                p.kill()
                p.wait()
                remove_shm_regions(p.pid)
                np_, info = start_target(proto, a.size, name)
                procs[name] = (np_, proto)
                kills.append((name, killed, time.monotonic()))
                next_kill = time.monotonic() + a.restart_every
        for p in inits:
            p.wait(timeout=a.duration + 120)
        intruder.wait(timeout=120)
        if store:
            store.wait(timeout=120)
    finally:
        if store:
            store.stop()
        if intruder.poll() is None:
            intruder.kill()
            intruder.wait()
        for p, _ in procs.values():
            p.terminate()
        for p, _ in procs.values():
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()

    total = {"ops": 0, "bytes": 0, "data_errors": 0, "resyncs": 0, "failures_injected": 0, "errors": 0}
    unexplained = []
    grace = KVF_TIMEOUT_MS / 1000 + 1
    for path in outs:
        with open(path) as f:
            s = json.load(f)
        os.unlink(path)
        for k in ("ops", "bytes", "data_errors", "resyncs"):
            total[k] += s[k]
        for fail in s["failures"]:
            explained = any(
                n == fail["target"]
                and fail["start"] - grace <= killed
                and fail["end"] + grace >= killed
                or n == fail["target"]
                and killed <= fail["start"] <= back + grace
                for n, killed, back in kills
            )
            if explained:
                total["failures_injected"] += 1
            else:
                total["errors"] += 1
                unexplained.append(fail)
    intruder_stats = {"attempts": 0, "refused": 0, "unreachable": 0, "admitted": [], "other_errors": []}
    if os.path.exists(intruder_out):
        with open(intruder_out) as f:
            intruder_stats = json.load(f)
        os.unlink(intruder_out)
    total.update(
        {
            "restarts": len(kills),
            "duration_s": a.duration,
            "targets": a.targets,
            "initiators": a.initiators,
            "seed": a.seed,
            "initiator_exit_codes": [p.returncode for p in inits],
            "auth_token_set": True,
            "intruder_attempts": intruder_stats["attempts"],
            "intruder_refused": intruder_stats["refused"],
            "intruder_unreachable": intruder_stats["unreachable"],
            "intruder_admitted": len(intruder_stats["admitted"]),
            "intruder_other_errors": len(intruder_stats["other_errors"]),
            "intruder_exit_code": intruder.returncode,
        }
    )
    store_figures, store_good = store.result() if store else ({}, True)
    print(
        f"soak: {total['ops']} verified operations, {total['bytes'] / 1e9:.2f} GB moved, {len(kills)} restarts, "
        f"{total['failures_injected']} injected failures, {total['errors']} unexplained errors, "
        f"{total['data_errors']} data errors (seed {a.seed}); with KVF_AUTH_TOKEN set, "
        f"{total['intruder_refused']} of {total['intruder_attempts']} intruder attempts refused, "
        f"{total['intruder_admitted']} admitted, {total['intruder_unreachable']} unreachable (target restarting), "
        f"{total['intruder_other_errors']} other errors"
        + (f"; {store_driver.summary_line(store_figures)}" if store else "")
    )
    for fail in unexplained[:10]:
        print(f"  unexplained: {fail}")
    for issue in store_figures.get("unexplained", [])[:10]:
        print(f"  store, unexplained: {issue}")
    for wrong in store_figures.get("wrong_bytes", [])[:10]:
        print(f"  store, wrong bytes: {wrong}")
    for page in store_figures.get("lost_pages", [])[:10]:  # with the ledger's events followed
        print(f"  store, lost: {page}")
    if store_figures.get("node_logs"):
        print(f"  store, logs kept: {' '.join(store_figures['node_logs'])}")
    for x in (intruder_stats["admitted"] + intruder_stats["other_errors"])[:10]:
        print(f"  intruder: {x}")
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(
                {
                    **total,
                    "unexplained": unexplained,
                    "kills": kills,
                    "intruder_admitted_calls": intruder_stats["admitted"],
                    "intruder_other_error_calls": intruder_stats["other_errors"],
                    "store": store_figures,
                },
                f,
                indent=1,
            )
    ok = (
        total["data_errors"] == 0
        and total["errors"] == 0
        and all(c == 0 for c in total["initiator_exit_codes"])
        and total["ops"] > 0
        and total["intruder_admitted"] == 0
        and total["intruder_other_errors"] == 0
        and total["intruder_refused"] > 0
        and intruder.returncode == 0
        and store_good
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
