"""GPU memory from Python. Without a GPU, the fake CUDA driver library that
the CMake build makes (tests/support/fake_cuda.c) stands in: a DLPack object
on a CUDA device registers as cuda:N and moves over tcp through the staging
path. The driver is loaded once per process, so the check runs in its own."""

import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
FAKE = os.environ.get("KVF_FAKE_CUDA_LIBRARY", os.path.join(HERE, "..", "..", "build", "tests", "libfake_cuda.so"))


@pytest.mark.skipif(
    not os.path.exists(FAKE),
    reason=f"no fake CUDA driver at {FAKE} (build the C++ tree first: make build, or set KVF_FAKE_CUDA_LIBRARY)",
)
def test_dlpack_cuda_buffer_registers_and_moves_through_staging():
    env = dict(os.environ, KVF_CUDA_LIBRARY=os.path.abspath(FAKE), KVF_LOG_LEVEL="warn")
    r = subprocess.run(
        [sys.executable, os.path.join(HERE, "gpu_fake_driver.py")], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stdout + r.stderr
