"""The soak's store traffic: node processes with small pools, client
processes with random batches, nodes killed and restarted, joining and
leaving; every byte of every GET checked, every acknowledged page accounted
for.

Nodes (``run_node``) are an engine and a kvfabric.Store with a pool each,
tcp and auto mixed, members of a kvfabric metadata-server the driver starts,
on fixed control addresses so a node restarts under its name; each prints
its pool's counters every quarter second and logs at debug level (its page
ledger: page_ledger.py). Clients (``run_client``) are a protocol=auto engine
and a store without a pool, used by THREADS threads at once over the
client's own keys: random batch_put, batch_get, batch_exists, batch_remove,
pins (held up to a second and a half, a key by one thread at a time) and
audits, batches of 1 to 32 keys, pages of 40 B to 2 MiB in one to three
buffers at random (unaligned) addresses, a few hot keys overwritten by every
thread. The clients' working set is larger than the pools, so pages are
evicted.

A page is derived from its key and version: a header (magic, key hash,
version, length) and bytes from a generator seeded by both. The client keeps
the BLAKE2b digest of every version it put; a GET's bytes must be exactly the
version the header names, of that key, put no later than the GET ended
(refused puts never count), and that version must not have been superseded
(a put or removal of the key acknowledged after it, before the GET began):
anything else is a wrong byte, except a superseded version while placement
moves (a node down or just back: its keys live elsewhere meanwhile), which is
counted as stale and must fall in such a window. Misses are always allowed
(a cache); per-key errors, stale pages, unpins that find no pin and refusals
with pinned pages are collected as issues that the driver explains by
membership changes and pins (``explain``) or reports. An audit asks whether
keys whose last put was acknowledged, and left alone since, still exist; the
driver follows each that does not through the nodes' ledgers and counts it
lost unless it was evicted or its node ended first.
"""

from __future__ import annotations

import hashlib
import json
import re
import signal
import struct
import sys
import threading
import time
from collections import Counter


MiB = 1 << 20
DEADLINE_MS = 2000
# Store settings of nodes and clients: a short deadline and read window (a
# freed slot comes back soon), a node that failed is tried again soon.
SETTINGS = {
    "KVF_STORE_DEADLINE_MS": DEADLINE_MS,
    "KVF_STORE_READ_WINDOW_MS": 2500,
    "KVF_STORE_DOWN_RETRY_MS": 500,
    "KVF_STORE_MEMBERSHIP_REFRESH_MS": 500,
    "KVF_TRANSFER_TIMEOUT_MS": DEADLINE_MS,
}
# A batch call that takes longer than this hangs (the store bounds it by its deadline).
SLOW_S = DEADLINE_MS / 1000 + 3
# KVF_STORE_HANDOFF_MS's default: how long after a member enters keys may still move.
HANDOFF_S = 10.0
# After a node is back, placement may still leave it out this long: down retry, refresh, a deadline, slack.
SETTLE_S = 0.5 + 0.5 + DEADLINE_MS / 1000 + 1.5
# What a node's restart may cost a key: Timeout, FabricError, NetworkError, and Unavailable (the slots a node
# granted are gone when it restarts, and no time is left to put the key again).
RESTART_CODES = {"5", "6", "7", "9"}
HEADER = struct.Struct("<8sQQQ")  # magic, key hash, version, length
MAGIC = b"kvfsoak1"
PEER = re.compile(r"\b(\d+\.\d+\.\d+\.\d+:\d+)\b")  # the nodes (control addresses, engines) a message names
PINNED = re.compile(r"bytes pinned \((\d+) pages\)")
KEY = re.compile(r"\bc\d+/layer\d/page\d+\b")  # a client's key, as Client names them


def key_hash(key: str) -> int:
    return int.from_bytes(hashlib.blake2b(key.encode(), digest_size=8).digest(), "little")


def page_length(kh: int, version: int) -> int:
    import random

    r = random.Random(kh ^ (version * 0x9E3779B97F4A7C15))
    kind = r.random()
    if kind < 0.15:
        return r.randint(HEADER.size + 8, 4096)
    base = r.choice([4096, 16384, 65536, 131072, 131072, 262144, 524288]) if kind < 0.9 else r.choice([MiB, 2 * MiB])
    return max(HEADER.size + 8, base - (r.randrange(0, 4096) if r.random() < 0.3 else 0))


