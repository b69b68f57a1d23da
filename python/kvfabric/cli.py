"""The ``kvfabric`` command: bench, probe, topo and doctor."""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import socket
import sys
import sysconfig
import time

try:
    from . import _core
except ImportError as e:  # libfabric missing: _core says what to install
    if "libfabric" not in str(e):
        raise
    sys.exit(f"kvfabric: {e}")
from .engine import Engine
from .errors import KvfabricError

PROTOCOLS = ("efa", "tcp", "shm", "verbs", "sockets")

# One vocabulary for flags (tools/common/flag_names.h has the C++ tools'
# table; python/tests/test_cli.py checks that this one holds it): old name
# -> new name. Old names still work, with a warning.
RENAMED_FLAGS = {
    "--device_name": "--nic_filter",
    "--nics": "--nic_filter",
    "--engine_name": "--local_server_name",
    "--engine_address": "--local_server_name",
    "--metadata_server": "--metadata",
    "--target": "--segment_id",
    "--setting": "--set",
    "--site-dir": "--site_dir",
}


def current_flag_names(argv: list[str]) -> tuple[list[str], list[str]]:
    """`argv` with each old flag name ("--old" or "--old=VALUE") rewritten to its new name, and one warning per
    old name used."""
    out, warnings = [], []
    for arg in argv:
        name, eq, value = arg.partition("=")
        new = RENAMED_FLAGS.get(name)
        if new is None:
            out.append(arg)
            continue
        warnings.append(f"{name} is now {new} (the old name still works)")
        out.append(new + eq + value)
    return out, warnings


def _exec_tool(name: str, args: list[str]) -> int:
    """Replaces this process with a C++ tool installed beside this package's
    scripts (pip install . puts them there) or found on PATH."""
    tool = os.path.join(sysconfig.get_path("scripts"), name)
    if not os.access(tool, os.X_OK):
        tool = shutil.which(name)
    if tool is None:
        print(
            f"kvfabric: {name} is not installed here (pip install . installs it; a source build has it in "
            "build/tools/)",
            file=sys.stderr,
        )
        return 2
    os.execv(tool, [tool] + args)
    return 0  # not reached


def cmd_bench(args: argparse.Namespace, rest: list[str]) -> int:
    return _exec_tool("kvfabric-bench", ([f"--mode={args.mode}"] if args.mode else []) + rest)


def cmd_metadata_server(args: argparse.Namespace, rest: list[str]) -> int:
    return _exec_tool("kvfabric-metadata-server", rest)


def cmd_store_bench(args: argparse.Namespace, rest: list[str]) -> int:
    return _exec_tool("kvfabric-store-bench", rest)


def cmd_settings(args: argparse.Namespace, rest: list[str]) -> int:
    return _exec_tool("kvfabric-settings", rest)


def address_toward(peer: str) -> str:
    """This host's address on the route to `peer` ("host:port"), as HOST:0: an engine named so opens its rails
    on the network the peer is on. No packet is sent (a UDP socket's connect only picks the route)."""
    try:
        host, port = peer[1:].split("]:", 1) if peer.startswith("[") else peer.rsplit(":", 1)
        family, _, _, _, sockaddr = socket.getaddrinfo(host, int(port), type=socket.SOCK_DGRAM)[0]
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect(sockaddr)
            mine = s.getsockname()[0]
    except (OSError, ValueError):
        return "127.0.0.1:0"
    return f"[{mine}]:0" if ":" in mine else f"{mine}:0"


