#!/usr/bin/env python3
"""kvfabric's store beside Mooncake Store on this host, back to back.

Both run the same shape: three node processes contributing memory pools and
one client process contributing none, tcp between them, pages of --page
bytes, a working set of --working_set pages that fits the pools, batch GET
into registered buffers, batch PUT from them, batch exists, each at 1 and 4
client threads. For every case the two alternate (kvfabric, Mooncake,
kvfabric, ...) --reps times, each a --warmup then a timed --duration window;
the table gives medians, with the lowest and highest window. Beside them, the bare engine READ of the same pages
from kvfabric's pools, measured by kvfabric-store-bench in the same run: the
ceiling.

kvfabric: build/tools/kvfabric-store-bench local --nodes 3 (nodes started per
case, the working set put, one bare READ window then one store window).

Mooncake: the PyPI wheel (--mooncake_package, pinned to --mooncake_version)
installed by this script into its own virtual environment (--mooncake_venv,
default BUILD/mooncake-venv), never into the project's. mooncake_master with
its embedded HTTP metadata server; three nodes, each a process calling
MooncakeDistributedStore.setup(global_segment_size=--pool) over tcp; one
client with global_segment_size 0 and its buffers registered
(register_buffer), calling batch_get_into, batch_upsert_from and
batch_is_exist. PUT is batch_upsert_from because batch_put_from of a key that
exists already moves no bytes and reports success; an upsert of a page of the
same size rewrites it in place, as kvfabric's put replaces a page. The
Mooncake cluster runs for the whole comparison; its CPU time while kvfabric's
windows run is measured and printed (it should be near zero: idle).

Verification: kvfabric checks every page a GET returns against the 128-bit
xxh3 checksum its node took (KVF_STORE_VERIFY, on). Mooncake checks nothing
by default; --mooncake_checksum sets MOONCAKE_STORE_CHECKSUM=1 (its CRC, put
and get) in every Mooncake process. Outside the windows, the Mooncake client
reads the whole working set back once after filling it and compares every
byte.

Needs network access for pip the first time (--skip_mooncake measures
kvfabric alone). The Mooncake processes log to BUILD/store-compare/.
"""

import argparse
import json
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import time

from compare import run_initiator  # this directory: runs a tool that prints one JSON line

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
from ports import free_port  # noqa: E402  (tools/common)

PACKAGE = "mooncake-transfer-engine-non-cuda"
VERSION = "0.3.13.post1"  # the version these figures were taken with


def wait_port(port, proc, what, timeout=30):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("%s exited (%d) before listening on %d" % (what, proc.returncode, port))
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("%s did not listen on %d within %d s" % (what, port, timeout))


def die_with_parent():
    """In a child before exec: SIGKILL when this script dies, so no Mooncake process outlives it."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def cpu_seconds(pid):
    """utime + stime of a process so far (Linux)."""
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---------------------------------------------------------------- Mooncake install


def mooncake_python(a):
    """The venv's python with the pinned wheel installed; None when it cannot be (the reason printed)."""
    venv = os.path.abspath(a.mooncake_venv)
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        if sys.version_info < (3, 10):
            print(
                "store_compare: the Mooncake wheels need Python 3.10 or later; this is %s" % sys.version.split()[0],
                file=sys.stderr,
            )
            return None
        r = subprocess.run([sys.executable, "-m", "venv", venv], capture_output=True, text=True)
        if r.returncode != 0:
            print(
                "store_compare: cannot create the virtual environment %s: %s" % (venv, r.stderr.strip()),
                file=sys.stderr,
            )
            return None
    show = subprocess.run([py, "-m", "pip", "show", a.mooncake_package], capture_output=True, text=True)
    installed = re.search(r"^Version: (\S+)", show.stdout, re.M)
    if installed and installed.group(1) == a.mooncake_version:
        return py
    spec = "%s==%s" % (a.mooncake_package, a.mooncake_version)
    print("store_compare: pip install %s into %s" % (spec, venv), file=sys.stderr)
    r = subprocess.run(
        [py, "-m", "pip", "install", "-q", "--disable-pip-version-check", spec], capture_output=True, text=True
    )
    if r.returncode != 0:
        print(
            "store_compare: Mooncake could not be installed (pip install %s failed; no network, or no wheel for "
            "this Python?):\n%s" % (spec, r.stderr.strip()[-1500:]),
            file=sys.stderr,
        )
        print(
            "store_compare: "
            + (
                "measuring kvfabric alone (--skip_mooncake)"
                if a.skip_mooncake
                else "nothing measured; --skip_mooncake measures kvfabric alone"
            ),
            file=sys.stderr,
        )
        return None
    return py


