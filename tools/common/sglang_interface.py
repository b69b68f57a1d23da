"""SGLang's HiCache interface as released, without SGLang installed.

``make test`` unpacks three pure-Python files of SGLang's wheel into
``KVF_SGLANG_SRC`` (its storage base class and config, its backend factory,
and the environment module they read). ``load()`` imports them under their
own names with a stand-in for torch (they name torch.Tensor only in
annotations), without SGLang's package __init__ files (which import torch,
transformers and the rest). The kvfabric backend is then loaded exactly as
SGLang loads it: through ``StorageBackendFactory.create_backend("dynamic",
...)``.
"""

import importlib
import os
import sys
import types

PACKAGES = ("sglang", "sglang.srt", "sglang.srt.mem_cache", "sglang.srt.mem_cache.storage")

if os.environ.get("KVF_SGLANG_SRC"):  # absolute, for ranks started in another directory
    os.environ["KVF_SGLANG_SRC"] = os.path.abspath(os.environ["KVF_SGLANG_SRC"])


def source_dir() -> str | None:
    root = os.environ.get("KVF_SGLANG_SRC")
    if root and os.path.exists(os.path.join(root, "sglang", "srt", "mem_cache", "hicache_storage.py")):
        return os.path.abspath(root)
    return None


def load():
    """(StorageBackendFactory, HiCacheStorageConfig, HiCacheStorageExtraInfo), SGLang's own."""
    root = source_dir()
    if root is None:
        raise RuntimeError("SGLang's HiCache sources are not unpacked: run `make check` or set KVF_SGLANG_SRC (tools/common/sglang_interface.py)")
    if "torch" not in sys.modules:
        torch = types.ModuleType("torch")
        torch.Tensor = type("Tensor", (), {})
        sys.modules["torch"] = torch
    for name in PACKAGES:
        if name not in sys.modules:
            pkg = types.ModuleType(name)
            pkg.__path__ = [os.path.join(root, *name.split("."))]
            sys.modules[name] = pkg
    factory = importlib.import_module("sglang.srt.mem_cache.storage.backend_factory")
    storage = importlib.import_module("sglang.srt.mem_cache.hicache_storage")
    return factory.StorageBackendFactory, storage.HiCacheStorageConfig, storage.HiCacheStorageExtraInfo


def hicache_storage():
    """SGLang's sglang.srt.mem_cache.hicache_storage module (PoolTransfer, PoolName, PoolHitPolicy, ...)."""
    load()
    return sys.modules["sglang.srt.mem_cache.hicache_storage"]
