"""``kvfabric top``: a live view of engines' metrics endpoints.

Each second it scrapes every endpoint given (KVF_METRICS_LISTEN addresses,
host:port or http:// URLs), reads the engines each serves
(kvfabric.metrics.from_prometheus) and shows, per engine: its rails
(state, write and read throughput with a sparkline of the last minute,
queued operations, credits in use, stalls, errors), its peers (throughput,
requests per second, failures) and request latency percentiles over the
last interval. An engine that serves a store node is titled by the node's
name, with what the node served (a node's pages leave by the clients'
one-sided READs, which its own rails do not count). ``q`` quits. Built on
textual.
"""

from __future__ import annotations

import asyncio
import time
import urllib.error
import urllib.request
from collections import defaultdict, deque
from typing import Optional

from rich.text import Text
from textual.app import App, ComposeResult
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Footer, Header, Label, Sparkline, Static

from .metrics import from_prometheus, rates
from .units import latency_bound

HISTORY = 60  # sparkline points (one per refresh)


def _url(endpoint: str) -> str:
    if endpoint.startswith(("http://", "https://")):
        return endpoint if endpoint.rstrip("/").endswith("/metrics") else endpoint.rstrip("/") + "/metrics"
    return "http://%s/metrics" % endpoint


def _fetch(endpoint: str, timeout: float) -> tuple[list[dict], str]:
    """The engines an endpoint serves, or [] and why not."""
    try:
        with urllib.request.urlopen(_url(endpoint), timeout=timeout) as r:
            return from_prometheus(r.read().decode()), ""
    except (urllib.error.URLError, OSError, ValueError) as e:
        return [], "%s: %s" % (endpoint, getattr(e, "reason", e))


def _rate(bps: float) -> str:
    for unit, div in (("GB/s", 1e9), ("MB/s", 1e6), ("KB/s", 1e3)):
        if bps >= div:
            return "%.1f %s" % (bps / div, unit)
    return "%.0f B/s" % bps


def _dom_id(text: str) -> str:
    return "e" + "".join(c if c.isalnum() else "_" for c in text)


class EngineView(Static):
    """One engine: a title, its rails with sparklines, its peers."""

    def __init__(self, engine: str, endpoint: str):
        super().__init__(id=_dom_id(engine))
        self.engine, self.endpoint = engine, endpoint
        self.history: dict[int, deque] = defaultdict(lambda: deque([0.0] * HISTORY, maxlen=HISTORY))

    def compose(self) -> ComposeResult:
        # Names and every figure as plain text, never markup: "[::1]:7400" or
        # "[/]" in a name must show as written.
        yield Label(Text("engine %s  (endpoint %s)" % (self.engine, self.endpoint)), classes="title")
        yield Label("", classes="store")
        rails = DataTable(classes="rails", cursor_type="none", zebra_stripes=True)
        rails.add_columns("rail", "state", "write", "read", "queued", "credits in use", "stalls", "errors", "peers")
        yield rails
        yield VerticalScroll(classes="sparks")
        peers = DataTable(classes="peers", cursor_type="none", zebra_stripes=True)
        peers.add_columns("peer", "write", "read", "requests/s", "failures")
        yield peers
        yield Label("", classes="summary")

    def show_store(self, now: dict, change: Optional[dict]) -> None:
        store = now.get("store")
        if store is None:
            return
        if store["node"]:
            self.query_one(".title", Label).update(
                Text("store node %s  (engine %s, endpoint %s)" % (store["node"], self.engine, self.endpoint))
            )
        self.query_one(".store", Label).update(Text(store_line(store, change)))

    def show(self, now: dict, change: Optional[dict]) -> None:
        self.show_store(now, change)
        rails = self.query_one(".rails", DataTable)
        rails.clear()
        sparks = self.query_one(".sparks", VerticalScroll)
        by_index = {r["index"]: r for r in (change or {}).get("rails", [])}
        for r in sorted(now["rails"], key=lambda x: x["index"]):
            c = by_index.get(r["index"], {})
            w, rd = c.get("write_rate", 0.0), c.get("read_rate", 0.0)
            self.history[r["index"]].append(w + rd)
            rails.add_row(
                Text("%d %s %s" % (r["index"], r["provider"], r["domain"])),
                "in service" if r["in_service"] else "OUT",
                _rate(w),
                _rate(rd),
                str(r["queued"]),
                "%d/%d" % (r["in_flight"], r["credits"]),
                str(r["stalls"]),
                str(r["errors"]),
                str(r["peer_slots"]),
            )
            spark_id = "spark%d" % r["index"]
            found = sparks.query("#" + spark_id)
            if found:
                found.first(Horizontal).query_one(Sparkline).data = list(self.history[r["index"]])
                found.first(Horizontal).query_one(Label).update("rail %d %9s" % (r["index"], _rate(w + rd)))
            else:
                sparks.mount(
                    Horizontal(
                        Label("rail %d %9s" % (r["index"], _rate(w + rd))),
                        Sparkline(list(self.history[r["index"]]), summary_function=max),
                        id=spark_id,
                        classes="spark",
                    )
                )
        peers = self.query_one(".peers", DataTable)
        peers.clear()
        by_peer = {p["peer"]: p for p in (change or {}).get("peers", [])}
        for p in sorted(now["peers"], key=lambda x: x["peer"]):
            c = by_peer.get(p["peer"], {})
            peers.add_row(
                Text(p["peer"]),
                _rate(c.get("write_rate", 0.0)),
                _rate(c.get("read_rate", 0.0)),
                "%.0f" % c.get("request_rate", 0.0),
                str(p["failures"]),
            )
        parts = []
        for op, v in sorted((change or {}).get("latency", {}).items()):
            if v["count"]:
                p50, p99 = (latency_bound(v[q], symbols=True) for q in ("p50", "p99"))
                parts.append("%s latency p50 %s p99 %s" % (op, p50, p99))
        failures = sum(f["count"] for f in now["failures"])
        parts.append(
            "failures %d (%s)"
            % (failures, ", ".join("%s %s %d" % (f["op"], f["code"], f["count"]) for f in now["failures"]) or "none")
        )
        parts.append("reroutes failed %d stalled %d" % (now["reroutes"]["failed"], now["reroutes"]["stalled"]))
        if not now["counting"] or not now["peers"] and not any(r["writes"] + r["reads"] for r in now["rails"]):
            parts.append("no requests counted yet")
        self.query_one(".summary", Label).update(Text("   ".join(parts)))


