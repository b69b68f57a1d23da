"""The wheel `make wheel` builds, as a user installs it: a manylinux tag, every tool the docs use, no copy of
libfabric; installed into a fresh virtual environment outside the source tree, its CLI answers and the README's
target and initiator move bytes between two processes; where the system's libfabric is missing, the import says
what to install.

The wheel's directory comes from KVF_WHEEL_DIR (make test builds the wheel and sets it); without it these tests
are skipped.
"""

import glob
import os
import re
import shutil
import subprocess
import sys
import zipfile

import pytest
from test_readme import run_pair

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
TOOLS = (
    "kvfabric-bench",
    "kvfabric-fabric-bench",
    "kvfabric-metadata-server",
    "kvfabric-topo",
    "kvfabric-store-bench",
    "kvfabric-settings",
)


@pytest.fixture(scope="module")
def wheel() -> str:
    where = os.environ.get("KVF_WHEEL_DIR")
    if not where:
        pytest.skip("no wheel to test: make wheel builds one into dist/, and make test passes KVF_WHEEL_DIR")
    found = glob.glob(os.path.join(where, "kvfabric-*.whl"))
    assert len(found) == 1, f"expected one kvfabric wheel in {where}, found {found}"
    return found[0]


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> str:
    """A fresh virtual environment with the wheel installed from the file alone (no index), and numpy, which the
    README's examples use: its bin folder."""
    root = tmp_path_factory.mktemp("wheel-venv")
    subprocess.run([sys.executable, "-m", "venv", str(root / "venv")], check=True, timeout=120)
    bin_dir = str(root / "venv" / "bin")
    r = subprocess.run(
        [os.path.join(bin_dir, "pip"), "install", "-q", "--no-index", wheel],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 0, r.stderr
    r = subprocess.run(
        [os.path.join(bin_dir, "pip"), "install", "-q", "numpy"], capture_output=True, text=True, timeout=300
    )
    assert r.returncode == 0, r.stderr
    return bin_dir


def installed_env(bin_dir: str) -> dict:
    """The environment of a shell with the virtual environment activated, away from this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return dict(
        env,
        PATH=f"{bin_dir}:{env.get('PATH', '/usr/bin:/bin')}",
        VIRTUAL_ENV=os.path.dirname(bin_dir),
        KVF_LOG_LEVEL="warn",
    )


def test_the_wheel_is_manylinux_carries_the_tools_and_no_libfabric(wheel):
    name = os.path.basename(wheel)
    assert re.fullmatch(r"kvfabric-[\d.]+-cp\d+-cp\d+-manylinux_2_\d+_x86_64\.whl", name), name
    with open(os.path.join(ROOT, "CMakeLists.txt")) as f:
        version = re.search(r"project\(kvfabric VERSION ([\d.]+)", f.read()).group(1)
    assert name.startswith(f"kvfabric-{version}-"), f"{name}: CMakeLists.txt says version {version}"
    files = zipfile.ZipFile(wheel).namelist()
    scripts = {os.path.basename(f) for f in files if "/scripts/" in f}
    assert set(TOOLS) <= scripts, sorted(scripts)
    assert not [f for f in files if "libfabric" in f], "the wheel carries a libfabric"
    assert not [f for f in files if re.search(r"(_test|unit_test|stress)$", f)], "the wheel carries tests"


def test_the_installed_cli_and_tools_answer(venv, tmp_path):
    env = installed_env(venv)
    r = subprocess.run(["kvfabric", "--version"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert re.fullmatch(r"kvfabric [\d.]+ \(libfabric [\d.]+ loaded, built against [\d.]+\)\n", r.stdout), r.stdout
    for command, tool in (("store-bench", "kvfabric-store-bench"), ("settings", "kvfabric-settings")):
        r = subprocess.run(
            ["kvfabric", command, "--help"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60
        )
        assert r.returncode == 0 and r.stdout.startswith(f"{tool}:"), (command, r.stdout[:500], r.stderr)
    r = subprocess.run(
        ["kvfabric", "settings"],
        env=dict(env, KVF_TX_DEPTH="512"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0 and "KVF_TX_DEPTH=512\n" in r.stdout, r.stderr
    # The package imported is the installed one, not this checkout's.
    r = subprocess.run(
        ["python", "-c", "import kvfabric; print(kvfabric.__file__)"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.stdout.startswith(os.path.dirname(venv)), r.stdout


def test_the_installed_wheel_moves_the_readme_examples_bytes(venv, tmp_path):
    python = os.path.join(venv, "python")
    out, name = run_pair(
        tmp_path, lambda t: [python, t, "127.0.0.2"], lambda i, n: [python, i, "127.0.0.2", n], installed_env(venv)
    )
    assert name == "127.0.0.2:15000"
    assert out.strip() == f"read back {8 << 12} bytes of 7"


def test_without_the_systems_libfabric_the_import_says_what_to_install(venv, tmp_path):
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("hiding the system's libfabric needs root and unshare")
    lib = subprocess.run(
        [
            "python",
            "-c",
            "import kvfabric._core as c, re; "
            "print(re.search(r'\\S*libfabric\\.so\\S*', open('/proc/self/maps').read()).group(0))",
        ],
        env=installed_env(venv),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert lib.returncode == 0, lib.stderr
    for run in ("python -c 'import kvfabric; kvfabric.Engine'", "kvfabric doctor"):
        hide = f"mount --bind /dev/null {lib.stdout.strip()} && exec {run}"
        r = subprocess.run(
            ["unshare", "--mount", "sh", "-c", hide],
            env=installed_env(venv),
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if "mount" in r.stderr and "libfabric" not in r.stderr:
            pytest.skip(f"cannot hide the library here: {r.stderr.strip()}")
        assert r.returncode == 1, (run, r.stderr)
        assert "kvfabric cannot load libfabric" in r.stderr and "LD_LIBRARY_PATH=/opt/amazon/efa/lib" in r.stderr, (
            r.stderr
        )