def page_bytes(key: str, kh: int, version: int) -> bytes:
    import numpy as np

    n = page_length(kh, version)
    body = np.random.Generator(np.random.PCG64([kh, version])).bytes(n - HEADER.size)
    return HEADER.pack(MAGIC, kh, version, n) + body


def digest(b) -> bytes:
    return hashlib.blake2b(b, digest_size=16).digest()


# -- node ----------------------------------------------------------------------
def run_node(protocol: str, listen: str, metadata: str, pool_bytes: int) -> None:
    """A store node until SIGTERM, printing its name, then its counters every quarter second. It logs at debug
    level, so its log has a line for every page it stored and every page gone, and why (the ledger)."""
    import kvfabric

    # Blocked before the engine starts its threads, which inherit the mask: a SIGTERM that reached one of them
    # would end the process without closing the store (its pages not handed over).
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
    with kvfabric.Engine(
        protocol=protocol, metadata=metadata, settings={**SETTINGS, "KVF_LOG_LEVEL": "debug"}
    ) as engine:
        store = kvfabric.Store(engine, pool_bytes=pool_bytes, listen=listen, settings=SETTINGS)
        print(json.dumps({"name": store.name, "segment": engine.name}), flush=True)
        while signal.sigtimedwait({signal.SIGTERM}, 0.25) is None:
            print(json.dumps({"stats": store.stats()}), flush=True)
        print(json.dumps({"stats": store.stats()}), flush=True)
        store.close()


# -- client ----------------------------------------------------------------------
class Log:
    """What the client's threads did to each key, for checking what GETs return."""

    def __init__(self):
        self.mu = threading.Lock()
        self.next_version = 1
        # key -> {version: its put}: start, end, state ("flight", "ok", "failed", "refused"), digest, length
        self.versions = {}
        self.acks = {}  # key -> [(start, end)] of acknowledged puts and removals
        self.removes = {}  # key -> [(start, end)] of removals (any result)
        self.removing = {}  # key -> [start] of removals in flight

    def allocate(self) -> int:
        with self.mu:
            self.next_version += 1
            return self.next_version - 1

    def started(self, key: str, v: int, start: float, page: bytes) -> None:
        with self.mu:
            self.versions.setdefault(key, {})[v] = {
                "start": start,
                "end": None,
                "state": "flight",
                "digest": digest(page),
                "length": len(page),
            }

    def put_done(self, key: str, v: int, state: str, end: float) -> None:
        with self.mu:
            rec = self.versions[key][v]
            rec["end"], rec["state"] = end, state
            if state == "ok":
                self.acks.setdefault(key, []).append((rec["start"], end))

    def removal_started(self, key: str, start: float) -> None:
        with self.mu:
            self.removing.setdefault(key, []).append(start)

    def removed(self, key: str, start: float, end: float, acknowledged: bool) -> None:
        with self.mu:
            self.removing[key].remove(start)
            self.removes.setdefault(key, []).append((start, end))
            if acknowledged:
                self.acks.setdefault(key, []).append((start, end))

    def lookup(self, key: str, v: int):
        with self.mu:
            rec = self.versions.get(key, {}).get(v)
            return dict(rec) if rec else None

    def superseded(self, key: str, rec: dict, before: float) -> bool:
        """Whether a put or removal of `key` acknowledged before `before` began after `rec`'s put ended."""
        if rec["state"] != "ok":
            return False  # failed, maybe stored later: never known to be superseded
        with self.mu:
            return any(s > rec["end"] and e < before for s, e in self.acks.get(key, []))

    def put_between(self, key: str, t0: float, t1: float) -> bool:
        """Whether a put of `key` (of any outcome) ran during [t0, t1]."""
        with self.mu:
            return any(
                r["start"] <= t1 and (r["end"] is None or r["end"] >= t0) for r in self.versions.get(key, {}).values()
            )

    def removed_between(self, key: str, t0: float, t1: float) -> bool:
        """Whether a removal of `key` ran during [t0, t1]: one that ended, or one still in flight that began by t1
        (its node may have removed the key long before its answer comes back)."""
        with self.mu:
            return any(e >= t0 and s <= t1 for s, e in self.removes.get(key, [])) or any(
                s <= t1 for s in self.removing.get(key, [])
            )

    def held_put(self, key: str, by: float):
        """(version, its put) when the key's last put was acknowledged and nothing else touched the key: every other
        put and removal of it ended before that put began, and none began since (by `by`); else None."""
        with self.mu:
            versions = self.versions.get(key, {})
            if not versions:
                return None
            v, rec = max(versions.items(), key=lambda kv: kv[1]["start"])
            if rec["state"] != "ok" or rec["start"] > by:
                return None
            others = [r for u, r in versions.items() if u != v]
            if any(r["end"] is None or r["end"] >= rec["start"] for r in others):
                return None
            if self.removing.get(key) or any(e >= rec["start"] for _, e in self.removes.get(key, [])):
                return None
            return v, dict(rec)

    def ever_started(self, key: str, by: float, longer_than: int = 0) -> bool:
        """Whether a put of `key` (of a page longer than `longer_than`) began by `by`."""
        with self.mu:
            return any(r["start"] <= by and r["length"] > longer_than for r in self.versions.get(key, {}).values())


