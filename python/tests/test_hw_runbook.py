"""The frameworks runbook (tests/hw/frameworks.sh) where it cannot really run:
it says what this host lacks, and its plumbing (store nodes, two instances
a step, the prompt to each, the verdict from their answers and metrics)
works against a stand-in of SGLang's and vLLM's servers (fake_framework.py)."""

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
RUNBOOK = os.path.join(HERE, "..", "..", "tests", "hw", "frameworks.sh")


def run(tmp_path, *args, **env):
    out = tmp_path / "report.md"
    p = subprocess.run(
        [RUNBOOK, "--python", sys.executable, "--protocol", "tcp", "--pool", "64mb", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, **env),
    )
    return p, out.read_text() if out.exists() else ""


def test_without_gpus_the_runbook_says_so_and_runs_nothing(tmp_path):
    p, report = run(tmp_path, "--check")
    assert p.returncode == 0 and "fewer than two GPUs here" in p.stdout and report == ""
    p, report = run(tmp_path)
    assert p.returncode == 1 and "fewer than two GPUs here" in p.stdout and report == ""


def test_the_runbook_passes_when_b_takes_the_prompt_from_the_store(tmp_path):
    p, report = run(tmp_path, KVF_HW_FAKE_FRAMEWORK=os.path.join(HERE, "fake_framework.py"))
    assert p.returncode == 0, p.stdout + p.stderr + report
    assert report.count("- PASS:") == 3, report
    assert "B took 2944 of its 3000 prompt tokens from the store" in report
    assert "external_prefix_cache_hits: 2944 tokens" in report
    assert "B's answer is the same as A's" in report


def test_the_runbook_fails_when_b_computed_the_prompt_itself(tmp_path):
    p, report = run(
        tmp_path, "--only", "vllm", KVF_HW_FAKE_FRAMEWORK=os.path.join(HERE, "fake_framework.py"), FAKE_STORAGE_HITS="0"
    )
    assert p.returncode == 1 and report.count("**FAIL**") == 1 and "- PASS" not in report, report


def test_an_instance_that_exits_fails_its_step_at_once(tmp_path):
    p, report = run(
        tmp_path, "--only", "sglang", KVF_HW_FAKE_FRAMEWORK=os.path.join(HERE, "fake_framework.py"), FAKE_EXIT="1"
    )
    assert p.returncode == 1 and "the instances did not start" in report and "exited before serving" in report, report


def test_an_unknown_step_is_refused(tmp_path):
    p, report = run(tmp_path, "--only", "sglang-typo")
    assert p.returncode == 2 and "no such step" in p.stderr and report == ""
