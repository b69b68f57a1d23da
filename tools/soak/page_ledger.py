"""Where each page went: the store nodes' ledgers, and the accounting of acknowledged pages the store lost.

A store node logging at debug level writes a line for every page it stores and every page that leaves its pool,
and why (``store node ADDR: page EVENT: key "K", generation G, N bytes``; EVENT is stored, evicted, removed,
overwritten or handed over). ``read_ledger`` collects those lines for some keys; ``account`` follows an
acknowledged page from the node that stored it, through its hand-overs, to where it went.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

# A kvfabric log line: its local wall-clock stamp (milliseconds), then the text.
LOG_LINE = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d+)?\] (.*)")
PAGE_LINE = re.compile(
    r"store node (\S+): page (stored|evicted|removed|overwritten|handed over): "
    r'key "((?:[^"\\]|\\.)*)", generation (\d+), (\d+) bytes'
)
# Log stamps are to the millisecond, and a line is written a moment after what it tells.
SLACK_S = 0.005
# A hand-over commits the page at its new home before its old home lets it go.
HANDOVER_S = 5.0


@dataclass(frozen=True)
class PageEvent:
    at: float  # time.monotonic() of this process
    node: str  # the node's name (control address)
    incarnation: int  # which run of the node (its restarts count up)
    what: str  # stored, evicted, removed, overwritten, handed over
    generation: int
    length: int = -1  # the page's bytes (-1: not known)


def log_time(line: str, wall_to_monotonic: float):
    """The monotonic time of a kvfabric log line, or None for another line."""
    m = LOG_LINE.match(line)
    if not m:
        return None
    return time.mktime(time.strptime(m.group(1), "%Y-%m-%d %H:%M:%S")) + float(m.group(2) or 0) - wall_to_monotonic


def read_ledger(logs: list, keys: set) -> dict:
    """The page events of `keys`, oldest first: key -> [PageEvent]. `logs` lists (node name, incarnation, path)."""
    wall_to_monotonic = time.time() - time.monotonic()
    out = {}
    for node, incarnation, path in logs:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    if " page " not in line:
                        continue
                    m = PAGE_LINE.search(line)
                    if not m or m.group(3) not in keys:
                        continue
                    at = log_time(line, wall_to_monotonic)
                    if at is not None:
                        out.setdefault(m.group(3), []).append(
                            PageEvent(at, node, incarnation, m.group(2), int(m.group(4)), int(m.group(5)))
                        )
        except OSError:
            pass
    for events in out.values():
        events.sort(key=lambda e: e.at)
    return out


def count_events(paths: list) -> dict:
    """How many page events of each kind the logs at `paths` hold."""
    counts = {}
    for path in paths:
        try:
            with open(path, errors="replace") as f:
                for line in f:
                    m = PAGE_LINE.search(line) if " page " in line else None
                    if m:
                        counts[m.group(2)] = counts.get(m.group(2), 0) + 1
        except OSError:
            pass
    return counts


def account(missing: dict, events: list, ended: dict, entered: dict = None, lag_s: float = 0.0) -> tuple:
    """Why an acknowledged page was gone when a client asked: (verdict, path). `missing` has the put's and the
    question's times (put_start, put_end, audit_start, audit_end); `events` are the key's PageEvents, oldest first;
    `ended[(node, incarnation)]` is when that run of the node was told to end (absent: it ran to the end);
    `entered[(node, incarnation)]` when it began to serve, and `lag_s` how long a client may take to see it.

    The page is the last one stored during the put, of the put's length when `missing["length"]` gives it (a later
    put of the key may store its page within the log stamps' slack). From there, each hand-over leads to the node
    that stored the key just before its old home let it go. The verdict is "evicted" or "node gone" when the page
    was evicted, or its node ended, before the question ended: something newer took its room, or no replica could
    outlive its node. A page still in the pool of a node that began to serve less than `lag_s` before the question
    ended is "on a member not seen yet": the client asked where the key lived before that node entered (a documented
    miss, until its next refresh). One on a node missing from the client's placement before or after the question
    (`missing["members"]`, when given, holds the members in it at both times) is "on a member out of the client's
    view": the client had found it unreachable, and counts its keys as misses until it answers again. Anything else
    is a loss: "lost: " and what happened instead (nothing stored, removed or overwritten with no request to, handed
    over to no node, or still in its pool while the store said it had no page).
    `path` lists the events followed."""
    begin, until = missing["put_start"] - SLACK_S, missing["audit_end"] + SLACK_S
    length = missing.get("length", -1)
    stored = [
        e
        for e in events
        if e.what == "stored"
        and begin <= e.at <= missing["put_end"] + SLACK_S
        and (length < 0 or e.length < 0 or e.length == length)
    ]
    if not stored:
        return "lost: no node stored it during its put", []
    page, path = stored[-1], [stored[-1]]
    while True:
        same = (page.node, page.incarnation, page.generation)
        gone = next(
            (
                e
                for e in events
                if (e.node, e.incarnation, e.generation) == same and e.what != "stored" and e.at >= page.at - SLACK_S
            ),
            None,
        )
        end = ended.get((page.node, page.incarnation))
        if gone is None or gone.at > until:
            if end is not None and end <= until:
                return "node gone", path
            if (entered or {}).get((page.node, page.incarnation), float("-inf")) > until - lag_s:
                return "on a member not seen yet", path
            if page.node not in missing.get("members", [page.node]):
                return "on a member out of the client's view", path
            return "lost: still in its pool", path
        path.append(gone)
        if end is not None and end <= gone.at:
            return "node gone", path
        if gone.what == "evicted":
            return "evicted", path
        if gone.what != "handed over":
            return f"lost: {gone.what}", path
        moved = [
            e
            for e in events
            if e.what == "stored"
            and e.node != page.node
            and e not in path
            and max(page.at, gone.at - HANDOVER_S) - SLACK_S <= e.at <= gone.at + SLACK_S
        ]
        if not moved:
            return "lost: handed over, and no other node stored it", path
        page = moved[-1]
        path.append(page)
