"""Engine figures in one shape, wherever they come from.

``Engine.stats()`` returns a dict; a scrape of an engine's metrics endpoint
(KVF_METRICS_LISTEN) is Prometheus text. :func:`from_prometheus` turns the
text back into the same dicts (one per engine the endpoint serves), so
``kvfabric top``, the MC_TE_METRIC line and a framework's own reporting
all read the same fields; :func:`rates` and :func:`quantile` turn two
readings into what an operator watches: bytes per second per rail and per
peer, and latency percentiles over the interval.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional

_RAIL_FIELDS = {
    # sample name -> (field, by op?)
    "kvfabric_rail_bytes_total": ("bytes", True),
    "kvfabric_rail_operations_total": ("ops", True),
    "kvfabric_rail_errors_total": ("errors", False),
    "kvfabric_rail_stalls_total": ("stalls", False),
    "kvfabric_rail_recoveries_total": ("recoveries", False),
    "kvfabric_rail_in_service": ("in_service", False),
    "kvfabric_rail_queued_operations": ("queued", False),
    "kvfabric_rail_credits_in_use": ("in_flight", False),
    "kvfabric_rail_credits": ("credits", False),
    "kvfabric_rail_peer_slots": ("peer_slots", False),
}
_OP_NAMES = {
    ("bytes", "write"): "write_bytes",
    ("bytes", "read"): "read_bytes",
    ("ops", "write"): "writes",
    ("ops", "read"): "reads",
}
_SCALARS = {
    "kvfabric_registrations_total": "registrations_total",
    "kvfabric_registration_failures_total": "registration_failures",
    "kvfabric_handshake_errors_total": "handshake_errors",
    "kvfabric_metadata_errors_total": "metadata_errors",
    "kvfabric_handshakes_refused_total": "handshakes_refused",
    "kvfabric_peers": "segments_open",
}


def _engine(out: dict, name: str) -> dict:
    if name not in out:
        out[name] = {
            "engine": name,
            "counting": True,
            "metrics_address": "",
            "rails": [],
            "peers": [],
            "store": None,
            "failures": [],
            "latency": [],
            "reroutes": {"failed": 0, "stalled": 0, "refused": 0},
            "registrations": [],
            "registrations_total": 0,
            "registration_failures": 0,
            "handshake_errors": 0,
            "metadata_errors": 0,
            "handshakes_refused": 0,
            "segments_open": 0,
            "notice_messages": {"sent": 0, "failed": 0},
        }
    return out[name]


# The store's samples an engine's entry keeps under "store" (a node's pool
# and what it served; a client's own puts and gets): metric -> field.
_STORE_FIELDS = {
    "kvfabric_store_pool_bytes": "pool_bytes",
    "kvfabric_store_pool_used_bytes": "used_bytes",
    "kvfabric_store_pages": "pages",
    "kvfabric_store_members": "members",
    "kvfabric_store_put_bytes_total": "put_bytes",
    "kvfabric_store_get_bytes_total": "get_bytes",
}


def _store(e: dict) -> dict:
    if e.get("store") is None:
        e["store"] = {
            "node": "",
            "pool_bytes": 0,
            "used_bytes": 0,
            "pages": 0,
            "members": 0,
            "put_bytes": 0,
            "get_bytes": 0,
            "served": {"stored": 0, "located": 0, "touched": 0},
        }
    return e["store"]


def _row(rows: list, key: str, value, make) -> dict:
    for r in rows:
        if r[key] == value:
            return r
    r = make()
    rows.append(r)
    return r


def from_prometheus(text: str) -> list[dict]:
    """The engines in a /metrics scrape, each as ``Engine.stats()`` shapes it
    (``counting`` is True whenever request counters appear), with ``store``
    where a store shares the engine: its node's name ("" for a client), pool,
    pages, members, the bytes it served by how (stored, located, touched)
    and its own put and get bytes; None otherwise. Raises ValueError for text
    that is not the Prometheus text format."""
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[str, dict] = {}
    latency: dict[tuple, dict] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels, name, v = s.labels, s.name, s.value
            if "engine" not in labels or not name.startswith("kvfabric_"):
                continue
            e = _engine(out, labels["engine"])
            if name.startswith("kvfabric_store_"):
                if name == "kvfabric_store_node_info":
                    _store(e)["node"] = labels.get("node", "")
                elif name == "kvfabric_store_served_bytes_total":
                    _store(e)["served"][labels.get("how", "")] = int(v)
                elif name in _STORE_FIELDS:
                    _store(e)[_STORE_FIELDS[name]] = int(v)
            elif name in _RAIL_FIELDS:
                field, by_op = _RAIL_FIELDS[name]
                rail = _row(
                    e["rails"],
                    "index",
                    int(labels.get("rail", "0")),
                    lambda: {
                        "index": int(labels.get("rail", "0")),
                        "label": "rail %s (%s %s)" % (labels.get("rail"), labels.get("provider"), labels.get("domain")),
                        "provider": labels.get("provider", ""),
                        "domain": labels.get("domain", ""),
                        "write_bytes": 0,
                        "read_bytes": 0,
                        "writes": 0,
                        "reads": 0,
                        "errors": 0,
                        "stalls": 0,
                        "recoveries": 0,
                        "in_service": True,
                        "queued": 0,
                        "in_flight": 0,
                        "credits": 0,
                        "peer_slots": 0,
                    },
                )
                if by_op:
                    rail[_OP_NAMES[(field, labels.get("op"))]] = int(v)
                elif field == "in_service":
                    rail[field] = v > 0
                else:
                    rail[field] = int(v)
            elif name in (
                "kvfabric_requests_total",
                "kvfabric_transferred_bytes_total",
                "kvfabric_peer_failures_total",
            ):
                peer = _row(
                    e["peers"],
                    "peer",
                    labels["peer"],
                    lambda: {
                        "peer": labels["peer"],
                        "write_requests": 0,
                        "write_bytes": 0,
                        "read_requests": 0,
                        "read_bytes": 0,
                        "failures": 0,
                    },
                )
                if name == "kvfabric_peer_failures_total":
                    peer["failures"] = int(v)
                else:
                    kind = "requests" if name == "kvfabric_requests_total" else "bytes"
                    peer["%s_%s" % (labels["op"], kind)] = int(v)
            elif name == "kvfabric_request_failures_total":
                e["failures"].append({"op": labels["op"], "code": labels["code"], "count": int(v)})
            elif name.startswith("kvfabric_request_latency_seconds"):
                key = (labels["engine"], labels["op"], labels["size"])
                h = latency.setdefault(
                    key,
                    {
                        "op": labels["op"],
                        "size_class": labels["size"],
                        "count": 0,
                        "sum_seconds": 0.0,
                        "cumulative": [],
                    },
                )
                if name.endswith("_bucket"):
                    h["cumulative"].append((float(labels["le"]), int(v)))
                elif name.endswith("_count"):
                    h["count"] = int(v)
                elif name.endswith("_sum"):
                    h["sum_seconds"] = v
            elif name == "kvfabric_reroutes_total":
                e["reroutes"][labels["reason"]] = int(v)
            elif name == "kvfabric_reroute_refusals_total":
                e["reroutes"]["refused"] = int(v)
            elif name == "kvfabric_notice_messages_total":
                e["notice_messages"][labels["result"]] = int(v)
            elif name in ("kvfabric_registered_buffers", "kvfabric_registered_bytes"):
                r = _row(
                    e["registrations"],
                    "location",
                    labels["location"],
                    lambda: {"location": labels["location"], "buffers": 0, "bytes": 0},
                )
                r["buffers" if name.endswith("buffers") else "bytes"] = int(v)
            elif name in _SCALARS:
                e[_SCALARS[name]] = int(v)
    for (engine, _, _), h in latency.items():
        cumulative = sorted(h.pop("cumulative"))
        before, buckets = 0, []
        for upper, c in cumulative:
            buckets.append((upper, c - before))
            before = c
        h["buckets"] = buckets
        out[engine]["latency"].append(h)
    return list(out.values())


def quantile(buckets: Iterable[tuple[float, int]], q: float) -> Optional[float]:
    """The upper bound of the bucket holding quantile ``q`` (0..1) of a
    histogram given as (upper bound, count) pairs, not cumulative; None when
    it counted nothing; math.inf when that bucket is the last one."""
    pairs = list(buckets)
    total = sum(c for _, c in pairs)
    if total == 0:
        return None
    want, seen = q * total, 0
    for upper, c in pairs:
        seen += c
        if seen >= want and c > 0:
            return upper
    return math.inf


def _by(rows: list, key: str) -> dict:
    return {r[key]: r for r in rows}


def rates(before: dict, after: dict, seconds: float) -> dict:
    """What changed between two readings of one engine, ``seconds`` apart:
    ``rails`` and ``peers`` with write and read bytes per second (and the
    rail's stalls, errors and state now), ``requests`` per second,
    ``failures`` in the interval, ``latency`` (per op: p50 and p99 in
    seconds over the interval, or None without requests), and ``store``
    (bytes per second a node stored and handed out for reading, located
    and touched together, and the client's own put and get rates; None
    without a store). A counter that went back (the engine restarted)
    counts from zero."""
    seconds = max(seconds, 1e-9)

    def delta(a: dict, b: Optional[dict], field: str) -> float:
        now, then = a.get(field, 0), (b or {}).get(field, 0)
        return now - then if now >= then else now

    out = {"rails": [], "peers": [], "requests": 0.0, "failures": 0, "latency": {}, "store": None}
    st, st0 = after.get("store"), before.get("store") or {}
    if st is not None:
        served, served0 = st["served"], st0.get("served", {})
        out["store"] = {
            "stored_rate": delta(served, served0, "stored") / seconds,
            "read_rate": (delta(served, served0, "located") + delta(served, served0, "touched")) / seconds,
            "put_rate": delta(st, st0, "put_bytes") / seconds,
            "get_rate": delta(st, st0, "get_bytes") / seconds,
        }
    old_rails = _by(before.get("rails", []), "index")
    for r in after.get("rails", []):
        b = old_rails.get(r["index"])
        out["rails"].append(
            {
                **r,
                "write_rate": delta(r, b, "write_bytes") / seconds,
                "read_rate": delta(r, b, "read_bytes") / seconds,
                "new_stalls": delta(r, b, "stalls"),
                "new_errors": delta(r, b, "errors"),
            }
        )
    old_peers = _by(before.get("peers", []), "peer")
    for p in after.get("peers", []):
        b = old_peers.get(p["peer"])
        requests = delta(p, b, "write_requests") + delta(p, b, "read_requests")
        out["requests"] += requests / seconds
        out["peers"].append(
            {
                **p,
                "write_rate": delta(p, b, "write_bytes") / seconds,
                "read_rate": delta(p, b, "read_bytes") / seconds,
                "request_rate": requests / seconds,
                "new_failures": delta(p, b, "failures"),
            }
        )
    old_failures = {(f["op"], f["code"]): f["count"] for f in before.get("failures", [])}
    for f in after.get("failures", []):
        then = old_failures.get((f["op"], f["code"]), 0)
        out["failures"] += f["count"] - then if f["count"] >= then else f["count"]
    old_latency = {(h["op"], h["size_class"]): h for h in before.get("latency", [])}
    merged: dict[str, list] = {}
    for h in after.get("latency", []):
        then = old_latency.get((h["op"], h["size_class"]))
        counts = [c for _, c in h["buckets"]]
        if then and len(then["buckets"]) == len(counts) and then["count"] <= h["count"]:
            counts = [c - t for c, (_, t) in zip(counts, then["buckets"])]
        acc = merged.setdefault(h["op"], [[u, 0] for u, _ in h["buckets"]])
        for i, c in enumerate(counts):
            if i < len(acc):
                acc[i][1] += c
    for op, acc in merged.items():
        pairs = [(u, c) for u, c in acc]
        out["latency"][op] = {
            "p50": quantile(pairs, 0.5),
            "p99": quantile(pairs, 0.99),
            "count": sum(c for _, c in pairs),
        }
    return out
