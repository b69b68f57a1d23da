"""The kvfabric command's tools as the docs use them: each shows its own flags with --help, and runs from the
installed package."""

import subprocess
import sys

import pytest


def kvfabric(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvfabric", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("command, tool, flag", [
    ("bench", "kvfabric-bench", "--segment_id"),
    ("metadata-server", "kvfabric-metadata-server", "--require_auth"),
    ("topo", "kvfabric-topo", "--topology_file"),
    ("store-bench", "kvfabric-store-bench", "local"),
    ("settings", "kvfabric-settings", "--markdown"),
])
def test_each_tool_shows_its_own_flags(command, tool, flag):
    r = kvfabric(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{tool}:") and flag in r.stdout, r.stdout[:2000]


def test_settings_prints_the_values_in_force():
    r = subprocess.run([sys.executable, "-m", "kvfabric", "settings"], capture_output=True, text=True, timeout=60,
                       env={"KVF_TX_DEPTH": "512", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "KVF_TX_DEPTH=512\n" in r.stdout


def test_a_bench_mode_still_passes_through():
    r = kvfabric("bench", "initiator", "--no_such_flag")
    assert r.returncode != 0
    assert "no_such_flag" in r.stderr + r.stdout
