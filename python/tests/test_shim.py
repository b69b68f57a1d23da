"""`kvfabric mooncake-shim`: what `import mooncake.engine` really loads, with
and without a real Mooncake package beside kvfabric.

Every check runs in a fresh interpreter. The .pth goes into a temporary
directory that the child processes as a site directory (site.addsitedir, as
site-packages is at start-up), so the real .pth line runs and the shared
environment is never written. A fake Mooncake package in tmp_path, on
PYTHONPATH, plays the real one (SGLang's image pip-installs
mooncake-transfer-engine)."""

import json
import os
import subprocess
import sys
import textwrap

import pytest

import kvfabric
from kvfabric.compat import shim

# The children load kvfabric from where this process does.
KVF_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(kvfabric.__file__)))

# Run in a child after the site dir: what each mooncake name resolved to.
LOAD = textwrap.dedent("""
    import json, site, sys
    site.addsitedir(sys.argv[1])
    out = {}
    try:
        import mooncake.engine as e
        out["engine"] = e.__name__
        out["real_engine"] = getattr(e, "REAL", False)
        out["transfer_engine"] = getattr(getattr(e, "TransferEngine", None), "__module__", None)
        import kvfabric.compat.mooncake as k
        out["same_module"] = e is k
        out["kvfabric_spec"] = k.__spec__.name
    except ImportError as err:
        out["error"] = type(err).__name__ + ": " + str(err)
    try:
        from mooncake.store import MooncakeDistributedStore
        out["store"] = MooncakeDistributedStore.__module__
    except ImportError as err:
        out["store_error"] = type(err).__name__ + ": " + str(err)
    try:
        import mooncake, mooncake.pg as pg
        out["pg"] = pg.__file__
        out["real_init_ran"] = getattr(mooncake, "INIT_RAN", False)
    except ImportError as err:
        out["pg_error"] = type(err).__name__ + ": " + str(err)
    print(json.dumps(out))
""")


class Env:
    """A temporary site dir, a fake real Mooncake, and fresh interpreters."""

    def __init__(self, tmp_path):
        self.site = tmp_path / "site"
        self.site.mkdir()
        self.real = tmp_path / "real"
        pkg = self.real / "mooncake"
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(
            "from pkgutil import extend_path\n__path__ = extend_path(__path__, __name__)\nINIT_RAN = True\n"
        )
        (pkg / "engine.py").write_text("REAL = True\n\nclass TransferEngine:\n    pass\n")
        (pkg / "pg.py").write_text("PG = True\n")
        dist = self.real / "mooncake_transfer_engine-9.9.9.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: mooncake-transfer-engine\nVersion: 9.9.9\n")
        (dist / "top_level.txt").write_text("mooncake\n")

    def _env(self, real: bool, shim_env):
        env = {k: v for k, v in os.environ.items() if k != shim.ENV}
        paths = (
            ([str(self.real)] if real else [])
            + [KVF_ROOT]
            + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
        )
        env["PYTHONPATH"] = os.pathsep.join(paths)
        if shim_env is not None:
            env[shim.ENV] = shim_env
        return env

    def cli(self, action, *flags, real=True, shim_env=None):
        return subprocess.run(
            [sys.executable, "-m", "kvfabric", "mooncake-shim", action, "--site_dir", str(self.site), *flags],
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env(real, shim_env),
        )

    def load(self, real=True, shim_env=None) -> dict:
        r = subprocess.run(
            [sys.executable, "-c", LOAD, str(self.site)],
            capture_output=True,
            text=True,
            timeout=120,
            env=self._env(real, shim_env),
        )
        assert r.returncode == 0, r.stderr[-2000:]
        return json.loads(r.stdout.splitlines()[-1])

    @property
    def pth(self):
        return self.site / shim.PTH_NAME


@pytest.fixture
def env(tmp_path):
    return Env(tmp_path)


def assert_kvfabric(out):
    assert out.get("engine") == "kvfabric.compat.mooncake", out
    assert out["transfer_engine"] == "kvfabric.compat.mooncake" and out["same_module"] and not out["real_engine"]
    # The alias did not leave the kvfabric module with mooncake.engine's spec.
    assert out["kvfabric_spec"] == "kvfabric.compat.mooncake"
    # mooncake.store too (SGLang's HiCache, vLLM's store connectors).
    assert out.get("store") == "kvfabric.compat.mooncake_store", out


def test_without_the_shim_the_real_package_loads(env):
    out = env.load()
    assert out["engine"] == "mooncake.engine" and out["real_engine"] and out["real_init_ran"]
    r = env.cli("status")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "loads: the real Mooncake" in r.stdout and "mooncake-transfer-engine 9.9.9" in r.stdout
    assert "shim: not installed" in r.stdout
    assert f"real Mooncake package: {env.real / 'mooncake'}" in r.stdout
    assert "install --force" in r.stdout


