"""The soak's store traffic, as its driver runs it: a metadata server, node processes started, killed,
restarted, joining and leaving (``Traffic``), client processes (store_soak.py's roles), and the verdict on
their figures: every issue explained by a membership change or by pins (``explain``), every acknowledged page
the store no longer has accounted for by the nodes' page ledgers (``account_missing``), or reported.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "common"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import page_ledger  # noqa: E402  (this directory)
import store_soak  # noqa: E402  (this directory: the node's and the client's processes)
from ports import free_port  # noqa: E402  (tools/common)
from store_soak import HANDOFF_S, KEY, PINNED, RESTART_CODES, SETTLE_S  # noqa: E402

ROLES = store_soak.__file__


# -- nodes -------------------------------------------------------------------------
class Node:
    """A node process as the driver sees it: launched (ready() waits for it to serve), killed, restarted under
    its name, or gone for good (left)."""

    def __init__(self, protocol: str, name: str, metadata: str, pool_bytes: int, log_prefix: str):
        self.protocol, self.name, self.metadata, self.pool_bytes = protocol, name, metadata, pool_bytes
        self.log_prefix = log_prefix
        self.left = False  # stopped for good: it left the store
        self.ended = []  # when each ended incarnation ended (time.monotonic())
        self.started = []  # when each incarnation began to serve
        self.done = []  # the last counters of each ended incarnation
        self.segments = []  # engine names of every incarnation
        self.logs = []  # the log file of every incarnation (kvfabric's lines at info and above)
        self.released = []  # (time, incarnation, pins released so far) whenever a node's count of released pins rose
        self.launch()

    def start(self) -> None:
        self.launch()
        self.ready()

    def launch(self) -> None:
        self.logs.append(f"{self.log_prefix}-node-{self.name.replace(':', '-')}-{len(self.logs)}.log")
        with open(self.logs[-1], "w") as log:
            self.proc = subprocess.Popen(
                [sys.executable, ROLES, "node", self.protocol, self.name, self.metadata, str(self.pool_bytes)],
                stdout=subprocess.PIPE,
                stderr=log,
                text=True,
            )
        self.stats, self.reader = {}, None

    def ready(self) -> None:
        """Waits for the node to serve."""
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"store node {self.name} did not start (exit {self.proc.wait()})")
        info = json.loads(line)
        if info["name"] != self.name:
            raise RuntimeError(f"store node {self.name} serves as {info['name']}")
        self.segments.append(info["segment"])
        self.started.append(time.monotonic())
        self.reader = threading.Thread(target=self._read, args=(self.proc,), daemon=True)
        self.reader.start()

    def _read(self, proc) -> None:
        incarnation = len(self.logs) - 1
        for line in proc.stdout:
            self.stats = json.loads(line)["stats"]
            n = self.stats.get("pins_released", 0)
            if n > max([r for t, i, r in self.released if i == incarnation], default=0):
                self.released.append((time.monotonic(), incarnation, n))

    def end(self, kill: bool) -> None:
        """SIGKILL (a crash) or SIGTERM (leaving, or the end of the run); keeps the counters last printed."""
        self.ended.append(time.monotonic())  # from the signal on, its pages may be gone
        if kill:
            self.proc.kill()
        else:
            self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        if self.reader:
            self.reader.join(timeout=5)
        self.done.append(self.stats)

    def totals(self) -> Counter:
        c = Counter()
        for s in self.done:
            for k in ("evictions", "refusals", "overwrites", "removals", "pins_released"):
                c[k] += s.get(k, 0)
        return c


# -- the driver's side -------------------------------------------------------------
def pins_possible(pins: list, t0: float, t1: float) -> int:
    """How many pages the clients' pins may hold pinned during [t0, t1] (a second either way): those held then,
    and those whose unpin failed before."""
    return sum(n if u >= t0 - 1 else lost for p, u, n, lost in pins if p <= t1 + 1)


def explain(issue: dict, kills: list, pins: list, nodes: list, joins: list = ()):
    """Why `issue` is allowed, or None. `kills`: (node name, killed, back) times, leaves included; `pins`:
    Client.pin_intervals; `joins`: (node name, time)."""
    t0, t1 = issue["start"], issue["end"]
    if issue["kind"] == "busy_pinned":
        pinned = int(PINNED.search(issue["message"]).group(1))
        return "pins held" if pinned <= pins_possible(pins, t0, t1) else None
    if issue["kind"] == "unpin_lost_put":
        # Its key was put while pinned: a put that lands on a new home (a member joined, left or came back
        # within the hand-over window) removes the copy, and its pin, from the previous home.
        changes = [t for _, t in joins] + [killed for _, killed, _ in kills]
        return "put to a new home" if any(t0 - HANDOFF_S - SETTLE_S <= t <= t1 for t in changes) else None
    if issue["kind"] not in ("error", "stale", "unpin_lost"):
        return None
    near = {n for n, killed, back in kills if killed - 1 <= t1 and t0 <= back + SETTLE_S}
    if not near or (issue["kind"] == "error" and not set(issue["codes"]) <= RESTART_CODES):
        return None
    # The nodes its messages name (by control address or engine) must be among those restarted.
    named = {n.name for n in nodes if {n.name, *n.segments} & set(issue.get("peers", []))}
    return "node restart" if named <= near else None


def clues(issue: dict, nodes: list, client_logs=()) -> dict:
    """What the nodes and clients logged and the nodes counted near `issue` (two seconds either way): its start
    in wall-clock time (the logs are stamped with it), the nodes whose count of released pins rose, and the log
    lines (at most 40)."""
    t0, t1 = issue.get("start", 0.0), issue.get("end", 0.0)
    keys = {f'"{k}"' for k in KEY.findall(issue.get("message", ""))}
    wall = time.time() - time.monotonic()  # log stamps are wall-clock time
    released = [
        f"{n.name} (incarnation {i}): {r} pins released by {t:.2f}"
        for n in nodes
        for t, i, r in n.released
        if t0 - 2 <= t <= t1 + 2
    ]
    lines = []
    logs = [(n.name, path) for n in nodes for path in n.logs] + [(f"client {i}", p) for i, p in enumerate(client_logs)]
    for who, path in logs:
        try:
            with open(path) as f:
                for line in f:
                    if page_ledger.PAGE_LINE.search(line) and not any(k in line for k in keys):
                        continue  # of the ledger, only the lines of the keys the issue names
                    at = page_ledger.log_time(line, wall)
                    if at is not None and t0 - 2 <= at <= t1 + 2:
                        lines.append((at, f"{who}: {line.rstrip()}"))
        except OSError:
            pass
    return {
        "start_local": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t0 + wall)),
        "pins_released": released,
        "log": [text for _, text in sorted(lines)[:40]],
    }


def account_missing(missing: list, nodes: list) -> tuple:
    """Each acknowledged page a client found gone, accounted for from the nodes' ledgers: (Counter of verdicts,
    the losses with the events followed)."""
    logs = [(n.name, i, path) for n in nodes for i, path in enumerate(n.logs)]
    ledger = page_ledger.read_ledger(logs, {m["key"] for m in missing})
    ended = {(n.name, i): t for n in nodes for i, t in enumerate(n.ended)}
    entered = {(n.name, i): t for n in nodes for i, t in enumerate(n.started)}
    verdicts, lost = Counter(), []
    for m in missing:
        verdict, path = page_ledger.account(m, ledger.get(m["key"], []), ended, entered, SETTLE_S)
        verdicts[verdict] += 1
        if verdict.startswith("lost"):
            lost.append(
                {
                    **m,
                    "verdict": verdict,
                    "path": [f"{e.at:.3f} {e.node}#{e.incarnation} {e.what} generation {e.generation}" for e in path],
                }
            )
    return verdicts, lost


def summarize(clients: list, nodes: list, kills: list, client_logs: list = (), joins: list = ()) -> dict:
    """The clients' and nodes' figures, each issue explained or not."""
    total = {
        "counts": Counter(),
        "errors_by_code": Counter(),
        "wrong": [],
        "issues": [],
        "pin_intervals": [],
        "missing": [],
    }
    misses = Counter()
    for c in clients:
        for k in ("counts", "errors_by_code"):
            total[k].update(c[k])
        misses.update({k[len("misses_") :]: v for k, v in c["store_stats"].items() if k.startswith("misses_")})
        for k in ("wrong", "issues", "pin_intervals", "missing"):
            total[k] += c[k]
    node_totals = Counter()
    for n in nodes:
        node_totals.update(n.totals())
    explained, unexplained, explained_list = Counter(), [], []
    # Every client unpinned what it pinned before it ended: pinned pages left on the nodes are leaked pins,
    # no more than the unpins that failed (their pins may be on a node that was out of placement then).
    pins_left = sum(n.done[-1].get("pinned_pages", 0) for n in nodes if n.done)
    unpins_failed = sum(lost for _, _, _, lost in total["pin_intervals"])
    if pins_left > unpins_failed:
        unexplained.append(
            {
                "kind": "pins_left",
                "message": f"{pins_left} pinned pages left on the nodes at the end, {unpins_failed} unpins failed",
            }
        )
    for issue in total["issues"]:
        why = explain(issue, kills, total["pin_intervals"], nodes, joins)
        if why:
            explained[issue["kind"]] += 1
            if issue["kind"] != "busy_pinned" or explained["busy_pinned"] <= 20:  # many alike: keep a sample
                explained_list.append({**issue, "why": why})
        else:
            unexplained.append({**issue, "clues": clues(issue, nodes, client_logs)})
    verdicts, lost = account_missing(total["missing"], nodes)
    page_events = page_ledger.count_events([path for n in nodes for path in n.logs])
    c = total["counts"]
    return {
        "page_events": page_events,
        "audited": c["audited"],
        "audit_missing": len(total["missing"]),
        "missing_verdicts": dict(verdicts),
        "lost_pages": lost,
        "store_ops": c["calls"],
        "store_gb": (c["put_bytes"] + c["hit_bytes"]) / 1e9,
        "puts": c["puts"],
        "put_failures": c["put_failures"],
        "gets": c["gets"],
        "hits": c["hits"],
        "misses": c["misses"],
        "misses_by_reason": dict(misses),
        "stale": c["stale"],
        "exists": c["exists"],
        "exists_hits": c["exists_hits"],
        "removes": c["removes"],
        "removed": c["removed"],
        "pins": c["pins"],
        "unpins": c["unpins"],
        "buffers_too_small": c["buffers_too_small"],
        "refusals": c["refusals"],
        "refusals_pinned": c["refusals_pinned"],
        "pins_left": pins_left,
        "unpins_failed": unpins_failed,
        "node_counters": dict(node_totals),
        "errors_by_code": dict(total["errors_by_code"]),
        "explained_issues": dict(explained),
        "explained": explained_list,
        "unexplained": unexplained,
        "wrong_bytes": total["wrong"],
        "node_restarts": len(kills),
        "node_kills": kills,
        "nodes": len(nodes),
        "clients": len(clients),
    }


def summary_line(s: dict) -> str:
    codes = ", ".join(f"{k} {v}" for k, v in sorted(s["errors_by_code"].items())) or "none"
    return (
        f"store: {s['store_ops']} verified operations ({s['puts']} pages put, {s['gets']} got: {s['hits']} hits, "
        f"{s['misses']} misses {s['misses_by_reason']}, {s['stale']} stale), {s['store_gb']:.2f} GB moved, "
        f"{s['node_counters'].get('evictions', 0)} evictions, {s['node_restarts']} node restarts, "
        f"{s['refusals']} refusals (Busy; {s['refusals_pinned']} while the node held pinned pages), "
        f"{s['node_joins']} joins and {s['node_leaves']} leaves ({s['page_events'].get('handed over', 0)} pages "
        f"handed over), "
        f"{s['audited']} acknowledged pages audited: {s['audit_missing']} gone {s['missing_verdicts']}, "
        f"{len(s['lost_pages'])} lost, "
        f"per-key errors: {codes}, {len(s['unexplained'])} unexplained, {len(s['wrong_bytes'])} wrong bytes"
    )


def store_ok(s: dict) -> bool:
    return not s["wrong_bytes"] and not s["unexplained"] and not s["lost_pages"]


class Traffic:
    """The driver's side: a metadata server, nodes and clients started, traffic until `end` (time.monotonic());
    a node killed and restarted every `restart_every` seconds, and every `change_every` seconds a node joins (a
    new one, at most two more than `nodes`) or one that joined leaves (SIGTERM, for good); the figures gathered at
    the end."""

    def __init__(
        self,
        nodes: int,
        clients: int,
        threads: int,
        pool_bytes: int,
        keys: int,
        end: float,
        restart_every: float,
        seed: int,
        tmp_prefix: str,
        change_every: float = 6.0,
    ):
        import random

        self.rng = random.Random(seed ^ 0x5709E)
        self.restart_every, self.change_every, self.kills, self.crashes = restart_every, change_every, [], []
        self.joins, self.leaves = [], []  # (node name, time)
        self.pool_bytes, self.tmp_prefix = pool_bytes, tmp_prefix
        self.nodes, self.clients, self.base = [], [], nodes
        self.outs = [f"{tmp_prefix}-store-client-{i}.json" for i in range(clients)]
        self.client_logs = [f"{tmp_prefix}-store-client-{i}.log" for i in range(clients)]
        self.metadata_server = None
        try:
            self.metadata = self.start_metadata_server()
            for _ in range(nodes):  # all at once
                self.nodes.append(self.new_node())
            for n in self.nodes:
                n.ready()
            duration = end - time.monotonic()
            for i in range(clients):
                with open(self.client_logs[i], "w") as log:
                    self.clients.append(
                        subprocess.Popen(
                            [
                                sys.executable,
                                ROLES,
                                "client",
                                str(i),
                                self.metadata,
                                str(keys),
                                str(threads),
                                str(duration),
                                str(seed + 100 + i),
                                self.outs[i],
                            ],
                            stderr=log,
                        )
                    )
        except BaseException:
            self.stop()
            raise
        self.next_kill = time.monotonic() + restart_every / 2
        self.next_change = time.monotonic() + change_every

    def start_metadata_server(self) -> str:
        """kvfabric's metadata server on loopback, where members come and go: its URI."""
        self.metadata_server = subprocess.Popen(
            [sys.executable, "-m", "kvfabric", "metadata-server", "--port", "0"], stdout=subprocess.PIPE, text=True
        )
        line = self.metadata_server.stdout.readline()
        if "metadata http://" not in line:
            raise RuntimeError(f"kvfabric metadata-server did not start: {line!r}")
        return line.split("metadata ", 1)[1].strip()

    def new_node(self) -> Node:
        return Node(
            ["tcp", "auto"][len(self.nodes) % 2],
            f"127.0.0.1:{free_port()}",
            self.metadata,
            self.pool_bytes,
            self.tmp_prefix,
        )

    def tick(self, now: float, last_kill: float, clean) -> None:
        """Kills and restarts a random node, or has one join or leave, when one is due (not after `last_kill`);
        `clean(pid)` removes what a killed process left."""
        if not self.nodes or now >= last_kill:
            return
        live = [n for n in self.nodes if not n.left]
        if now >= self.next_kill:
            node = self.rng.choice(live)
            self.check_alive(node)
            killed = time.monotonic()
            pid = node.proc.pid
            node.end(kill=True)
            clean(pid)
            node.start()
            self.kills.append((node.name, killed, time.monotonic()))
            self.next_kill = time.monotonic() + self.restart_every
        elif now >= self.next_change:
            joined = live[self.base :]
            if len(joined) < 2 and (not joined or self.rng.random() < 0.5):
                node = self.new_node()
                node.ready()
                self.nodes.append(node)
                self.joins.append((node.name, time.monotonic()))
            else:
                node = self.rng.choice(joined)
                self.check_alive(node)
                left = time.monotonic()
                node.end(kill=False)
                node.left = True
                if node.proc.returncode != 0:
                    self.crashes.append(f"store node {node.name} exited {node.proc.returncode} when it left")
                self.leaves.append((node.name, left))
                self.kills.append((node.name, left, time.monotonic()))  # its keys move, as for a restart
            self.next_change = time.monotonic() + self.change_every

    def check_alive(self, node: Node) -> None:
        if node.proc.poll() is not None:
            self.crashes.append(f"store node {node.name} ended by itself (exit {node.proc.returncode})")

    def wait(self, timeout: float) -> None:
        for p in self.clients:
            p.wait(timeout=timeout)

    def stop(self) -> None:
        for p in self.clients:
            if p.poll() is None:
                p.kill()
                p.wait()
        for n in self.nodes:
            if n.left:
                continue
            self.check_alive(n)
            if n.proc.poll() is None:
                n.end(kill=False)
                if n.proc.returncode != 0:
                    self.crashes.append(f"store node {n.name} exited {n.proc.returncode} when asked to stop")
        if self.metadata_server is not None and self.metadata_server.poll() is None:
            self.metadata_server.terminate()
            self.metadata_server.wait()

    def result(self) -> tuple:
        """(figures, ok)."""
        clients = []
        for path in self.outs:
            try:
                with open(path) as f:
                    clients.append(json.load(f))
                os.unlink(path)
            except OSError:
                pass
        s = summarize(clients, self.nodes, self.kills, self.client_logs, self.joins)
        s["node_joins"], s["node_leaves"] = len(self.joins), len(self.leaves)
        s["node_restarts"] = len(self.kills) - len(self.leaves)
        codes = [p.returncode for p in self.clients]
        s["client_exit_codes"] = codes
        s["unexplained"] += [{"kind": "process", "message": m} for m in self.crashes]
        if not s["hits"] or not s["node_counters"].get("evictions"):
            s["unexplained"].append(
                {
                    "kind": "traffic",
                    "message": f"{s['hits']} hits and "
                    f"{s['node_counters'].get('evictions', 0)} evictions: the run needs both",
                }
            )
        if codes != [0] * len(codes) or len(clients) < len(self.clients):
            s["unexplained"].append(
                {"kind": "process", "message": f"store clients exited {codes}, {len(clients)} reported"}
            )
        ok = store_ok(s)
        logs = [path for n in self.nodes for path in n.logs] + self.client_logs
        if ok:  # the nodes' logs are kept for a failed run, and named in its figures
            for path in logs:
                try:
                    os.unlink(path)
                except OSError:
                    pass
        else:
            s["node_logs"] = logs
        return s, ok
