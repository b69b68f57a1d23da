"""Make ``import mooncake.engine`` resolve to kvfabric's compatible API.

vLLM's ``MooncakeConnector`` and SGLang's mooncake backend import
``from mooncake.engine import TransferEngine``. ``kvfabric mooncake-shim
install`` writes a ``.pth`` file into this environment's site-packages that
calls ``enable()`` at interpreter start. ``enable()`` puts a finder on
``sys.meta_path`` that answers the names of ``MODULES`` with kvfabric's
modules, and ``mooncake`` itself with an empty stand-in package:

- by default the finder goes *last*, so a real Mooncake installation, when
  present, wins (``install`` refuses to write the ``.pth`` then, since the shim
  would do nothing);
- with ``force`` (``install --force``) it goes *first*: the names of
  ``MODULES`` come from kvfabric even beside a real Mooncake, and the stand-in
  ``mooncake`` package searches the real package's directories, so its other
  modules (``mooncake.pg``, ``mooncake.allocator``, ...) still import from it.
  The real ``mooncake/__init__.py`` is not run: it imports ``mooncake.store``,
  the real compiled engine, which a forced shim is there to keep out.

Nothing is imported until a program asks for ``mooncake``.
``KVF_MOONCAKE_SHIM=0`` turns the shim off for one process; ``kvfabric
mooncake-shim uninstall`` removes the ``.pth``; ``status()`` asks a fresh
interpreter what ``import mooncake.engine`` really loads.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import pkgutil
import subprocess
import sys
import sysconfig
from typing import Optional

PTH_NAME = "kvfabric_mooncake_shim.pth"
PACKAGE = "mooncake"
ENV = "KVF_MOONCAKE_SHIM"

# Mooncake module -> the kvfabric module that stands in for it. An entry whose
# kvfabric module does not exist (yet) is not answered, so the real module, if
# any, loads instead; adding a module is one line here.
MODULES = {
    "mooncake.engine": "kvfabric.compat.mooncake",
    "mooncake.store": "kvfabric.compat.mooncake_store",
}

_PTH_LINE = "import kvfabric.compat.shim as _kvf_shim; _kvf_shim.enable({args})\n"


class MooncakePresentError(RuntimeError):
    """``install`` without ``force`` while a real Mooncake package is importable."""


class _AliasLoader(importlib.abc.Loader):
    """Loads a Mooncake name as the very kvfabric module that stands in for it,
    so ``mooncake.engine.TransferEngine is kvfabric.compat.mooncake.TransferEngine``."""

    def __init__(self, target: str):
        self.target = target
        self._own_spec = None

    def create_module(self, spec):
        module = importlib.import_module(self.target)
        self._own_spec = module.__spec__
        return module

    def exec_module(self, module) -> None:
        # module_from_spec() replaced the kvfabric module's __spec__ with the
        # alias's; give it its own back so find_spec() and reload() on the
        # kvfabric name keep working.
        module.__spec__ = self._own_spec


class _PackageLoader(importlib.abc.Loader):
    """The stand-in ``mooncake`` package: empty, its ``__path__`` the spec's."""

    def create_module(self, spec):
        return None

    def exec_module(self, module) -> None:
        module.__doc__ = "kvfabric standing in for Mooncake (kvfabric.compat.shim)"
        module.__kvfabric_shim__ = True


def _available(target: str) -> bool:
    try:
        return importlib.util.find_spec(target) is not None
    except (ImportError, ValueError):
        return False


def find_real_spec(name: str = PACKAGE):
    """The spec the import system finds for a top-level ``name`` with the
    shim's finder skipped: every other finder on sys.meta_path, in order."""
    for finder in list(sys.meta_path):
        if isinstance(finder, _Finder) or not hasattr(finder, "find_spec"):
            continue
        try:
            spec = finder.find_spec(name, None)
        except ImportError:
            continue
        if spec is not None:
            return spec
    return None


def real_mooncake() -> Optional[list[str]]:
    """The directories of a real ``mooncake`` package importable here, or None.

    A bare namespace directory (no ``__init__.py``, hence no origin) does not
    count: it provides no module, and the finder answers ``MODULES`` under any
    parent, so it shadows nothing."""
    spec = find_real_spec(PACKAGE)
    if spec is None or spec.origin in (None, "namespace"):
        return None
    if spec.submodule_search_locations is None:  # a plain mooncake.py module
        return [spec.origin]
    return list(spec.submodule_search_locations)


def real_mooncake_version() -> Optional[str]:
    """``"<distribution> <version>"`` of the installed Mooncake, when its
    distribution metadata is there (a source tree on PYTHONPATH has none)."""
    from importlib import metadata

    names: list[str] = []
    try:
        names = list(metadata.packages_distributions().get(PACKAGE, []))
    except AttributeError:  # Python < 3.10
        pass
    for dist in names + ["mooncake-transfer-engine"]:
        try:
            return f"{dist} {metadata.version(dist)}"
        except metadata.PackageNotFoundError:
            continue
    return None