def test_install_refuses_beside_a_real_mooncake(env):
    r = env.cli("install")
    assert r.returncode == 1, r.stdout + r.stderr
    assert "not installing the Mooncake shim" in r.stderr and "real Mooncake package is importable" in r.stderr
    assert str(env.real / "mooncake") in r.stderr and "--force" in r.stderr
    assert "pip uninstall -y mooncake-transfer-engine" in r.stderr
    assert list(env.site.iterdir()) == []
    assert env.load()["real_engine"]


def test_install_force_puts_kvfabric_first_and_keeps_the_real_modules(env):
    r = env.cli("install", "--force")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "now loads: kvfabric's shim" in r.stdout
    assert "enable(force=True)" in env.pth.read_text()
    out = env.load()
    assert_kvfabric(out)
    # The modules kvfabric does not replace come from the real package, whose
    # __init__ (it imports the real compiled store) is skipped.
    assert out["pg"] == str(env.real / "mooncake" / "pg.py") and not out["real_init_ran"]
    r = env.cli("status")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "loads: kvfabric's shim (kvfabric.compat.mooncake" in r.stdout
    assert f"shim: installed with --force: {env.pth}" in r.stdout
    assert f"real Mooncake package: {env.real / 'mooncake'} (mooncake-transfer-engine 9.9.9)" in r.stdout
    assert "not installed" not in r.stdout


def test_uninstall_restores_the_real_package(env):
    assert env.cli("install", "--force").returncode == 0
    r = env.cli("uninstall")
    assert r.returncode == 0 and f"removed {env.pth}" in r.stdout, r.stdout + r.stderr
    assert "now loads: the real Mooncake" in r.stdout
    assert not env.pth.exists()
    out = env.load()
    assert out["engine"] == "mooncake.engine" and out["real_engine"]
    r = env.cli("status")
    assert r.returncode == 1 and "loads: the real Mooncake" in r.stdout and "shim: not installed" in r.stdout
    r = env.cli("uninstall")
    assert r.returncode == 0 and "was not installed" in r.stdout


def test_plain_install_without_a_real_mooncake(env):
    r = env.cli("status", real=False)
    assert r.returncode == 1 and "loads: nothing importable (ModuleNotFoundError" in r.stdout, r.stdout
    assert "real Mooncake package: none found" in r.stdout
    r = env.cli("install", real=False)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "enable()" in env.pth.read_text()
    out = env.load(real=False)
    assert_kvfabric(out)
    assert "ModuleNotFoundError" in out["pg_error"]  # the stand-in mooncake has nothing else
    r = env.cli("status", real=False)
    assert r.returncode == 0 and "loads: kvfabric's shim" in r.stdout and f"shim: installed: {env.pth}" in r.stdout


def test_an_unforced_shim_loses_to_a_real_mooncake_installed_later(env):
    assert env.cli("install", real=False).returncode == 0
    out = env.load()
    assert out["engine"] == "mooncake.engine" and out["real_engine"]
    r = env.cli("status")
    assert r.returncode == 1, r.stdout
    assert "loads: the real Mooncake" in r.stdout and "shim: installed:" in r.stdout
    assert "the real Mooncake wins over the shim" in r.stdout


def test_kvf_mooncake_shim_0_turns_it_off(env):
    assert env.cli("install", real=False).returncode == 0
    assert "No module named 'mooncake'" in env.load(real=False, shim_env="0")["error"]
    r = env.cli("status", real=False, shim_env="0")
    assert r.returncode == 1 and "loads: nothing importable" in r.stdout and "KVF_MOONCAKE_SHIM=0" in r.stdout
    assert env.cli("install", "--force").returncode == 0
    out = env.load(shim_env="0")
    assert out["engine"] == "mooncake.engine" and out["real_engine"] and out["real_init_ran"]
    assert env.cli("status", shim_env="0").returncode == 1


def test_force_is_for_install_only(env):
    r = env.cli("status", "--force")
    assert r.returncode == 2 and "--force applies to `mooncake-shim install` only" in r.stderr


def test_a_table_entry_without_its_kvfabric_module_is_not_answered(monkeypatch):
    monkeypatch.setitem(shim.MODULES, "mooncake.store", "kvfabric.compat.no_such_module")
    finder = shim._Finder(force=True)
    assert finder.find_spec("mooncake.store", None) is None
    spec = finder.find_spec("mooncake.engine", None)
    assert spec is not None and spec.loader.target == "kvfabric.compat.mooncake"
    assert finder.find_spec("mooncake.pg", None) is None
    if shim.real_mooncake() is None:  # the stand-in searches nowhere then
        assert finder.find_spec("mooncake", None).submodule_search_locations == []


def test_enable_keeps_one_finder_where_the_mode_says(monkeypatch):
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    monkeypatch.delenv(shim.ENV, raising=False)

    def finders():
        return [f for f in sys.meta_path if isinstance(f, shim._Finder)]

    shim.enable()
    shim.enable()
    assert len(finders()) == 1 and sys.meta_path[-1] is finders()[0] and not finders()[0].force
    shim.enable(force=True)
    assert len(finders()) == 1 and sys.meta_path[0] is finders()[0] and finders()[0].force
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if not isinstance(f, shim._Finder)])
    monkeypatch.setenv(shim.ENV, "0")
    shim.enable(force=True)
    assert finders() == []
