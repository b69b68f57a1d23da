"""SGLang's HiCache interface as released, without SGLang installed.

``make test`` unpacks six pure-Python files of SGLang's wheel into
``KVF_SGLANG_SRC`` (its storage base class and config, its backend factory,
the environment module they read, its own Mooncake backend, and its
multimodal embedding store's base class, factory and Mooncake backend). ``load()``
imports them under their own names with a stand-in for torch (they name
torch.Tensor only in annotations), without SGLang's package __init__ files
(which import torch, transformers and the rest). The kvfabric backend is
then loaded exactly as SGLang loads it: through
``StorageBackendFactory.create_backend("dynamic", ...)``.

``load_mooncake()`` also readies SGLang's own Mooncake backend
(``--hicache-storage-backend mooncake``), unchanged, over kvfabric's
``mooncake.store`` (the shim): stand-ins for the modules it imports only
for names (host pool classes, metrics, ``requests`` for a master check the
config turns off), and torch's dtype names.
"""

import importlib
import importlib.util
import os
import sys
import types

PACKAGES = (
    "sglang",
    "sglang.srt",
    "sglang.srt.mem_cache",
    "sglang.srt.mem_cache.storage",
    "sglang.srt.mem_cache.storage.mooncake_store",
)
MOONCAKE_BACKEND = os.path.join("sglang", "srt", "mem_cache", "storage", "mooncake_store", "mooncake_store.py")
# Modules SGLang's Mooncake backend imports for names only: their names, stood in by empty classes.
_NAMES_ONLY = {
    "sglang.srt.mem_cache.hybrid_cache": [],
    "sglang.srt.mem_cache.hybrid_cache.linker_pool_assembler": ["DevicePoolEntry"],
    "sglang.srt.mem_cache.pool_host": ["HostKVCache", "HostTensorAllocator"],
    "sglang.srt.mem_cache.pool_host.mla": ["MLATokenToKVPoolHost"],
    "sglang.srt.observability": [],
    "sglang.srt.observability.metrics_collector": ["StorageMetrics"],
}

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
        raise RuntimeError(
            "SGLang's HiCache sources are not unpacked: run `make check` or set KVF_SGLANG_SRC "
            "(tools/common/sglang_interface.py)"
        )
    if "torch" not in sys.modules:
        torch = types.ModuleType("torch")
        torch.Tensor = type("Tensor", (), {})
        torch.dtype = type("dtype", (), {})
        for name in ("uint8", "int64", "float16", "bfloat16", "float32"):
            setattr(torch, name, torch.dtype())
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


def mooncake_backend_present() -> bool:
    root = source_dir()
    return root is not None and os.path.exists(os.path.join(root, MOONCAKE_BACKEND))


EMBEDDING_BACKEND = os.path.join(
    "sglang", "srt", "mem_cache", "storage", "mooncake_store", "mooncake_embedding_store.py"
)


def embedding_store_present() -> bool:
    root = source_dir()
    return root is not None and os.path.exists(os.path.join(root, EMBEDDING_BACKEND))


def load_embedding_store():
    """SGLang's EmbeddingStoreFactory (its multimodal embedding cache's
    store), with its "mooncake" backend made loadable as load_mooncake()
    does for HiCache's."""
    load_mooncake()
    if not embedding_store_present():
        raise RuntimeError(f"SGLang's {EMBEDDING_BACKEND} is not unpacked: run `make check`")
    return importlib.import_module("sglang.srt.mem_cache.embedding_store").EmbeddingStoreFactory


def load_mooncake():
    """load(), and SGLang's own Mooncake backend made loadable: the factory's
    "mooncake" then imports SGLang's mooncake_store.py, whose ``from
    mooncake.store import ...`` finds kvfabric's (the shim, this process)."""
    loaded = load()
    if not mooncake_backend_present():
        raise RuntimeError(f"SGLang's {MOONCAKE_BACKEND} is not unpacked: run `make check`")
    for name, classes in _NAMES_ONLY.items():
        if name not in sys.modules:
            module = types.ModuleType(name)
            for c in classes:
                setattr(module, c, type(c, (), {}))
            sys.modules[name] = module
    if importlib.util.find_spec("requests") is None:  # only check_server, which the tests' config turns off
        sys.modules["requests"] = types.ModuleType("requests")
    from kvfabric.compat import shim

    shim.enable()
    return loaded
