"""verl's checkpoint-engine flow over kvfabric's ``kvfabric`` backend: verl
0.9.1's own registry and import path (``custom_backend_module``), its
interface called as its manager and workers call it, CPU tensors, checked
byte for byte on every rollout rank (verl_workers.py).

verl runs in LMCache's venv, which has torch (KVF_VERL_PYTHON, which `make
test` sets): verl itself is installed there without its dependencies, with
the few modules ``verl.checkpoint_engine`` imports (ray, omegaconf,
tensordict and theirs; the Makefile's verl stamp lists them). verl's own
``mooncake`` backend runs there too, over kvfabric's shim, with SGLang's
StatelessProcessGroup from the released files `make test` unpacks
(KVF_SGLANG_SRC). vLLM and CUDA are not needed.
"""

import json
import os
import subprocess

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = os.environ.get("KVF_VERL_PYTHON") and os.path.abspath(os.environ["KVF_VERL_PYTHON"])
SGLANG = os.environ.get("KVF_SGLANG_SRC") and os.path.abspath(os.environ["KVF_SGLANG_SRC"])

pytestmark = pytest.mark.skipif(
    not PYTHON,
    reason="verl is not installed: set KVF_VERL_PYTHON to the python of a venv with torch, verl==0.9.1 and "
    "kvfabric's wheel (make test does)",
)


def run_workers(backend: str, trainers: int, rollouts: int, bucket: int, steps: int, protocol: str) -> dict:
    env = dict(os.environ)
    if SGLANG:  # verl's Mooncake backend takes its process group from SGLang
        env["PYTHONPATH"] = os.pathsep.join(p for p in (SGLANG, env.get("PYTHONPATH")) if p)
    p = subprocess.run(
        [PYTHON, os.path.join(HERE, "verl_workers.py"), backend]
        + [str(a) for a in (trainers, rollouts, bucket, steps)]
        + [protocol],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=HERE,
        env=env,
    )
    lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
    assert p.returncode == 0 and lines, p.stdout[-3000:] + p.stderr[-3000:]
    return json.loads(lines[-1])


def check_steps(report: dict, steps: int, sent_metrics: bool) -> None:
    assert "errors" not in report, report["errors"]
    assert report["exit_codes"] == [0] * 5
    assert len(report["steps"]) == steps
    for step in report["steps"]:
        sender, idle, *rollouts = step
        assert sender["yielded"] == idle["yielded"] == 74, step
        if sent_metrics:
            assert sender["metrics"]["kvfabric/bytes"] > 1 << 20
            assert idle["metrics"] == {}
        for r in rollouts:
            assert r == {"got": 74, "wrong": [], "left": 0}, step


@pytest.mark.parametrize("protocol", ["tcp", "shm"])
def test_verl_sends_every_step_to_every_rollout_rank_through_its_registry(protocol):
    """Two trainer ranks (rank 0 sends, rank 1 only runs its generator) and
    three rollout ranks, two steps: every rollout rank gets every tensor of
    each step, in order, equal to what was sent (mixed dtypes, one tensor
    larger than the 1 MiB bucket); verl gets the sender's metrics."""
    check_steps(run_workers("kvfabric", 2, 3, 1 << 20, 2, protocol), 2, sent_metrics=True)


@pytest.mark.skipif(not SGLANG, reason="KVF_SGLANG_SRC (SGLang's released files, make test unpacks them) is not set")
def test_verls_own_mooncake_backend_runs_over_the_shim():
    """verl's ``mooncake`` backend as released (``from mooncake.engine import
    TransferEngine``: kvfabric's shim), CPU buffers, its chain of rollout
    ranks with double buffers and magic-byte completion, buckets of 1.5 MiB
    (two a step): every tensor arrives whole on every rollout rank."""
    check_steps(run_workers("mooncake", 2, 3, 3 << 19, 2, "tcp"), 2, sent_metrics=False)
