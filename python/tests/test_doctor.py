"""kvfabric doctor's locked-memory check (the limit it reads and what it says to do), kvfabric --version, and
the warning for a KVF_ variable that misspells a setting."""

import json
import resource
import subprocess
import sys

from kvfabric.cli import memlock_check


def test_a_limited_memlock_fails_where_a_provider_pins_registered_memory():
    level, check, advice = memlock_check(8 << 20, ["efa"])
    assert level == "fail"
    assert "8192 KiB" in check and "efa" in check
    assert "ulimit -l unlimited" in advice and "--ulimit memlock=-1:-1" in advice and "LimitMEMLOCK" in advice
    assert memlock_check(8 << 20, ["efa", "verbs"])[0] == "fail"
    assert memlock_check(64 << 30, ["verbs"])[1].startswith("locked-memory limit (ulimit -l) is 64.0 GiB")


def test_unlimited_or_no_pinning_provider_passes():
    assert memlock_check(resource.RLIM_INFINITY, ["efa"]) == ("ok", "locked-memory limit (ulimit -l): unlimited", "")
    level, check, advice = memlock_check(8 << 20, [])
    assert level == "ok" and "8192 KiB" in check and "ulimit -l unlimited" in advice


def test_doctor_reads_the_limit_of_its_process():
    hard = resource.getrlimit(resource.RLIMIT_MEMLOCK)[1]
    soft = 8 << 20 if hard == resource.RLIM_INFINITY or hard >= 8 << 20 else hard

    def lower():
        resource.setrlimit(resource.RLIMIT_MEMLOCK, (soft, hard))

    r = subprocess.run(
        [sys.executable, "-m", "kvfabric", "doctor", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=lower,
    )
    rows = json.loads(r.stdout)
    memlock = [x for x in rows if x["check"].startswith("locked-memory limit")]
    assert len(memlock) == 1, rows
    assert f"{soft // 1024} KiB" in memlock[0]["check"]


def test_version_names_kvfabric_and_the_libfabric_it_loaded():
    from importlib.metadata import version

    r = subprocess.run([sys.executable, "-m", "kvfabric", "--version"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith(f"kvfabric {version('kvfabric')} (libfabric "), r.stdout
    assert "loaded, built against" in r.stdout


def test_a_misspelled_variable_is_warned_of_with_the_setting_it_meant():
    import os

    code = "import kvfabric\nfor _ in range(2): kvfabric.Engine(protocol='tcp').close()"
    env = dict(os.environ, KVF_STORE_POOL_SIZE="1gb", KVF_MOONCAKE_SHIM="1", KVF_LOG_LEVEL="warn")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert "KVF_STORE_POOL_SIZE is set in the environment but is no kvfabric setting" in r.stderr
    assert "did you mean KVF_STORE_POOL_BYTES?" in r.stderr
    assert "KVF_MOONCAKE_SHIM" not in r.stderr, "another tool's variable is not a misspelling"
    assert r.stderr.count("KVF_STORE_POOL_SIZE") == 1, "warned once per process"