class Arena:
    """Registered memory handed out as pieces at random (unaligned) offsets."""

    def __init__(self, engine, size: int, rng):
        import numpy as np

        self.buf = np.zeros(size, dtype=np.uint8)
        engine.register(self.buf)
        self.rng, self.at = rng, 0

    def reset(self) -> None:
        self.at = 0

    def pieces(self, total: int) -> list:
        """`total` bytes as one to three (start, length) pieces, apart, or [] when the arena is full."""
        count = min(total, self.rng.choice([1, 1, 2, 3]))
        cuts = sorted(self.rng.sample(range(1, total), count - 1)) if count > 1 else []
        out, prev = [], 0
        for cut in cuts + [total]:
            start = self.at + self.rng.randrange(0, 4096)
            if start + cut - prev > len(self.buf):
                return []
            out.append((start, cut - prev))
            self.at = start + cut - prev
            prev = cut
        return out

    def views(self, pieces: list) -> list:
        return [self.buf[s : s + n] for s, n in pieces]


class Client:
    """One client process: a store, its keys, and the checks of every answer."""

    def __init__(self, index: int, metadata: str, keys: int, seed: int):
        import kvfabric

        self.kvf = kvfabric
        self.miss = -kvfabric.NotFoundError.code
        self.busy = -kvfabric.BusyError.code
        self.engine = kvfabric.Engine(
            protocol="auto", metadata=metadata, settings={**SETTINGS, "KVF_LOG_LEVEL": "info"}
        )
        self.store = kvfabric.Store(self.engine, settings=SETTINGS)
        self.keys = [f"c{index}/layer{i % 4}/page{i}" for i in range(keys)]
        self.hashes = {k: key_hash(k) for k in self.keys}
        self.hot = self.keys[:8]  # overwritten by both threads at once
        self.max_len = {k: HEADER.size + 8 for k in self.keys}
        self.log = Log()
        self.mu = threading.Lock()
        self.c = Counter()
        self.errors_by_code = Counter()
        self.wrong = []  # wrong bytes: the run fails
        self.issues = []  # to be explained by restarts or pins
        self.pin_intervals = []  # (pinned, unpinned, keys, keys whose unpin failed)
        self.pinned = set()  # keys pinned now (by one thread each)
        # Acknowledged pages the store no longer had (audit): the driver accounts for each from the nodes' logs.
        self.missing = []
        self.audits = Counter()
        self.seed = seed

    # -- shared records
    def count(self, **kw) -> None:
        with self.mu:
            self.c.update(kw)

    def issue(self, kind: str, op: str, t0: float, t1: float, errors: list) -> None:
        """One batch's keys that need explaining (explain() says which kinds can be): `errors` are (status code,
        message) pairs."""
        codes = Counter(str(code) for code, _ in errors)
        peers = sorted({m for _, text in errors for m in PEER.findall(text)})
        with self.mu:
            self.issues.append(
                {
                    "kind": kind,
                    "op": op,
                    "start": t0,
                    "end": t1,
                    "keys": len(errors),
                    "codes": codes,
                    "peers": peers,
                    "message": errors[0][1][:800] if errors else "",
                }
            )

    def wrong_bytes(self, key: str, what: str, t1: float) -> None:
        with self.mu:
            self.wrong.append({"key": key, "what": what, "time": t1})
        print(f"store client: WRONG BYTES for {key}: {what}", file=sys.stderr, flush=True)

    def failed(self, op: str, t0: float, t1: float, codes: list, keys: list, expected=frozenset()) -> list:
        """Sorts a batch's per-key failures (negative codes; those at `expected` indices are answers); returns
        the indices of those that need explaining."""
        errors = {e.index: e for e in self.store.last_errors}
        need = []
        for i, code in enumerate(codes):
            # A miss is an answer (an unpin's is checked by unpin), and so are the expected failures.
            if code >= 0 or (code == self.miss and op != "put") or i in expected:
                continue
            e = errors.get(i)
            with self.mu:
                self.errors_by_code[self.kvf.errors.error_for(-code, "").__class__.__name__] += 1
            if code == self.busy and op == "put":
                pinned = PINNED.search(e.message if e else "")
                if pinned and int(pinned.group(1)) > 0:
                    self.issue("busy_pinned", op, t0, t1, [(e.code, e.message)])
                    self.count(refusals_pinned=1)
                self.count(refusals=1)
                continue
            need.append((i, -code, e.message if e else f"{keys[i]}: (no message)"))
        if need:
            self.issue("error", op, t0, t1, [(code, text) for _, code, text in need])
        return [i for i, _, _ in need]

    def call(self, op: str, fn, *args):
        t0 = time.monotonic()
        out = fn(*args)
        t1 = time.monotonic()
        self.count(calls=1)
        if t1 - t0 > SLOW_S:  # never explained: the store's deadline bounds every call
            self.issue("slow", op, t0, t1, [(0, f"{op} of {len(args[0])} keys took {t1 - t0:.1f} s")])
        return out, t0, t1

    # -- operations
    def pick(self, rng, most: int) -> list:
        """1 to `most` distinct keys, from the hot few (overwritten by every thread) three times in ten."""
        keys = self.hot if rng.random() < 0.3 else self.keys
        return rng.sample(keys, rng.randint(1, min(most, len(keys))))

    def put(self, rng, src: Arena) -> None:
        batch = self.pick(rng, 8)
        src.reset()
        bufs, versions = [], []
        for key in batch:
            t, v = time.monotonic(), self.log.allocate()
            page = page_bytes(key, self.hashes[key], v)
            pieces = src.pieces(len(page))
            if not pieces:
                break
            at = 0
            for view in src.views(pieces):
                view[:] = memoryview(page)[at : at + len(view)]
                at += len(view)
            self.log.started(key, v, t, page)
            with self.mu:
                self.max_len[key] = max(self.max_len[key], len(page))
            bufs.append(src.views(pieces))
            versions.append(v)
        batch = batch[: len(bufs)]
        codes, t0, t1 = self.call("put", self.store.batch_put, batch, bufs)
        need = set(self.failed("put", t0, t1, codes, batch))
        for i, (key, v, code) in enumerate(zip(batch, versions, codes)):
            state = "ok" if code == 0 else ("failed" if i in need else "refused")
            self.log.put_done(key, v, state, t1)
            if code == 0:
                self.count(puts=1, put_bytes=sum(len(b) for b in bufs[i]))
            else:
                self.count(put_failures=1)

    def get(self, rng, dst: Arena) -> None:
        import numpy as np

        batch = self.pick(rng, 16)
        dst.reset()
        bufs = []
        for key in batch:
            with self.mu:
                n = self.max_len[key]
            pieces = dst.pieces(n + rng.randrange(0, 4096))
            if not pieces:
                break
            views = dst.views(pieces)
            for view in views:
                view.fill(0xA5)  # nothing of an earlier GET may pass for this one's bytes
            bufs.append(views)
        batch = batch[: len(bufs)]
        codes, t0, t1 = self.call("get", self.store.batch_get, batch, bufs)
        # Buffers too small for a page put while they were sized: the answer to expect.
        small = {
            i
            for i, (key, code) in enumerate(zip(batch, codes))
            if code == -self.kvf.InvalidArgumentError.code
            and self.log.ever_started(key, t1, longer_than=sum(len(b) for b in bufs[i]))
        }
        self.count(buffers_too_small=len(small))
        self.failed("get", t0, t1, codes, batch, small)
        stale = []
        for i, (key, code) in enumerate(zip(batch, codes)):
            self.count(gets=1)
            if code == self.miss:
                self.count(misses=1)
                continue
            if code < 0:
                continue
            got = np.concatenate(bufs[i])[:code].tobytes() if len(bufs[i]) > 1 else bufs[i][0][:code].tobytes()
            verdict = self.check(key, got, t0, t1)
            if verdict == "stale":
                stale.append((0, f"{key}: a superseded version"))
            elif verdict:
                self.wrong_bytes(key, verdict, t1)
            else:
                self.count(hits=1, hit_bytes=code)
        if stale:
            self.count(stale=len(stale))
            self.issue("stale", "get", t0, t1, stale)

    def check(self, key: str, got: bytes, t0: float, t1: float) -> str:
        """'' when `got` is a version of `key` a GET over [t0, t1] may return, 'stale' for a superseded one,
        else what is wrong."""
        if len(got) < HEADER.size:
            return f"{len(got)} bytes, shorter than a page header"
        magic, kh, v, n = HEADER.unpack_from(got)
        if magic != MAGIC or kh != self.hashes[key]:
            other = next((k for k, h in self.hashes.items() if h == kh and magic == MAGIC), None)
            return f"the page of another key ({other})" if other else f"no page header (starts {got[:16].hex()})"
        if n != len(got):
            return f"the header says {n} bytes, the GET returned {len(got)}"
        rec = self.log.lookup(key, v)
        if rec is None or rec["start"] > t1:
            return f"version {v}, never put (or put after the GET ended)"
        if rec["state"] == "refused":
            return f"version {v}, whose put was refused"
        if digest(got) != rec["digest"]:
            import numpy as np

            a, b = np.frombuffer(got, np.uint8), np.frombuffer(page_bytes(key, kh, v), np.uint8)
            diff = np.flatnonzero(a[: len(b)] != b[: len(a)])
            return f"version {v}: {len(diff)} of {n} bytes differ, the first at +{diff[0] if len(diff) else len(b)}"
        return "stale" if self.log.superseded(key, rec, t0) else ""

    def exists(self, rng) -> None:
        batch = self.pick(rng, 32)
        found, t0, t1 = self.call("exists", self.store.batch_exists, batch)
        for key, f in zip(batch, found):
            if f and not self.log.ever_started(key, t1):  # never explained
                self.issue("exists_never_put", "exists", t0, t1, [(0, f"{key} exists, but was never put")])
        self.count(exists=len(batch), exists_hits=sum(found))

    def remove(self, rng) -> None:
        batch = self.pick(rng, 4)
        begun = time.monotonic()
        for key in batch:
            self.log.removal_started(key, begun)
        codes, t0, t1 = self.call("remove", self.store.batch_remove, batch)
        self.failed("remove", t0, t1, codes, batch)
        for key, code in zip(batch, codes):
            self.log.removed(key, begun, t1, code in (0, self.miss))
        self.count(removes=len(batch), removed=sum(c == 0 for c in codes))

    def audit(self, rng) -> None:
        """Asks whether keys whose last put was acknowledged, and left alone since, still exist: each that does not
        is kept (Client.missing) for the driver to account for (evicted for a newer page, or its node gone) or
        count as lost."""
        now = time.monotonic()
        held = [
            (k, h)
            for k in rng.sample(self.keys, min(32, len(self.keys)))
            if k not in self.hot
            for h in [self.log.held_put(k, now)]
            if h
        ]
        if not held:
            return
        keys = [k for k, _ in held]
        before = set(self.store.members())
        found, t0, t1 = self.call("exists", self.store.batch_exists, keys)
        members = sorted(before & set(self.store.members()))  # in the client's placement throughout
        for (key, (v, rec)), f in zip(held, found):
            if f:
                continue
            again = self.log.held_put(key, t1)  # still nothing else done to the key through the call
            if again and again[0] == v:
                with self.mu:
                    self.missing.append(
                        {
                            "key": key,
                            "version": v,
                            "put_start": rec["start"],
                            "put_end": rec["end"],
                            "length": rec["length"],
                            "audit_start": t0,
                            "audit_end": t1,
                            "members": members,
                        }
                    )
        self.count(audited=len(held), audit_missing=sum(not f for f in found))

    def pin(self, rng, held: list) -> None:
        # A key is pinned by one holder at a time: pins are counted per key, not per holder, so with two the
        # second's unpin could find the count that a removal reset and the first's unpin took down.
        with self.mu:
            batch = [k for k in self.pick(rng, 6) if k not in self.pinned]
            self.pinned.update(batch)
        if not batch:
            return
        codes, t0, t1 = self.call("pin", self.store.batch_pin, batch)
        self.failed("pin", t0, t1, codes, batch)
        keys = [k for k, c in zip(batch, codes) if c == 0]
        with self.mu:
            self.pinned.difference_update(set(batch) - set(keys))
            failed = sum(c < 0 and c != self.miss for c in codes)
            if failed:  # maybe pinned all the same (a reply lost), never unpinned
                self.pin_intervals.append((t0, t1, 0, failed))
        if keys:
            held.append((keys, t0, time.monotonic() + rng.uniform(0.3, 1.5)))
        self.count(pins=len(keys))

    def unpin(self, held: list, everything: bool) -> None:
        now = time.monotonic()
        for item in [h for h in held if everything or h[2] <= now]:
            held.remove(item)
            keys, pinned_at, _ = item
            codes, t0, t1 = self.call("unpin", self.store.batch_unpin, keys)
            self.failed("unpin", t0, t1, codes, keys)
            lost = [k for k, c in zip(keys, codes) if c == self.miss and not self.log.removed_between(k, pinned_at, t1)]
            # A put to a key's new home removes its copy from the previous home, pins and all.
            moved = [k for k in lost if self.log.put_between(k, pinned_at, t1)]
            for kind, which in (("unpin_lost_put", moved), ("unpin_lost", [k for k in lost if k not in moved])):
                if which:
                    self.issue(kind, "unpin", pinned_at, t1, [(-self.miss, f"{k}: its pin was gone") for k in which])
            # A pin whose unpin failed, not for a removal of its key, may stay on a node (one that held a copy
            # while the key's home was out of placement): it counts as held from then on.
            with self.mu:
                self.pin_intervals.append(
                    (pinned_at, t1, len(keys), len(lost) + sum(c < 0 and c != self.miss for c in codes))
                )
                self.pinned.difference_update(keys)
            self.count(unpins=sum(c == 0 for c in codes))

    def worker(self, t: int, end: float) -> None:
        import random

        rng = random.Random(self.seed * 31 + t)
        src = Arena(self.engine, 24 * MiB, rng)
        dst = Arena(self.engine, 40 * MiB, rng)
        held = []
        ops = [
            (self.put, (rng, src)),
            (self.get, (rng, dst)),
            (self.exists, (rng,)),
            (self.remove, (rng,)),
            (self.pin, (rng, held)),
            (self.audit, (rng,)),
        ]
        while time.monotonic() < end:
            self.unpin(held, everything=False)
            fn, args = rng.choices(ops, weights=[35, 45, 8, 5, 3, 4])[0]
            fn(*args)
        self.unpin(held, everything=True)


def run_client(index: int, metadata: str, keys: int, threads: int, duration: float, seed: int, out_path: str) -> int:
    client = Client(index, metadata, keys, seed)
    end = time.monotonic() + duration
    crashed = []

    def work(t: int) -> None:
        try:
            client.worker(t, end)
        except BaseException:
            crashed.append(t)
            raise

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    stats = client.store.stats()
    client.store.close()
    client.engine.close()
    with open(out_path, "w") as f:
        json.dump(
            {
                "counts": client.c,
                "errors_by_code": client.errors_by_code,
                "wrong": client.wrong,
                "issues": client.issues,
                "pin_intervals": client.pin_intervals,
                "missing": client.missing,
                "store_stats": stats,
            },
            f,
        )
    return 1 if crashed else 0


if __name__ == "__main__":
    if sys.argv[1] == "node":  # node PROTOCOL LISTEN METADATA POOL_BYTES
        run_node(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:  # client INDEX METADATA KEYS THREADS DURATION SEED OUT
        a = sys.argv[2:]
        sys.exit(run_client(int(a[0]), a[1], int(a[2]), int(a[3]), float(a[4]), int(a[5]), a[6]))
