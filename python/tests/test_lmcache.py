"""LMCache's own remote backend, as LMCache 0.5.6 released it, unchanged, over
kvfabric's ``mooncake.store``: what an LMCache user who points ``remote_url``
at ``mooncakestore://`` gets with kvfabric's shim instead of Mooncake.

Each LMCache worker runs in its own process (lmcache_rank.py), with the
storage backends LMCache's cache engine makes (``CreateStorageBackends``: a
LocalCPUBackend and a RemoteBackend with its MooncakestoreConnector), over two
store nodes in processes of their own, over tcp and shm. One worker stores
chunks (batched_submit_put_task), another, started before anything was
stored, looks them up (contains, batched_contains, batched_async_contains) and
loads them (batched_get_blocking), every byte, shape, dtype and format
compared; a chunk never stored is a miss. With LMCache's default settings
(``save_chunk_meta`` on: each chunk goes with its metadata through
``put_parts`` and comes back through ``batch_get_buffer``) and with
``save_chunk_meta: false`` (``batch_put_from`` and ``batch_get_into`` on
LMCache's registered CPU pool), where a last chunk shorter than the chunk size
(``save_unfull_chunk``) comes back as long as it was stored.

LMCache runs in a venv of its own (KVF_LMCACHE_PYTHON, which `make test`
sets): `pip install lmcache==0.5.6` brings torch with CUDA's wheels, which
import and run on the CPU without a GPU (LMCache picks its CPU device);
kvfabric's wheel and its shim are installed there (`make lmcache-env`).
"""

import json
import os
import subprocess
import tempfile

import pytest

from test_store import Nodes

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("KVF_LMCACHE_PYTHON") and os.path.abspath(os.environ["KVF_LMCACHE_PYTHON"])
CHUNK = 256  # tokens, as lmcache_rank.py configures LMCache
CHUNK_BYTES = 2 * 4 * CHUNK * 128 * 2  # k and v, 4 layers, 2 heads x 64, bfloat16
# What LMCache logs when a put or a get went wrong, or what Python prints when
# anything raised; the warnings for the keys asked for and never stored are expected.
ERRORS = (
    "Failed to put",
    "Put task failed",
    "Timeout",
    "batch_get_buffer failed",
    "is None for key",
    "batch_get_into failed",
    "batch_get_into threw",
    "Failed to process buffer",
    "Reshape failed",
    "Metadata required",
    "unable to allocate",
    "Failed to allocate",
    "Error occurred",
    "Remote connection failed",
    "Connection is None",
    "Failed to initialize",
    "Buffer registration",
    "AttributeError",
    "Traceback",
    "[kvfabric] [error]",
)

pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason="LMCache is not installed: set KVF_LMCACHE_PYTHON to the python "
    "of a venv with lmcache==0.5.6, kvfabric's wheel and its shim (make test does)",
)


class Worker:
    """An LMCache worker in its own process (lmcache_rank.py). Started
    without waiting, so that workers import torch and LMCache side by side."""

    def __init__(self, spec: dict, env: dict):
        self.log = tempfile.TemporaryFile("w+")
        self.p = subprocess.Popen(
            [PYTHON, os.path.join(HERE, "lmcache_rank.py"), json.dumps(spec)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=HERE,
            env=env,
        )

    def ready(self) -> dict:
        line = self.p.stdout.readline()
        assert line, f"LMCache worker did not start (exit {self.p.wait()}): {self.stderr()[-3000:]}"
        return json.loads(line)

    def __call__(self, **cmd) -> dict:
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()
        line = self.p.stdout.readline()
        assert line, f"LMCache worker exited ({self.p.wait()}) on {cmd['op']}: {self.stderr()[-3000:]}"
        return json.loads(line)

    def stderr(self) -> str:
        self.log.seek(0)
        return self.log.read()

    def quit(self) -> None:
        if self.p.poll() is None:
            try:
                self.p.stdin.write("quit\n")
                self.p.stdin.flush()
            except BrokenPipeError:
                pass

    def close(self) -> str:
        """Its stderr, once it has exited."""
        self.quit()
        try:
            self.p.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        text = self.stderr()
        self.log.close()
        return text


def errors(log: str, expected_misses: list) -> list:
    return [
        line
        for line in log.splitlines()
        if any(e in line for e in ERRORS) and not any(k in line for k in expected_misses)
    ]


@pytest.mark.parametrize("save_chunk_meta", ["default", False])
@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_chunks_one_lmcache_worker_stores_another_loads_byte_exact(protocol, save_chunk_meta):
    nodes = Nodes(protocol, 2)
    env = dict(os.environ, KVF_STORE_MEMBERS=nodes.members, KVF_LOG_LEVEL="error", KVF_STORE_DEADLINE_MS="2000")
    spec = {"protocol": protocol}
    if save_chunk_meta != "default":
        spec["extra"] = {"save_chunk_meta": save_chunk_meta}
    if save_chunk_meta is False:
        # Without metadata a short chunk's length is the only record of its
        # tokens: LMCache reads it into a whole chunk and trims it to what came back.
        spec["config"] = {"save_unfull_chunk": True}
    chunks = [[seed, CHUNK] for seed in range(7)] + [[7, CHUNK if save_chunk_meta == "default" else 100]]
    workers = [Worker(spec, env), Worker(spec, env)]
    logs, absent = ["", ""], []
    try:
        writer = workers[0].ready()
        workers[1].ready()
        assert writer["connector"].endswith(".MooncakestoreConnector")
        assert writer["store"] == "kvfabric.compat.mooncake_store.MooncakeDistributedStore"
        assert writer["save_chunk_meta"] is (save_chunk_meta == "default")
        assert workers[1](op="lookup", chunks=chunks)["prefix"] == 0, "nothing is stored yet"

        put = workers[0](op="put", chunks=chunks)
        assert put["completed"] == len(chunks) and put["failed"] == 0, put
        assert put["refused"] == [], "the store answered LMCache's puts with errors"
        if save_chunk_meta == "default":
            assert put["calls"] == {"put_parts": len(chunks)}, put
        else:
            assert put["calls"] == {"batch_put_from": 1}, put
        # The pages are on the nodes, as long as LMCache wrote them: each
        # chunk's bytes, after its metadata when LMCache stores it.
        held = [nodes.stats(i) for i in range(2)]
        assert sum(h["pages"] for h in held) == len(chunks), held
        stored = sum(tokens * CHUNK_BYTES // CHUNK + writer["header"] for _, tokens in chunks)
        assert sum(h["stored_bytes"] for h in held) == stored, held

        looked = workers[1](op="lookup", chunks=chunks + [[99, CHUNK]])
        assert looked["contains"] == len(chunks)
        assert looked["prefix"] == looked["async_prefix"] == len(chunks), looked
        got = workers[1](op="get", chunks=chunks, absent=[98, 99])
        absent = got["absent_keys"]
        assert (got["found"], got["exact"], got["mismatched"], got["missing"]) == (len(chunks), len(chunks), 0, 0), got
        assert got["absent_found"] == 0, "chunks never stored are misses"
        if save_chunk_meta == "default":
            assert got["calls"] == {"batch_get_buffer": 1}, got
        else:
            assert got["calls"] == {"batch_get_into": 1}, got
    finally:
        for w in workers:
            w.quit()  # both at once: each takes a while to close LMCache and torch
        logs = [w.close() for w in workers]
        nodes.close()
    for role, log in zip(("writer", "reader"), logs):
        assert errors(log, absent) == [], f"the {role} logged errors:\n{log[-3000:]}"