def store_line(store: dict, change: Optional[dict]) -> str:
    """A store's figures: a node's pool, then what it served; or a client's own traffic."""
    c = (change or {}).get("store") or {}
    if store["node"]:
        return "pages %d, pool %s of %s used, %d member(s)\nserved: stored %s, read %s (located and touched)" % (
            store["pages"],
            bytes_text(store["used_bytes"]),
            bytes_text(store["pool_bytes"]),
            store["members"],
            _rate(c.get("stored_rate", 0.0)),
            _rate(c.get("read_rate", 0.0)),
        )
    return "store client, %d member(s): put %s, got %s" % (
        store["members"],
        _rate(c.get("put_rate", 0.0)),
        _rate(c.get("get_rate", 0.0)),
    )


def bytes_text(n: int) -> str:
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= div:
            return "%.1f %s" % (n / div, unit)
    return "%d B" % n


class Top(App):
    TITLE = "kvfabric top"
    CSS = """
    EngineView { height: auto; border: round $accent; padding: 0 1; margin-bottom: 1; }
    EngineView .title { text-style: bold; }
    EngineView DataTable { height: auto; max-height: 20; }
    EngineView .sparks { height: auto; max-height: 12; }
    .spark { height: 1; }
    .spark Label { width: 20; }
    .spark Sparkline { width: 1fr; }
    #status { height: auto; color: $warning; }
    """
    BINDINGS = [("q", "quit", "Quit")]

    def __init__(self, endpoints: list[str], interval: float = 1.0):
        super().__init__()
        self.endpoints, self.interval = endpoints, interval
        self.last: dict[str, tuple[float, dict]] = {}

    def compose(self) -> ComposeResult:
        yield Header(show_clock=True)
        yield Static(Text("connecting to " + ", ".join(self.endpoints)), id="status")
        yield VerticalScroll(id="engines")
        yield Footer()

    async def on_mount(self) -> None:
        await self.refresh_views()
        self.set_interval(self.interval, self.refresh_views)

    async def refresh_views(self) -> None:
        results = await asyncio.gather(
            *(asyncio.to_thread(_fetch, e, max(0.2, self.interval * 0.8)) for e in self.endpoints)
        )
        at = time.monotonic()
        errors = [err for _, err in results if err]
        box = self.query_one("#engines", VerticalScroll)
        for endpoint, (engines, _) in zip(self.endpoints, results):
            for now in engines:
                name = now["engine"]
                views = box.query("#" + _dom_id(name))
                if views:
                    view = views.first(EngineView)
                else:
                    view = EngineView(name, endpoint)
                    await box.mount(view)
                before = self.last.get(name)
                change = rates(before[1], now, at - before[0]) if before else None
                view.show(now, change)
                self.last[name] = (at, now)
        self.query_one("#status", Static).update(
            Text(
                "unreachable: " + "; ".join(errors)
                if errors
                else "%d endpoint(s), %d engine(s); refreshing every %g s"
                % (len(self.endpoints), len(self.last), self.interval)
            )
        )


def run(endpoints: list[str], interval: float = 1.0) -> int:
    Top(endpoints, interval).run()
    return 0
