"""The README's Python example as printed: its target and its initiator, on this host and between the lab's two
hosts (conftest.lab), the initiator's WRITE read back whole."""

import os
import re
import subprocess
import sys

from conftest import LAB_ENV, in_host

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")


def examples() -> dict:
    """The README's Python blocks that name their file on their first line: file name -> code."""
    with open(os.path.join(ROOT, "README.md")) as f:
        blocks = re.findall(r"```python\n(# (\w+\.py)[^\n]*\n.*?)```", f.read(), re.S)
    return {name: code for code, name in blocks}


def run_pair(tmp_path, target_cmd, initiator_cmd, env):
    """Starts the target, runs the initiator against the name it prints, ends the target; the initiator's
    output."""
    for name, code in examples().items():
        (tmp_path / name).write_text(code)
    target = subprocess.Popen(
        target_cmd(str(tmp_path / "target.py")),
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        name = target.stdout.readline().strip()
        assert name, f"the target did not start: {target.stderr.read()[-2000:] if target.poll() is not None else ''}"
        r = subprocess.run(
            initiator_cmd(str(tmp_path / "initiator.py"), name), env=env, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0, r.stderr[-3000:]
        return r.stdout, name
    finally:
        target.stdin.close()
        assert target.wait(timeout=20) == 0, target.stderr.read()[-2000:]


def test_the_readme_names_its_python_target_and_initiator():
    assert {"target.py", "initiator.py"} <= set(examples()), "README.md lost an example the tests run"


def test_the_readme_example_runs_on_one_host(tmp_path):
    out, name = run_pair(
        tmp_path,
        lambda t: [sys.executable, t, "127.0.0.1"],
        lambda i, n: [sys.executable, i, "127.0.0.1", n],
        dict(os.environ, KVF_LOG_LEVEL="warn"),
    )
    assert name == "127.0.0.1:15000"
    assert out.strip() == f"read back {8 << 12} bytes of 7"


def test_the_readme_example_runs_between_two_hosts(tmp_path, lab):
    out, name = run_pair(
        tmp_path,
        lambda t: in_host("A", sys.executable, t, lab["A"]),
        lambda i, n: in_host("B", sys.executable, i, lab["B"], n),
        LAB_ENV,
    )
    assert name == f"{lab['A']}:15000"
    assert out.strip() == f"read back {8 << 12} bytes of 7"
