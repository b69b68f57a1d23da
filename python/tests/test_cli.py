"""The kvfabric command's tools as the docs use them: each shows its own flags with --help, and runs from the
installed package."""

import json
import os
import re
import subprocess
import sys
import sysconfig

import pytest


def kvfabric(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvfabric", *args], capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(
    "command, tool, flag",
    [
        ("bench", "kvfabric-bench", "--segment_id"),
        ("metadata-server", "kvfabric-metadata-server", "--require_auth"),
        ("topo", "kvfabric-topo", "--topology_file"),
        ("store-bench", "kvfabric-store-bench", "local"),
        ("settings", "kvfabric-settings", "--markdown"),
    ],
)
def test_each_tool_shows_its_own_flags(command, tool, flag):
    r = kvfabric(command, "--help")
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"{tool}:") and flag in r.stdout, r.stdout[:2000]


def test_settings_prints_the_values_in_force():
    r = subprocess.run(
        [sys.executable, "-m", "kvfabric", "settings"],
        capture_output=True,
        text=True,
        timeout=60,
        env={"KVF_TX_DEPTH": "512", "PATH": "/usr/bin:/bin"},
    )
    assert r.returncode == 0, r.stderr
    assert "KVF_TX_DEPTH=512\n" in r.stdout


def test_every_bench_mode_the_readme_names_is_taken():
    for mode in ("target", "initiator", "probe"):
        r = kvfabric("bench", mode, "--no_such_flag")
        assert "invalid choice" not in r.stderr and "no_such_flag" in r.stderr + r.stdout, (mode, r.stderr)


def test_a_bench_mode_still_passes_through():
    r = kvfabric("bench", "initiator", "--no_such_flag")
    assert r.returncode != 0
    assert "no_such_flag" in r.stderr + r.stdout


def test_the_cli_knows_every_old_flag_name_the_tools_know():
    from kvfabric.cli import RENAMED_FLAGS

    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "tools", "common", "flag_names.h")) as f:
        tools = dict(re.findall(r'\{"(--\w+)", "(--\w+)"\}', f.read()))
    assert tools and tools.items() <= RENAMED_FLAGS.items(), (tools, RENAMED_FLAGS)


@pytest.mark.parametrize(
    "cmd, warned_by",
    [
        ([sys.executable, "-m", "kvfabric", "topo", "--device_name=lo"], "kvfabric"),
        (["kvfabric-topo", "--device_name=lo"], "kvfabric-topo"),
    ],
)
def test_an_old_flag_name_still_works_with_a_warning(cmd, warned_by):
    if cmd[0] == "kvfabric-topo":
        cmd[0] = os.path.join(sysconfig.get_path("scripts"), cmd[0])
    r = subprocess.run(cmd + ["--protocol=tcp"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == f"{warned_by}: --device_name is now --nic_filter (the old name still works)\n", r.stderr
    nics = json.loads(r.stdout)["nics"]
    assert [x["domain"] for x in nics] == ["lo"], nics