def cmd_probe(args: argparse.Namespace, rest: list[str]) -> int:
    """Reachability of a peer: handshake latency, opening its segment, connecting the rails, and a READ of a
    piece of its first buffer (the data path itself), each timed."""
    out: dict = {"peer": args.peer}
    local = args.local_server_name or address_toward(args.peer)
    try:
        with Engine(local, protocol=args.protocol, nic_filter=args.nic_filter) as e:
            t0 = time.perf_counter()
            e.probe(args.peer)
            out["probe_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            t0 = time.perf_counter()
            seg = e.open(args.peer)
            out["open_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            t0 = time.perf_counter()
            e.warmup(seg)
            out["warmup_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            buffers = e.buffers(seg)
            out["buffers"] = [{"addr": b.addr, "length": b.length, "location": b.location} for b in buffers]
            out["rails"] = e.rails()
            if buffers:
                piece = bytearray(min(4096, buffers[0].length))
                e.register(piece)
                t0 = time.perf_counter()
                e.read(seg, piece, buffers[0].addr)
                out["read_ms"] = round((time.perf_counter() - t0) * 1e3, 3)
            else:
                out["read_ms"] = None  # nothing to read: the data path is untried
            out["reachable"] = True
    except KvfabricError as err:
        out["reachable"] = False
        out["error"] = str(err)
    print(json.dumps(out, indent=2))
    return 0 if out["reachable"] else 1


def cmd_topo(args: argparse.Namespace, rest: list[str]) -> int:
    """kvfabric-topo: the rails, their NUMA node and PCI address, and the
    GPUs with their nearest rails, as JSON."""
    return _exec_tool("kvfabric-topo", rest)


def _loaded_libfabrics() -> set[str]:
    found = set()
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if "libfabric.so" in os.path.basename(path):
                    found.add(os.path.realpath(path))
    except OSError:
        pass
    return found


MEMLOCK_ADVICE = (
    "raise it to unlimited: `ulimit -l unlimited` in the shell that starts kvfabric, "
    "`--ulimit memlock=-1:-1` for a container, LimitMEMLOCK=infinity for a systemd unit, or "
    "'* - memlock unlimited' in /etc/security/limits.conf (then log in again)"
)


def memlock_check(soft: int, pinning: list[str]) -> tuple[str, str, str]:
    """The doctor's row for the locked-memory limit `soft` (bytes; resource.RLIM_INFINITY for none), given the
    providers found here that pin registered memory against it (efa, verbs): a limited memlock is a failure
    where one is present (registering a KV pool fails once the limit is reached) and a note elsewhere."""
    if soft == resource.RLIM_INFINITY:
        return ("ok", "locked-memory limit (ulimit -l): unlimited", "")
    shown = f"{soft // 1024} KiB" if soft < (1 << 30) else f"{soft / (1 << 30):.1f} GiB"
    if pinning:
        return (
            "fail",
            f"locked-memory limit (ulimit -l) is {shown}: {', '.join(pinning)} pin every registered "
            "buffer against it, so registering more fails",
            MEMLOCK_ADVICE,
        )
    return (
        "ok",
        f"locked-memory limit (ulimit -l) is {shown}",
        "tcp and shm do not pin registered memory; on EFA and verbs hosts, " + MEMLOCK_ADVICE,
    )


def doctor_checks() -> list[tuple[str, str, str]]:
    """(level, check, advice) rows: level is ok, warn or fail."""
    rows = []
    v = _core.libfabric_versions()
    rows.append(
        ("ok", f"libfabric {v['library']} loaded (built against {v['headers']}, API {v['requested']} requested)", "")
    )
    major, minor = (int(x) for x in v["library"].split("."))
    if (major, minor) < (1, 18):
        rows.append(
            (
                "warn",
                f"libfabric {v['library']} is older than 1.18",
                "EFA device RDMA on p5/p5e/p6 needs API 1.18 or later: install the AWS EFA software "
                "(/opt/amazon/efa) and rebuild against it",
            )
        )
    libs = _loaded_libfabrics()
    if len(libs) > 1:
        rows.append(
            (
                "fail",
                "two libfabric copies are loaded: " + ", ".join(sorted(libs)),
                "keep only the system one (/opt/amazon/efa/lib): a second copy (bundled in a wheel, or "
                "NCCL's) makes one of them lose the EFA device",
            )
        )
    any_rail = False
    pinning = []  # providers whose registrations count against the locked-memory limit
    for p in PROTOCOLS:
        doms = _core.fabric_domains(p)
        if not doms:
            rows.append(
                (
                    "ok" if p != "efa" else "warn",
                    f"{p}: not available",
                    "" if p != "efa" else "no EFA device: transfers use tcp (software RMA, far below line rate)",
                )
            )
            continue
        any_rail = True
        if p in ("efa", "verbs"):
            pinning.append(p)
        names = ", ".join(d["domain"] for d in doms)
        rows.append(("ok", f"{p}: {len(doms)} rail(s) ({doms[0]['provider']}): {names}", ""))
        if p == "efa":
            emulated = [d for d in doms if "emulated" in d.get("rma", "")]
            if emulated:
                rows.append(
                    (
                        "warn",
                        f"efa: RMA {emulated[0]['rma']} on {len(emulated)} rail(s)",
                        "emulated READ/WRITE run far below line rate: check the instance type's EFA generation, "
                        "FI_EFA_USE_DEVICE_RDMA (unset or 1) and libfabric 1.18 or later",
                    )
                )
            else:
                rows.append(("ok", f"efa: RMA {doms[0].get('rma') or 'not reported'}", ""))
        if p in ("tcp", "sockets"):
            rows.append(
                (
                    "warn",
                    f"{p}: RMA is emulated in software over sockets",
                    "fine for development and tests; use efa or verbs for line rate",
                )
            )
    if not any_rail:
        rows.append(
            (
                "fail",
                "no libfabric provider is usable",
                "install libfabric (apt install libfabric1) or the EFA software",
            )
        )
    rows.append(memlock_check(resource.getrlimit(resource.RLIMIT_MEMLOCK)[0], pinning))
    if os.environ.get("FI_HMEM") is None and os.path.exists("/dev/nvidiactl"):
        rows.append(
            (
                "warn",
                "GPUs present and FI_HMEM unset",
                "GPU buffers need a provider with FI_HMEM (efa); processes that never touch GPU memory can set "
                "FI_HMEM=system so no CUDA context is created",
            )
        )
    if os.environ.get("FI_EFA_FORK_SAFE") is None and os.environ.get("RDMAV_FORK_SAFE") is None:
        rows.append(
            (
                "ok",
                "fork safety not forced (FI_EFA_FORK_SAFE / RDMAV_FORK_SAFE unset)",
                "set FI_EFA_FORK_SAFE=1 only if the process forks after registering memory (it slows registration)",
            )
        )
    try:
        with open("/proc/meminfo") as f:
            meminfo = dict(line.split(":", 1) for line in f if ":" in line)
        huge = int(meminfo.get("HugePages_Total", "0").strip().split()[0])
        rows.append(
            (
                "ok",
                f"{huge} explicit huge pages configured",
                "" if huge else "optional: huge pages cut registration time and TLB misses for big KV pools",
            )
        )
    except (OSError, ValueError):
        pass
    return rows


def cmd_doctor(args: argparse.Namespace, rest: list[str]) -> int:
    rows = doctor_checks()
    if args.json:
        print(json.dumps([{"level": lv, "check": c, "advice": a} for lv, c, a in rows], indent=2))
    else:
        for level, check, advice in rows:
            print(f"[{level:4}] {check}")
            if advice:
                print(f"       -> {advice}")
    return 1 if any(level == "fail" for level, _, _ in rows) else 0


def _shim_loads(st: dict) -> str:
    """What `import mooncake.engine` gave, in words, from shim.status()."""
    if st["loads"] == "kvfabric":
        return f"kvfabric's shim ({st['module']}, {st['file']})"
    if st["loads"] == "mooncake":
        return f"the real Mooncake ({st['file']}{'; ' + st['version'] if st['version'] else ''})"
    return f"nothing importable ({st['error']})"


def _shim_advice(st: dict) -> str:
    """What to do when the shim is not what loads."""
    if st["disabled"]:
        return "KVF_MOONCAKE_SHIM=0 is set in this environment: unset it to turn the shim on"
    if st["mode"] is None:
        if st["real"]:
            return (
                "run `kvfabric mooncake-shim install --force` to make it load kvfabric beside the real Mooncake "
                "(or pip uninstall -y mooncake-transfer-engine, then `kvfabric mooncake-shim install`)"
            )
        return "run `kvfabric mooncake-shim install` to make it load kvfabric"
    if st["loads"] == "mooncake" and st["mode"] == "default":
        return (
            "the real Mooncake wins over the shim: pip uninstall -y mooncake-transfer-engine, or "
            "`kvfabric mooncake-shim install --force` to put kvfabric first"
        )
    if st["loads"] is None:
        return "the shim is installed but the import fails: the error above says why"
    return (
        f"the shim is installed but a fresh interpreter did not take it: is {os.path.dirname(st['pth'])} "
        "one of its site directories?"
    )


def _print_shim_status(st: dict) -> None:
    print(f"import mooncake.engine loads: {_shim_loads(st)}")
    if st["mode"] is None:
        print(f"shim: not installed (no {st['pth']})")
    else:
        print(f"shim: installed{' with --force' if st['mode'] == 'forced' else ''}: {st['pth']}")
    real = ", ".join(st["real"]) + (f" ({st['version']})" if st["version"] else "") if st["real"] else "none found"
    print(f"real Mooncake package: {real}")


def cmd_mooncake_shim(args: argparse.Namespace, rest: list[str]) -> int:
    """install / uninstall / status of the Mooncake shim. Every action reports
    what `import mooncake.engine` then loads in a fresh interpreter; status and
    install exit 0 only when that is kvfabric."""
    from .compat import shim

    if args.force and args.action != "install":
        print("kvfabric: --force applies to `mooncake-shim install` only", file=sys.stderr)
        return 2
    path = shim.pth_path(args.site_dir)
    if args.action == "status":
        st = shim.status(args.site_dir)
        _print_shim_status(st)
        if st["loads"] != "kvfabric":
            print(_shim_advice(st))
            return 1
        return 0
    try:
        if args.action == "install":
            shim.install(force=args.force, site_dir=args.site_dir)
            print(f"installed {path}" + (" with --force: kvfabric goes ahead of a real Mooncake" if args.force else ""))
        else:
            print(f"removed {path}" if shim.uninstall(args.site_dir) else f"was not installed (no {path})")
    except shim.MooncakePresentError as err:
        print(f"kvfabric: not installing the Mooncake shim: {err}", file=sys.stderr)
        return 1
    except OSError as err:
        hint = "; run as the owner of this environment" if isinstance(err, PermissionError) else ""
        print(
            f"kvfabric: cannot {'write' if args.action == 'install' else 'remove'} {path}: {err.strerror}{hint}",
            file=sys.stderr,
        )
        return 1
    st = shim.status(args.site_dir)
    print(f"import mooncake.engine now loads: {_shim_loads(st)}")
    if args.action == "install":
        if st["loads"] != "kvfabric":
            print(_shim_advice(st))
            return 1
        print("KVF_MOONCAKE_SHIM=0 turns it off for one process")
    return 0


def engine_name_for(listen: str) -> str:
    """The engine address of a store node that listens on `listen`: the same host, a free port; loopback when
    `listen` is empty (a node of this host alone)."""
    if not listen:
        return "127.0.0.1:0"
    host = listen.rsplit(":", 1)[0] if not listen.startswith("[") else listen[: listen.index("]") + 1]
    return f"{host}:0"


def cmd_store_node(args: argparse.Namespace, rest: list[str]) -> int:
    """A store node that only serves: an engine and a kvfabric.Store with a
    pool, until SIGINT or SIGTERM; its name and segment on one JSON line."""
    import signal
    import threading

    from .store import Store
    from .units import parse_bytes

    settings = dict(kv.split("=", 1) for kv in args.set)
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        pool = parse_bytes(args.pool, "--pool")
        engine_name = args.local_server_name or engine_name_for(args.listen)
        with Engine(engine_name, args.metadata, args.protocol, args.nic_filter, settings) as engine:
            with Store(
                engine, pool_bytes=pool, members=args.members or None, listen=args.listen or None, settings=settings
            ) as store:
                print(
                    json.dumps(
                        {"name": store.name, "segment": engine.name, "pool_bytes": pool, "members": store.members()}
                    ),
                    flush=True,
                )
                while not stop.wait(args.stats_every if args.stats_every > 0 else 3600):
                    if args.stats_every > 0:
                        print(json.dumps({"time": round(time.time(), 3), **store.stats()}), flush=True)
    except (KvfabricError, ValueError) as e:
        print(f"kvfabric store-node: {e}", file=sys.stderr)
        return 1
    return 0


def cmd_top(args: argparse.Namespace, rest: list[str]) -> int:
    try:
        from .top import run
    except ImportError as e:
        print(f"kvfabric top needs textual and prometheus-client ({e}); pip install 'kvfabric[top]'", file=sys.stderr)
        return 1
    return run(args.endpoints, args.interval)


def version_text() -> str:
    """kvfabric's version, and the libfabric it loaded and was built against."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        mine = version("kvfabric")
    except PackageNotFoundError:
        mine = "(not installed)"
    v = _core.libfabric_versions()
    return f"kvfabric {mine} (libfabric {v['library']} loaded, built against {v['headers']})"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="kvfabric", description="kvfabric transfer engine tools")
    ap.add_argument("--version", action="version", version=version_text())
    sub = ap.add_subparsers(dest="command", required=True)
    # The tools that take their own flags show their own --help.
    b = sub.add_parser(
        "bench",
        help="the C++ benchmark (kvfabric-bench); other flags pass through",
        add_help=False,
        description="Runs kvfabric-bench. Flags after the mode pass through unchanged, for example: "
        "kvfabric bench initiator --protocol=tcp --segment_id=HOST:PORT --operation=write",
    )
    b.add_argument("mode", nargs="?", choices=["target", "initiator", "probe"])
    b.set_defaults(fn=cmd_bench)
    m = sub.add_parser(
        "metadata-server",
        help="the http:// metadata store (GET/PUT/DELETE ?key=, ttl, prefix listing); flags pass through",
        add_help=False,
        description="Runs kvfabric-metadata-server: --host (127.0.0.1), --port (8080; 0 picks one), "
        "--path (/metadata), size and time bounds, --require_auth (writes signed with "
        "KVF_AUTH_TOKEN); see its --help. Engines then use metadata "
        "http://HOST:PORT/metadata.",
    )
    m.set_defaults(fn=cmd_metadata_server)
    sb = sub.add_parser(
        "store-bench",
        help="the store's benchmark (kvfabric-store-bench: local, serve, client); flags pass through",
        add_help=False,
    )
    sb.set_defaults(fn=cmd_store_bench)
    st = sub.add_parser(
        "settings",
        help="the settings in force, from the environment (kvfabric-settings; --markdown: "
        "the table of docs/settings.md)",
        add_help=False,
    )
    st.set_defaults(fn=cmd_settings)
    p = sub.add_parser("probe", help="is a peer reachable; handshake, open and warmup times")
    p.add_argument("peer", help="the peer's segment name, host:port")
    p.add_argument("--protocol", default="auto")
    p.add_argument("--nic_filter", default="")
    p.add_argument(
        "--local_server_name",
        default="",
        help="this side's engine address, host:0 (default: this host's address on the route to the peer)",
    )
    p.set_defaults(fn=cmd_probe)
    t = sub.add_parser(
        "topo",
        help="rails with NUMA node and PCI address, GPUs and their nearest rails (JSON); "
        "flags pass through to kvfabric-topo",
        add_help=False,
        description="Runs kvfabric-topo: --protocol (auto), --nic_filter, --topology_file.",
    )
    t.set_defaults(fn=cmd_topo)
    d = sub.add_parser("doctor", help="check this host for known EFA/libfabric pitfalls")
    d.add_argument("--json", action="store_true")
    d.set_defaults(fn=cmd_doctor)
    sn = sub.add_parser(
        "store-node",
        help="serve a pool of the KV-cache store until SIGINT or SIGTERM",
        description="Runs a store node: an engine and a kvfabric.Store giving --pool bytes of host "
        "memory. Members are found through --metadata (etcd://HOST:2379, "
        "http://HOST:PORT/metadata) or, with p2p, the static --members list, which "
        "must name this node's --listen address. Prints its name and segment as JSON; "
        "with --stats_every, its counters as one JSON line that often. "
        "See docs/store.md and docs/sglang.md.",
    )
    sn.add_argument("--pool", default="1gb", help="pool size (4gb, 512mb, bytes; default 1gb)")
    sn.add_argument(
        "--listen", default="", help="the control address, host:port (default: the engine's host, a free port)"
    )
    sn.add_argument("--members", default="", help="the static member list (p2p metadata): host:port,...")
    sn.add_argument("--metadata", default="p2p", help="p2p, etcd://HOST:PORT or http://HOST:PORT/PATH")
    sn.add_argument("--protocol", default="auto")
    sn.add_argument("--nic_filter", default="")
    sn.add_argument(
        "--local_server_name",
        default="",
        help="the engine's address, host:port (0: a free port; default: --listen's host, or 127.0.0.1)",
    )
    sn.add_argument(
        "--set", action="append", default=[], metavar="KVF_NAME=VALUE", help="any kvfabric setting, repeatable"
    )
    sn.add_argument("--stats_every", type=float, default=0, help="seconds between counter lines (0: none)")
    sn.set_defaults(fn=cmd_store_node)
    tp = sub.add_parser(
        "top",
        help="a live view of engines' metrics endpoints (KVF_METRICS_LISTEN)",
        description="Scrapes each endpoint every --interval seconds and shows each engine's rails "
        "(state, throughput with a sparkline, queue, credits in use, stalls, errors), "
        "peers and latency percentiles. q quits. See docs/metrics.md.",
    )
    tp.add_argument("endpoints", nargs="+", help="host:port of a metrics endpoint, or its http:// URL")
    tp.add_argument("--interval", type=float, default=1.0, help="seconds between refreshes (default 1)")
    tp.set_defaults(fn=cmd_top)
    ms = sub.add_parser(
        "mooncake-shim",
        help="let `import mooncake.engine` load kvfabric (vLLM, SGLang unchanged)",
        description="install writes kvfabric_mooncake_shim.pth into site-packages so that "
        "`import mooncake.engine` loads kvfabric.compat.mooncake; it refuses (exit 1) "
        "when a real Mooncake package is importable, unless --force. uninstall removes it. "
        "status reports what `import mooncake.engine` really loads in a fresh "
        "interpreter: exit 0 when it is kvfabric's shim, 1 otherwise. "
        "See docs/mooncake-shim.md.",
    )
    ms.add_argument("action", choices=["install", "uninstall", "status"])
    ms.add_argument(
        "--force",
        action="store_true",
        help="install: put kvfabric ahead of an installed Mooncake for mooncake.engine; the real "
        "package's other modules stay importable",
    )
    ms.add_argument(
        "--site_dir",
        default=None,
        help="the directory that holds the .pth (default: this environment's site-packages); "
        "the fresh interpreter that checks the result processes it with site.addsitedir. "
        "For tests",
    )
    ms.set_defaults(fn=cmd_mooncake_shim)
    return ap


def main(argv: list[str] | None = None) -> int:
    argv, warnings = current_flag_names(sys.argv[1:] if argv is None else argv)
    for w in warnings:
        print(f"kvfabric: {w}", file=sys.stderr)
    ap = build_parser()
    args, rest = ap.parse_known_args(argv)
    if rest and args.command not in ("bench", "metadata-server", "topo", "store-bench", "settings"):
        ap.error("unrecognized arguments: " + " ".join(rest))
    return args.fn(args, rest)


if __name__ == "__main__":
    sys.exit(main())
