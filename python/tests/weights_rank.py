"""A member of a weight sync for test_weights.py, speaking JSON lines
(json_process.serve). Started with {"protocol"}, it answers "ready" with its
WeightSync's description; then "connect" (members, me), "send" (version:
member 0 sends the test model of that version) and "receive" (version: the
others check every tensor against the same model and report)."""

import json
import sys

import numpy as np
from json_process import serve

import kvfabric
from kvfabric.weights import WeightSync

spec = json.loads(sys.argv[1])


def model(version: int):
    """Mixed dtypes and sizes against 1 MiB buckets: tensors larger than a
    bucket, many far smaller, an empty one, a scalar."""
    rng = np.random.default_rng(version)
    out = [("embed", rng.standard_normal((700, 500), dtype=np.float32))]
    for i in range(20):
        out.append((f"layers.{i}.norm", rng.standard_normal(257).astype(np.float16)))
        out.append((f"layers.{i}.w", rng.integers(-128, 127, (64, 96), dtype=np.int8)))
    out += [("empty", np.zeros((0, 4), np.float32)), ("scale", np.full((), float(version)))]
    out.append(("lm_head", rng.standard_normal((900, 700)).astype(np.float32)))
    return out


engine = kvfabric.Engine(protocol=spec["protocol"])
sync = WeightSync(engine, bucket_bytes=1 << 20, manifest_bytes=64 << 10, timeout=spec.get("timeout", 10))


class TrainerFailed(Exception):
    """The sender's tensors stopped coming (a trainer that failed mid-step)."""


def cut_short(tensors, after: int):
    for i, pair in enumerate(tensors):
        if i == after:
            raise TrainerFailed(f"no tensor after {after}")
        yield pair


def handle(cmd: dict) -> dict:
    try:
        if cmd["op"] == "connect":
            sync.connect(cmd["members"], cmd["me"])
            return {"parents": sync.parents}
        if cmd["op"] == "send":
            sync.send(cmd["version"], model(cmd["version"]))
            return {"sent": len(model(cmd["version"]))}
        if cmd["op"] == "send_part":  # fails after `tensors` tensors, some buckets sent
            try:
                sync.send(cmd["version"], cut_short(model(cmd["version"]), cmd["tensors"]))
            except TrainerFailed as e:
                return {"failed": str(e)}
            return {"sent": "all"}
        want = model(cmd["version"])
        got = 0
        before = sync.stats()
        for (name, t), (want_name, w) in zip(sync.receive(cmd["version"]), want, strict=True):
            if name != want_name or t.dtype != w.dtype or t.shape != w.shape or not np.array_equal(t, w):
                return {"bad": name}
            got += 1
        after = sync.stats()
        # The stats count what this version handed out, and the time it took.
        counted = (
            after["bytes"] - before["bytes"] == sum(w.nbytes for _n, w in want) and after["buckets"] > before["buckets"]
        )
        return {"received": got, "counted": counted and after["checksum_s"] > before["checksum_s"]}
    except kvfabric.KvfabricError as e:
        return {"error": f"{type(e).__name__}: {e}"}


serve({"description": sync.describe()}, handle)
sync.close()
engine.close()
