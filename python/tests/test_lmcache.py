"""LMCache's own remote backend, as LMCache 0.5.6 released it, unchanged, over
kvfabric's ``mooncake.store``: what an LMCache user who points
``remote_url`` at ``mooncakestore://`` gets with kvfabric's shim instead of
Mooncake. One process stores chunks through LMCache's storage backends
(``CreateStorageBackends``, as LMCache's cache engine makes them), another
loads them, every element compared, through two store nodes in processes
of their own, over tcp and shm; with LMCache's default settings
(``save_chunk_meta`` on: each chunk is stored with its metadata through
``put_parts`` and read back through ``batch_get_buffer``) and with
``save_chunk_meta: false`` (``batch_put_from`` and ``batch_get_into``).

LMCache runs in a venv of its own (KVF_LMCACHE_PYTHON, which `make test`
sets): `pip install lmcache==0.5.6` brings torch with CUDA's wheels, which
import and run on the CPU without a GPU (LMCache picks its CPU device);
kvfabric's wheel and its shim are installed there (`make lmcache-env`)."""

import json
import os
import subprocess

import pytest

from test_store import Nodes

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("KVF_LMCACHE_PYTHON")
CHUNKS = 8

pytestmark = pytest.mark.skipif(not PYTHON, reason="LMCache is not installed (make test sets KVF_LMCACHE_PYTHON)")


def run(role: str, protocol: str, save_chunk_meta: str, env: dict) -> dict:
    done = subprocess.run([PYTHON, os.path.join(HERE, "lmcache_rank.py"), role, protocol, save_chunk_meta,
                           str(CHUNKS)], env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and done.stdout.strip(), f"{role} exited {done.returncode}: {done.stderr[-3000:]}"
    for marker in ("Failed to put", "batch_get_buffer failed", "AttributeError", "Traceback", "batched put error"):
        assert marker not in done.stderr, f"{role}: LMCache logged {marker!r}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("save_chunk_meta", ["default", "false"])
@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_chunks_stored_by_one_lmcache_process_load_in_another(protocol, save_chunk_meta):
    nodes = Nodes(protocol, 2)
    try:
        env = dict(os.environ, KVF_STORE_MEMBERS=nodes.members, KVF_LOG_LEVEL="error", KVF_STORE_DEADLINE_MS="2000")
        put = run("put", protocol, save_chunk_meta, env)
        assert put["completed"] == CHUNKS and put["failed"] == 0, put
        held = [nodes.stats(i)["pages"] for i in range(2)]
        assert sum(held) == CHUNKS, f"the nodes hold {held} pages"
        got = run("get", protocol, save_chunk_meta, env)
        assert (got["contains"], got["found"], got["exact"]) == (CHUNKS, CHUNKS, CHUNKS), got
        assert got["absent_is_none"], "a chunk never stored is a miss"
    finally:
        nodes.close()