class _Finder(importlib.abc.MetaPathFinder):
    def __init__(self, force: bool = False):
        self.force = force

    def find_spec(self, fullname, path, target=None):
        if fullname == PACKAGE:
            return self._package_spec()
        kvf = MODULES.get(fullname)
        if kvf is not None and _available(kvf):
            return importlib.machinery.ModuleSpec(fullname, _AliasLoader(kvf))
        return None

    def _package_spec(self):
        spec = importlib.machinery.ModuleSpec(PACKAGE, _PackageLoader(), is_package=True)
        # Unforced, the finder is last: asked for `mooncake`, nothing else had
        # one, so there is no real directory to search. Forced, the real
        # package's directories (widened like its own __init__ does with
        # extend_path) keep its other modules importable.
        locations: list[str] = []
        if self.force:
            real = find_real_spec(PACKAGE)
            if real is not None and real.submodule_search_locations is not None:
                locations = list(real.submodule_search_locations)
            locations = pkgutil.extend_path(locations, PACKAGE)
        spec.submodule_search_locations = locations
        return spec


def enable(force: bool = False) -> None:
    """Installs the finder in this process: last on sys.meta_path, or first
    with ``force``. Calling it again replaces the earlier finder, so the last
    call's mode holds. ``KVF_MOONCAKE_SHIM=0`` makes it do nothing."""
    if os.environ.get(ENV, "1") == "0":
        return
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _Finder)]
    if force:
        sys.meta_path.insert(0, _Finder(force=True))
    else:
        sys.meta_path.append(_Finder())


def pth_path(site_dir: Optional[str] = None) -> str:
    """Where the .pth goes: ``site_dir``, or this environment's site-packages."""
    return os.path.join(os.path.abspath(site_dir or sysconfig.get_path("purelib")), PTH_NAME)


def installed_mode(site_dir: Optional[str] = None) -> Optional[str]:
    """``"forced"`` or ``"default"`` for an installed .pth, None without one."""
    try:
        with open(pth_path(site_dir)) as f:
            line = f.read()
    except FileNotFoundError:
        return None
    return "forced" if "force=True" in line else "default"


def install(force: bool = False, site_dir: Optional[str] = None) -> str:
    """Writes the .pth and returns its path. Without ``force``, raises
    MooncakePresentError (and writes nothing) when a real Mooncake package is
    importable, since it would win over the shim."""
    real = real_mooncake()
    if real is not None and not force:
        version = real_mooncake_version()
        raise MooncakePresentError(
            f"a real Mooncake package is importable here ({', '.join(real)}"
            f"{'; ' + version if version else ''}), and it would win over the shim. Either remove it "
            f"(pip uninstall -y {version.split()[0] if version else 'mooncake-transfer-engine'}) and run this "
            "again, or run `kvfabric mooncake-shim install --force` to make mooncake.engine load kvfabric "
            "while the real package's other modules (mooncake.pg, mooncake.store, ...) stay importable"
        )
    path = pth_path(site_dir)
    with open(path, "w") as f:
        f.write(_PTH_LINE.format(args="force=True" if force else ""))
    return path


def uninstall(site_dir: Optional[str] = None) -> bool:
    """Removes the .pth; False when there was none."""
    try:
        os.unlink(pth_path(site_dir))
        return True
    except FileNotFoundError:
        return False


# Run by status() in a fresh interpreter: the import first, untouched, then
# where a real package is. argv[1]: a site dir to process first ("" for none).
_PROBE = r"""
import json, sys
if sys.argv[1]:
    import site
    site.addsitedir(sys.argv[1])
out = {}
try:
    import mooncake.engine as m
    out["module"] = m.__name__
    out["file"] = getattr(m, "__file__", None)
except BaseException as e:
    out["error"] = f"{type(e).__name__}: {e}"
try:
    from kvfabric.compat import shim
    out["real"] = shim.real_mooncake()
    out["version"] = shim.real_mooncake_version() if out["real"] else None
except BaseException as e:
    out["real_error"] = f"{type(e).__name__}: {e}"
print("KVF-SHIM-PROBE " + json.dumps(out))
"""


def _probe(site_dir: Optional[str], timeout: float) -> dict:
    try:
        r = subprocess.run(
            [sys.executable, "-c", _PROBE, site_dir or ""], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"error": f"a fresh interpreter did not finish `import mooncake.engine` within {timeout:.0f} s"}
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("KVF-SHIM-PROBE "):
            return json.loads(line[len("KVF-SHIM-PROBE ") :])
    tail = r.stderr.strip().splitlines()[-1:] or ["no output"]
    return {
        "error": f"a fresh interpreter ({sys.executable}) exited {r.returncode} importing mooncake.engine: {tail[0]}"
    }


def status(site_dir: Optional[str] = None, timeout: float = 120.0) -> dict:
    """What ``import mooncake.engine`` really loads in a fresh interpreter of
    this environment (its environment variables included), with the .pth
    processed from ``site_dir`` when one is given.

    Keys: ``loads`` ("kvfabric", "mooncake" or None), ``module``, ``file``,
    ``error`` (why nothing loaded), ``pth`` (the .pth path), ``mode``
    ("forced", "default" or None: not installed), ``real`` (the real
    package's directories or None), ``version``, ``disabled`` (KVF_MOONCAKE_SHIM=0)."""
    out = {"module": None, "file": None, "error": None, "real": None, "version": None}
    out.update(_probe(site_dir, timeout))
    module = out["module"]
    out["loads"] = None if module is None else "kvfabric" if module == MODULES["mooncake.engine"] else "mooncake"
    out["pth"] = pth_path(site_dir)
    out["mode"] = installed_mode(site_dir)
    out["disabled"] = os.environ.get(ENV, "1") == "0"
    return out
