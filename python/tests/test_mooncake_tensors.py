"""``mooncake.store``'s tensor calls with real torch tensors: one process puts
(whole tensors, batches, tensor-parallel shards, values laid out by the
caller), another reads them back (as tensors, as shards of a rank, into its
own registered memory), every element compared, through store nodes in
processes of their own over tcp and shm.

torch comes from the interpreter that runs LMCache (KVF_LMCACHE_PYTHON, set
by `make test`: a venv with `pip install lmcache==0.5.6`, whose torch imports
without a GPU); kvfabric's wheel and shim are installed there."""

import json
import os
import subprocess

import pytest

from test_store import Nodes

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("KVF_LMCACHE_PYTHON") and os.path.abspath(os.environ["KVF_LMCACHE_PYTHON"])

pytestmark = pytest.mark.skipif(not PYTHON, reason="no interpreter with torch (make test sets KVF_LMCACHE_PYTHON)")


def run(role: str, protocol: str, env: dict) -> dict:
    done = subprocess.run(
        [PYTHON, os.path.join(HERE, "mooncake_tensor_rank.py"), role, protocol],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0 and done.stdout.strip(), f"{role} exited {done.returncode}: {done.stderr[-3000:]}"
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_tensors_put_by_one_process_are_read_by_another(protocol):
    nodes = Nodes(protocol, 2)
    try:
        env = dict(os.environ, KVF_STORE_MEMBERS=nodes.members, KVF_LOG_LEVEL="error", KVF_STORE_DEADLINE_MS="2000")
        for role in ("put", "get"):
            checks = run(role, protocol, env)
            assert checks and all(checks.values()), f"{role}: failed {[k for k, v in checks.items() if not v]}"
        held = sum(nodes.stats(i)["pages"] for i in range(2))
        assert held >= 12, f"the nodes hold {held} pages"
    finally:
        nodes.close()
