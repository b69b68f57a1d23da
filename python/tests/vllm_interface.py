"""vLLM's encoder-cache store as released, without vLLM installed.

``make test`` unpacks six pure-Python files of vLLM's wheel into
``KVF_VLLM_SRC``: its Mooncake store config (``distributed/mooncake_store.py``),
the encoder-cache store's client, backend and key helpers
(``distributed/ec_transfer/ec_connector/mooncake_store_embedding/``), and the
requester-hostname helper they call. ``load_encoder_store()`` imports them
under their own names, unchanged, with stand-ins for what they import from
the rest of vLLM (its logger, ``get_ip``, the two settings ``vllm.envs``
gives them) and for torch (cpu_torch.py: CPU tensors over numpy), and
kvfabric's shim enabled, so their ``from mooncake.store import ...`` finds
kvfabric's ``MooncakeDistributedStore``.
"""

import importlib
import logging
import os
import sys
import types

import cpu_torch

FILES = (
    "vllm/distributed/mooncake_store.py",
    "vllm/distributed/ec_transfer/ec_connector/mooncake_store_embedding/__init__.py",
    "vllm/distributed/ec_transfer/ec_connector/mooncake_store_embedding/data.py",
    "vllm/distributed/ec_transfer/ec_connector/mooncake_store_embedding/store_client.py",
    "vllm/distributed/ec_transfer/ec_connector/mooncake_store_embedding/backend.py",
    "vllm/distributed/kv_transfer/kv_connector/v1/mooncake/rdma_utils.py",
)
PACKAGES = (
    "vllm",
    "vllm.distributed",
    "vllm.distributed.ec_transfer",
    "vllm.distributed.ec_transfer.ec_connector",
    "vllm.distributed.kv_transfer",
    "vllm.distributed.kv_transfer.kv_connector",
    "vllm.distributed.kv_transfer.kv_connector.v1",
    "vllm.distributed.kv_transfer.kv_connector.v1.mooncake",
)

if os.environ.get("KVF_VLLM_SRC"):  # absolute, for processes started in another directory
    os.environ["KVF_VLLM_SRC"] = os.path.abspath(os.environ["KVF_VLLM_SRC"])


def source_dir() -> str | None:
    root = os.environ.get("KVF_VLLM_SRC")
    if root and all(os.path.exists(os.path.join(root, f)) for f in FILES):
        return root
    return None


def _module(name: str, **attrs) -> types.ModuleType:
    m = types.ModuleType(name)
    for k, v in attrs.items():
        setattr(m, k, v)
    sys.modules[name] = m
    return m


def load_encoder_store():
    """(store_client, backend, data): vLLM's mooncake_store_embedding modules."""
    root = source_dir()
    if root is None:
        raise RuntimeError(
            "vLLM's encoder-cache store sources are not unpacked: run `make check` or set "
            "KVF_VLLM_SRC (python/tests/vllm_interface.py)"
        )
    if "torch" not in sys.modules:
        sys.modules["torch"] = cpu_torch.module()
    for name in PACKAGES:
        if name not in sys.modules:
            _module(name, __path__=[os.path.join(root, *name.split("."))])
    _module("vllm.logger", init_logger=logging.getLogger)
    _module("vllm.utils", __path__=[])
    _module("vllm.utils.network_utils", get_ip=lambda: "127.0.0.1")
    _module(
        "vllm.envs",
        MOONCAKE_REQUESTER_LOCAL_HOSTNAME=os.environ.get("MOONCAKE_REQUESTER_LOCAL_HOSTNAME"),
        MOONCAKE_PREFERRED_SEGMENT=os.environ.get("MOONCAKE_PREFERRED_SEGMENT"),
    )
    from kvfabric.compat import shim

    shim.enable()
    prefix = "vllm.distributed.ec_transfer.ec_connector.mooncake_store_embedding"
    return (
        importlib.import_module(prefix + ".store_client"),
        importlib.import_module(prefix + ".backend"),
        importlib.import_module(prefix + ".data"),
    )