# ---------------------------------------------------------------- Mooncake processes (run in the venv)


def mooncake_node_main(argv):
    """A Mooncake node: contributes a segment until SIGTERM."""
    hostname, metadata, master, segment, local_buffer = argv
    # Blocked before Mooncake starts its threads, so they inherit the mask and sigwait gets the signal.
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM, signal.SIGINT})
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(hostname, metadata, int(segment), int(local_buffer), "tcp", "", master)
    print("READY %d" % rc, flush=True)
    if rc != 0:
        return 1
    signal.sigwait({signal.SIGTERM, signal.SIGINT})
    store.close()
    return 0


class Tally:
    def __init__(self):
        self.batches = self.keys = self.hits = self.bytes = 0
        self.errors = {}

    def add(self, other):
        self.batches += other.batches
        self.keys += other.keys
        self.hits += other.hits
        self.bytes += other.bytes
        for k, v in other.errors.items():
            self.errors[k] = self.errors.get(k, 0) + v


def mooncake_client_main(argv):
    """The Mooncake client: fills the working set, then runs the windows asked for on stdin (one JSON per line)."""
    import ctypes
    import mmap
    import random
    import threading

    hostname, metadata, master, page, working_set, max_threads, max_batch = argv
    page, working_set, max_threads, max_batch = int(page), int(working_set), int(max_threads), int(max_batch)
    from mooncake.store import MooncakeDistributedStore

    store = MooncakeDistributedStore()
    rc = store.setup(hostname, metadata, 0, 0, "tcp", "", master)  # contributes no memory
    if rc != 0:
        print(json.dumps({"error": "setup returned %d" % rc}), flush=True)
        return 1
    slab = max_batch * page  # per thread: one to put from, one to get into
    size = 2 * slab * max_threads
    region = mmap.mmap(-1, size)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    region[:] = b"\1" * size
    rc = store.register_buffer(base, size)
    if rc != 0:
        print(json.dumps({"error": "register_buffer returned %d" % rc}), flush=True)
        return 1
    store.remove_all(True)

    def key(i):
        return "ws-%d" % i

    def pattern(i):
        return i.to_bytes(8, "little") * (page // 8) + b"\xa5" * (page % 8)

    # The working set, each page the pattern of its index; then every page read back and compared.
    bad = 0
    for first in range(0, working_set, max_batch):
        idx = range(first, min(working_set, first + max_batch))
        for j, i in enumerate(idx):
            region[j * page : (j + 1) * page] = pattern(i)
        res = store.batch_put_from([key(i) for i in idx], [base + j * page for j in range(len(idx))], [page] * len(idx))
        bad += sum(1 for r in res if r != 0)
        res = store.batch_get_into(
            [key(i) for i in idx], [base + slab + j * page for j in range(len(idx))], [page] * len(idx)
        )
        for j, i in enumerate(idx):
            if res[j] != page or region[slab + j * page : slab + (j + 1) * page] != pattern(i):
                bad += 1
    print(json.dumps({"ready": True, "working_set": working_set, "not_back_exact": bad}), flush=True)

    def body(t, rng, op, batch, threads):
        src = base + 2 * slab * t
        dst = src + slab
        r = Tally()
        r.batches = 1
        r.keys = batch
        if op == "put":  # each thread its own keys: concurrent upserts of one key would preempt each other
            keys = [key(i) for i in rng.sample(range(t, working_set, threads), batch)]
            res = store.batch_upsert_from(keys, [src + j * page for j in range(batch)], [page] * batch)
            ok = [x == 0 for x in res]
        else:
            keys = [key(i) for i in rng.sample(range(working_set), batch)]
            if op == "get":
                res = store.batch_get_into(keys, [dst + j * page for j in range(batch)], [page] * batch)
                ok = [x == page for x in res]
            else:
                res = store.batch_is_exist(keys)
                ok = [x == 1 for x in res]
        for x, good in zip(res, ok):
            if good:
                r.hits += 1
                r.bytes += page if op != "exists" else 0
            else:
                r.errors[str(x)] = r.errors.get(str(x), 0) + 1
        return r

    for line in sys.stdin:
        ask = json.loads(line)
        if ask.get("quit"):
            break
        op, threads, batch = ask["op"], ask["threads"], ask["batch"]
        measuring, stop = threading.Event(), threading.Event()
        per = [Tally() for _ in range(threads)]

        def loop(t):
            rng = random.Random(t * 7919 + 1)
            while not stop.is_set():
                counted = measuring.is_set()
                r = body(t, rng, op, batch, threads)
                if counted and not stop.is_set():
                    per[t].add(r)

        workers = [threading.Thread(target=loop, args=(t,)) for t in range(threads)]
        for w in workers:
            w.start()
        time.sleep(ask["warmup"])
        measuring.set()
        t0 = time.perf_counter()
        time.sleep(ask["duration"])
        stop.set()
        seconds = time.perf_counter() - t0
        for w in workers:
            w.join()
        total = Tally()
        for r in per:
            total.add(r)
        print(
            json.dumps(
                {
                    "op": op,
                    "threads": threads,
                    "batch": batch,
                    "seconds": seconds,
                    "gbps": total.bytes / seconds / 1e9,
                    "keys_per_s": total.keys / seconds,
                    "keys": total.keys,
                    "hits": total.hits,
                    "batches": total.batches,
                    "failed_keys_by_code": total.errors,
                }
            ),
            flush=True,
        )
    store.unregister_buffer(base)
    store.close()
    return 0


# ---------------------------------------------------------------- the Mooncake cluster (from the main script)


class MooncakeCluster:
    def __init__(self, a, py):
        self.a, self.py = a, py
        self.procs = []  # (name, Popen, log file)
        self.client = None
        os.makedirs(a.logs, exist_ok=True)
        self.env = dict(os.environ)
        if a.mooncake_checksum:
            self.env["MOONCAKE_STORE_CHECKSUM"] = "1"
        for kv in a.mooncake_env:
            name, _, value = kv.partition("=")
            self.env[name] = value

    def _spawn(self, name, cmd, **kw):
        log = open(os.path.join(self.a.logs, name + ".log"), "w")
        p = subprocess.Popen(cmd, stderr=log, env=self.env, text=True, preexec_fn=die_with_parent, **kw)
        self.procs.append((name, p, log))
        return p

    def log_tail(self, name):
        try:
            with open(os.path.join(self.a.logs, name + ".log")) as f:
                return "".join(f.readlines()[-15:])
        except OSError:
            return ""

    def start(self):
        a = self.a
        rpc, http, metrics = free_port(), free_port(), free_port()
        master = os.path.join(os.path.dirname(self.py), "mooncake_master")
        m = self._spawn(
            "mooncake-master",
            [
                master,
                "--rpc_address=127.0.0.1",
                "--rpc_port=%d" % rpc,
                "--enable_http_metadata_server=true",
                "--http_metadata_server_host=127.0.0.1",
                "--http_metadata_server_port=%d" % http,
                "--metrics_host=127.0.0.1",
                "--metrics_port=%d" % metrics,
                "--enable_metric_reporting=false",
                "--logtostderr",
            ],
            stdout=subprocess.DEVNULL,
        )
        wait_port(rpc, m, "mooncake_master")
        wait_port(http, m, "mooncake_master's metadata server")
        meta, addr = "http://127.0.0.1:%d/metadata" % http, "127.0.0.1:%d" % rpc
        me = os.path.abspath(__file__)
        for n in range(a.nodes):
            p = self._spawn(
                "mooncake-node-%d" % n,
                [self.py, me, "_mooncake_node", "127.0.0.1", meta, addr, str(a.pool), str(a.node_buffer)],
                stdout=subprocess.PIPE,
            )
            line = p.stdout.readline().strip()
            if line != "READY 0":
                log = self.log_tail("mooncake-node-%d" % n)
                raise RuntimeError("Mooncake node %d did not start ('%s'):\n%s" % (n, line, log))
        self.client = self._spawn(
            "mooncake-client",
            [
                self.py,
                me,
                "_mooncake_client",
                "127.0.0.1",
                meta,
                addr,
                str(a.page),
                str(a.working_set),
                str(max(a.threads)),
                str(a.batch),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        ready = self._read_client()
        if ready.get("not_back_exact"):
            raise RuntimeError(
                "Mooncake returned %d of %d pages wrong or not at all after the fill"
                % (ready["not_back_exact"], a.working_set)
            )
        return ready

    def _read_client(self):
        line = self.client.stdout.readline()
        if not line:
            raise RuntimeError(
                "the Mooncake client exited (%s):\n%s" % (self.client.poll(), self.log_tail("mooncake-client"))
            )
        r = json.loads(line)
        if "error" in r:
            raise RuntimeError("the Mooncake client: %s\n%s" % (r["error"], self.log_tail("mooncake-client")))
        return r

    def window(self, op, threads, batch):
        a = self.a
        self.client.stdin.write(
            json.dumps({"op": op, "threads": threads, "batch": batch, "duration": a.duration, "warmup": a.warmup})
            + "\n"
        )
        self.client.stdin.flush()
        return self._read_client()

    def cpu(self):
        return sum(cpu_seconds(p.pid) for _, p, _ in self.procs if p.poll() is None)

    def stop(self):
        if self.client is not None and self.client.poll() is None:
            try:
                self.client.stdin.write(json.dumps({"quit": True}) + "\n")
                self.client.stdin.flush()
            except OSError:
                pass
        for name, p, log in reversed(self.procs):  # the client, the nodes, then the master
            if p.poll() is None and p is not self.client:
                p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                print("store_compare: %s did not stop in 15 s: killed" % name, file=sys.stderr)
                p.kill()
                p.wait()
            log.close()


# ---------------------------------------------------------------- kvfabric


def kvfabric_window(a, op, threads, batch):
    tool = os.path.join(a.build, "tools", "kvfabric-store-bench")
    return run_initiator(
        [
            tool,
            "local",
            "--nodes",
            str(a.nodes),
            "--protocol",
            "tcp",
            "--pool",
            str(a.pool),
            "--op",
            op,
            "--page",
            str(a.page),
            "--batch",
            str(batch),
            "--threads",
            str(threads),
            "--working_set",
            str(a.working_set),
            "--duration",
            "%g" % a.duration,
            "--warmup",
            "%g" % a.warmup,
            "--rounds",
            "1",
            "--json",
        ]
    )


# ---------------------------------------------------------------- main


def median(v):
    return statistics.median(v) if v else None


def ratio(x, y):
    return x / y if x is not None and y else None


def fmt(v, unit="GB/s"):
    """GB/s and ratios with two decimals, keys/s whole; "-" when not measured."""
    if v is None:
        return "-"
    return "%.0f" % v if unit == "keys/s" else "%.2f" % v


def spread(windows, unit="GB/s"):
    """The median and, with several windows, the lowest and highest."""
    if not windows:
        return "-"
    if len(windows) == 1:
        return fmt(windows[0], unit)
    return "%s (%s-%s)" % (fmt(median(windows), unit), fmt(min(windows), unit), fmt(max(windows), unit))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--reps", type=int, default=3, help="alternations per case (medians)")
    ap.add_argument("--duration", type=float, default=2, help="seconds measured per window")
    ap.add_argument("--warmup", type=float, default=0.5, help="seconds before each window is measured")
    ap.add_argument("--ops", default="get,put,exists")
    ap.add_argument("--threads", default="1,4", help="client threads, comma-separated")
    ap.add_argument("--page", type=int, default=128 << 10)
    ap.add_argument("--batch", type=int, default=32, help="keys per GET and PUT batch")
    ap.add_argument("--exists_batch", type=int, default=128, help="keys per exists batch")
    ap.add_argument("--working_set", type=int, default=2048, help="pages put before measuring")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--pool", type=int, default=512 << 20, help="bytes each node contributes")
    ap.add_argument("--node_buffer", type=int, default=16 << 20, help="a Mooncake node's local buffer")
    ap.add_argument("--mooncake_package", default=PACKAGE)
    ap.add_argument("--mooncake_version", default=VERSION)
    ap.add_argument("--mooncake_venv", help="default: BUILD/mooncake-venv")
    ap.add_argument(
        "--mooncake_checksum",
        action="store_true",
        help="MOONCAKE_STORE_CHECKSUM=1: Mooncake checks a CRC of every page too",
    )
    ap.add_argument(
        "--mooncake_env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an environment variable for every Mooncake process (repeatable), e.g. "
        "MC_TCP_LANES_PER_PEER=8; by default Mooncake runs with its own defaults",
    )
    ap.add_argument(
        "--skip_mooncake", action="store_true", help="when Mooncake cannot be installed, run kvfabric alone"
    )
    ap.add_argument("--json_out", help="every window of both, and the medians")
    a = ap.parse_args()
    a.threads = [int(t) for t in a.threads.split(",")]
    for kv in a.mooncake_env:
        if "=" not in kv:
            ap.error("--mooncake_env %s: NAME=VALUE" % kv)
    a.mooncake_venv = a.mooncake_venv or os.path.join(a.build, "mooncake-venv")
    a.logs = os.path.join(a.build, "store-compare")
    if a.working_set * a.page > a.nodes * a.pool // 2:
        ap.error(
            "the working set (%d x %d B) should fit in half the pools (%d x %d B)"
            % (a.working_set, a.page, a.nodes, a.pool)
        )
    if not os.access(os.path.join(a.build, "tools", "kvfabric-store-bench"), os.X_OK):
        ap.error("no %s/tools/kvfabric-store-bench: build first (make build)" % a.build)

    py = mooncake_python(a)
    if py is None and not a.skip_mooncake:
        return 2
    cluster = MooncakeCluster(a, py) if py else None
    cases = [(op, t, a.exists_batch if op == "exists" else a.batch) for op in a.ops.split(",") for t in a.threads]
    rows = []
    idle = []  # Mooncake's CPU share of one core while kvfabric's windows ran
    load = [os.getloadavg()[0]]
    try:
        if cluster:
            ready = cluster.start()
            print(
                "Mooncake %s: master, %d nodes of %d MiB, a client; %d pages put and read back byte-exact"
                % (a.mooncake_version, a.nodes, a.pool >> 20, ready["working_set"]),
                file=sys.stderr,
            )
        for op, threads, batch in cases:
            row = {"op": op, "threads": threads, "batch": batch, "page": a.page, "kvfabric": [], "mooncake": []}
            for _ in range(a.reps):
                c0, t0 = (cluster.cpu() if cluster else 0), time.time()
                row["kvfabric"].append(kvfabric_window(a, op, threads, batch))
                if cluster:
                    idle.append((cluster.cpu() - c0) / (time.time() - t0))
                    row["mooncake"].append(cluster.window(op, threads, batch))
            unit = "keys/s" if op == "exists" else "GB/s"
            row["unit"] = unit
            row["kvfabric_windows"] = [
                r["median_keys_per_s" if op == "exists" else "median_store_gbps"] for r in row["kvfabric"]
            ]
            row["mooncake_windows"] = [r["keys_per_s" if op == "exists" else "gbps"] for r in row["mooncake"]]
            row["bare_read_windows"] = [
                r["median_bare_read_gbps"] for r in row["kvfabric"] if "median_bare_read_gbps" in r
            ]
            kv, mc = median(row["kvfabric_windows"]), median(row["mooncake_windows"])
            row.update(
                {
                    "kvfabric_median": kv,
                    "mooncake_median": mc,
                    "bare_read_median_gbps": median(row["bare_read_windows"]),
                    "kvfabric_failed_keys": sum(r["failures"] for r in row["kvfabric"]),
                    "kvfabric_wrong_pages": sum(r["wrong_pages"] for r in row["kvfabric"]),
                    "mooncake_failed_keys": sum(sum(r["failed_keys_by_code"].values()) for r in row["mooncake"]),
                }
            )
            rows.append(row)
            print(
                "  %s x%d done: kvfabric %s, Mooncake %s %s" % (op, threads, fmt(kv, unit), fmt(mc, unit), unit),
                file=sys.stderr,
            )
    except RuntimeError as e:
        print("store_compare: %s" % e, file=sys.stderr)
        return 1
    finally:
        if cluster:
            cluster.stop()
    load.append(os.getloadavg()[0])

    print(
        "\n%d nodes + 1 client on this host, tcp, %d KiB pages, batch %d (exists %d), working set %d pages, "
        "%d x %g s windows alternating, medians; load average %.1f before, %.1f after"
        % (a.nodes, a.page >> 10, a.batch, a.exists_batch, a.working_set, a.reps, a.duration, load[0], load[1])
    )
    print(
        "kvfabric verifies every GET (xxh3-128 per page); Mooncake %s"
        % (
            "checks its CRC (MOONCAKE_STORE_CHECKSUM=1)"
            if a.mooncake_checksum
            else "verifies nothing (MOONCAKE_STORE_CHECKSUM unset; its pages were compared byte for byte once, "
            "after the fill)"
        )
    )
    if a.mooncake_env:
        print("Mooncake's environment: " + " ".join(a.mooncake_env))
    print("median (lowest-highest window)")
    head = ("op", "threads", "unit", "kvfabric", "Mooncake", "bare READ", "kvf/bare", "Mooncake/bare", "kvf/Mooncake")
    line = "%-7s %7s %7s %24s %24s %20s %9s %14s %13s"
    print(line % head)
    for r in rows:
        kv, mc, bare = r["kvfabric_median"], r["mooncake_median"], r["bare_read_median_gbps"]
        gb = r["unit"] == "GB/s"
        print(
            line
            % (
                r["op"],
                r["threads"],
                r["unit"],
                spread(r["kvfabric_windows"], r["unit"]),
                spread(r["mooncake_windows"], r["unit"]),
                spread(r["bare_read_windows"]),
                fmt(ratio(kv, bare) if gb else None),
                fmt(ratio(mc, bare) if gb else None),
                fmt(ratio(kv, mc)),
            )
        )
    failures = [
        (r["op"], r["threads"], r["kvfabric_failed_keys"], r["kvfabric_wrong_pages"], r["mooncake_failed_keys"])
        for r in rows
        if r["kvfabric_failed_keys"] or r["kvfabric_wrong_pages"] or r["mooncake_failed_keys"]
    ]
    for op, t, kf, kw, mf in failures:
        print(
            "%s x%d: kvfabric %d failed keys, %d wrong pages; Mooncake %d failed keys (see --json_out)"
            % (op, t, kf, kw, mf)
        )
    if idle:
        print("Mooncake's processes, idle while kvfabric ran: %.1f%% of a core (median)" % (100 * median(idle)))
    if a.json_out:
        with open(a.json_out, "w") as f:
            json.dump(
                {
                    "args": vars(a),
                    "date": time.strftime("%Y-%m-%d"),
                    "cpus": os.cpu_count(),
                    "load_average_before_after": load,
                    "mooncake_idle_cpu_share": idle,
                    "cases": rows,
                },
                f,
                indent=1,
            )
    return 1 if any(r["kvfabric_wrong_pages"] for r in rows) else 0


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_mooncake_node":
        sys.exit(mooncake_node_main(sys.argv[2:]))
    if len(sys.argv) > 1 and sys.argv[1] == "_mooncake_client":
        sys.exit(mooncake_client_main(sys.argv[2:]))
    sys.exit(main())
