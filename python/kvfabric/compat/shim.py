"""Make ``import mooncake.engine`` resolve to kvfabric's compatible API.

vLLM's ``MooncakeConnector`` and SGLang's mooncake backend import
``from mooncake.engine import TransferEngine``. ``kvfabric mooncake-shim
install`` writes a ``.pth`` file into this environment's site-packages that
calls ``enable()`` at interpreter start: a finder placed *last* on
``sys.meta_path`` then answers ``mooncake`` and ``mooncake.engine`` with
kvfabric, so a real Mooncake installation, when present, still wins. Nothing
is imported until a program asks for ``mooncake``. ``KVF_MOONCAKE_SHIM=0``
turns it off for one process; ``kvfabric mooncake-shim uninstall`` removes it.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import sysconfig
import types

PTH_NAME = "kvfabric_mooncake_shim.pth"


class _Loader(importlib.abc.Loader):
    def __init__(self, fullname: str):
        self.fullname = fullname

    def create_module(self, spec):
        if self.fullname == "mooncake":
            pkg = types.ModuleType("mooncake", "kvfabric standing in for Mooncake (kvfabric.compat.shim)")
            pkg.__path__ = []
            return pkg
        from . import mooncake as compat

        return compat

    def exec_module(self, module) -> None:
        pass


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path, target=None):
        if fullname in ("mooncake", "mooncake.engine"):
            return importlib.machinery.ModuleSpec(fullname, _Loader(fullname), is_package=fullname == "mooncake")
        return None


def enable() -> None:
    """Installs the finder in this process (idempotent)."""
    if os.environ.get("KVF_MOONCAKE_SHIM", "1") == "0":
        return
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def pth_path() -> str:
    return os.path.join(sysconfig.get_path("purelib"), PTH_NAME)


def install() -> str:
    path = pth_path()
    with open(path, "w") as f:
        f.write("import kvfabric.compat.shim as _kvf_shim; _kvf_shim.enable()\n")
    return path


def uninstall() -> bool:
    try:
        os.unlink(pth_path())
        return True
    except FileNotFoundError:
        return False
