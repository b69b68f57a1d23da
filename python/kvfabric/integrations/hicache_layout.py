"""The pure policies of the SGLang HiCache backend, with no SGLang import:
its options, the store key of a page, and the buffers of each page.

Each is a function of its arguments alone, unit-tested in
``python/tests/test_hicache_layout.py``; ``kvfabric.integrations.sglang``
puts them to work.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from typing import Any, Callable, Mapping, Optional, Sequence

from ..units import parse_bytes

__all__ = [
    "OPTIONS",
    "Option",
    "BackendConfig",
    "KeyScheme",
    "key_scheme",
    "page_buffers",
    "parse_bytes",
    "PoolPresence",
    "pool_hits",
    "default_hostname",
    "options_markdown",
]


# -- options ----------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Option:
    """One option of the backend: a key of SGLang's
    ``--hicache-storage-backend-extra-config`` JSON, or else its environment
    variable, or else its default."""

    name: str
    env: str
    kind: str  # "str", "bytes", "bool" or "dict"
    default: Any
    meaning: str


OPTIONS: tuple[Option, ...] = (
    Option(
        "local_hostname",
        "KVF_HICACHE_LOCAL_HOSTNAME",
        "str",
        "",
        "This rank's engine address, `host` or `host:port` (a bare host takes a free port of Mooncake's RPC "
        "range); empty: the address of the interface on the host's default route, else 127.0.0.1.",
    ),
    Option(
        "metadata_server",
        "KVF_HICACHE_METADATA_SERVER",
        "str",
        "P2PHANDSHAKE",
        "Where members are found, as Mooncake names it: `etcd://host:2379` (members with leases), "
        "`http://host:port/metadata` (kvfabric-metadata-server), or `P2PHANDSHAKE` with the static list "
        "`KVF_STORE_MEMBERS` (in `settings` or the environment).",
    ),
    Option(
        "protocol",
        "KVF_HICACHE_PROTOCOL",
        "str",
        "auto",
        "The fabric: `auto` (EFA when present), `efa`, `rdma` (EFA or verbs), `verbs`, `tcp` or `shm`.",
    ),
    Option(
        "device_name",
        "KVF_HICACHE_DEVICE_NAME",
        "str",
        "",
        "The NICs to use (kvfabric's nic filter, e.g. `rdmap16s27,rdmap32s27`); empty: all.",
    ),
    Option(
        "global_segment_size",
        "KVF_HICACHE_GLOBAL_SEGMENT_SIZE",
        "bytes",
        0,
        "Host memory each rank gives to the store's pool (`4gb`, `512mb` or bytes); 0: this rank is a client "
        "of nodes that other processes run.",
    ),
    Option(
        "key_prefix",
        "KVF_HICACHE_KEY_PREFIX",
        "str",
        None,
        "Put before every key; unset: the served model's name and a slash, so two models never share a page.",
    ),
    Option(
        "staging_bytes",
        "KVF_HICACHE_STAGING_BYTES",
        "bytes",
        64 << 20,
        "Registered host memory for the copying calls (get, set, batch_get, batch_set): pages larger than it fail.",
    ),
    Option(
        "settings",
        "",
        "dict",
        None,
        'Any kvfabric setting by name (`{"KVF_STORE_DEADLINE_MS": 2000}`), for the engine and the store.',
    ),
)


def default_hostname() -> str:
    """The address of the interface on this host's default route (no packet is
    sent), else 127.0.0.1."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect(("10.255.255.255", 1))
            return s.getsockname()[0]
    except OSError:
        return "127.0.0.1"


@dataclasses.dataclass(frozen=True)
class BackendConfig:
    """The backend's options, resolved."""

    local_hostname: str
    metadata_server: str
    protocol: str
    device_name: str
    global_segment_size: int
    key_prefix: Optional[str]
    staging_bytes: int
    settings: dict

    @staticmethod
    def resolve(
        extra: Optional[Mapping[str, Any]],
        environ: Mapping[str, str] = os.environ,
        hostname: Callable[[], str] = default_hostname,
    ) -> "BackendConfig":
        """Each option from ``extra`` (SGLang's extra config; its own keys
        backend_name, module_path, class_name and interface_v1 pass), else its
        environment variable, else its default. Raises ValueError for an
        unknown key or a bad value, naming it."""
        extra = dict(extra or {})
        known = {o.name for o in OPTIONS} | {"backend_name", "module_path", "class_name", "interface_v1"}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ValueError(
                f"kvfabric HiCache backend: unknown option(s) {', '.join(unknown)} in the extra config; "
                f"known: {', '.join(sorted(o.name for o in OPTIONS))}"
            )
        values: dict[str, Any] = {}
        for o in OPTIONS:
            v = extra.get(o.name)
            if v is None and o.env and environ.get(o.env):
                v = environ[o.env]
            if v is None:
                v = o.default
            if o.kind == "bytes":
                v = parse_bytes(v, o.name)
            elif o.kind == "dict":
                if v is not None and not isinstance(v, Mapping):
                    raise ValueError(f"{o.name}: expected an object of KVF_* settings, not {v!r}")
                v = {str(k): v2 for k, v2 in (v or {}).items()}
            elif v is not None:
                v = str(v)
            values[o.name] = v
        if not values["local_hostname"]:
            values["local_hostname"] = hostname()
        if values["staging_bytes"] < 4096:
            raise ValueError(f"staging_bytes: {values['staging_bytes']} is under 4096")
        return BackendConfig(**values)


# -- keys ---------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class KeyScheme:
    """The store key of each page: ``prefix + page hash + suffix``."""

    prefix: str
    suffix: str

    def keys(self, hashes: Sequence[str]) -> list[str]:
        return [f"{self.prefix}{h}{self.suffix}" for h in hashes]


def key_scheme(config: Any, key_prefix: Optional[str] = None, flat: bool = False) -> KeyScheme:
    """The keys of one rank, from SGLang's ``HiCacheStorageConfig`` (read with
    getattr, so older configs without the newer fields work).

    Contract:
    - MHA: each TP rank holds its own heads, so the key names the rank:
      ``{hash}_{tp_rank}``; MLA ranks hold the same latent cache, so all
      ranks share ``{hash}``. SGLang's convention, as its other backends.
    - A rank's shard beyond TP is named too: ``_cp{attn_cp_rank}`` when
      attention context parallelism splits the cache, ``_dcp{dcp_rank}``
      with decode context parallelism (MLA), ``_pp{pp_rank}`` with pipeline
      stages. With none of them the key is as above.
    - One key holds the whole page, every buffer of it (MHA's k and v): a
      page is present whole or absent, never k without v.
    - ``prefix``: ``key_prefix`` if given (may be ""), else the model's name
      and "/" (no prefix without a model name), so two models never read
      each other's pages.
    - ``flat``: the copying calls (SGLang without ``interface_v1``) store a
      page as one flat tensor, laid out differently from the zero-copy
      buffers: their keys end in "#flat" so the two never meet.
    - SGLang's head splitting for mixed TP sizes (``should_split_heads``)
      is not supported: raises NotImplementedError saying so.
    """
    if getattr(config, "should_split_heads", False):
        raise NotImplementedError(
            "kvfabric HiCache backend: head splitting across TP sizes (should_split_heads, "
            "set when deployments of different TP sizes share a store) is not supported; "
            "give each TP size its own key_prefix"
        )
    suffix = "" if getattr(config, "is_mla_model", False) else f"_{getattr(config, 'tp_rank', 0)}"
    if getattr(config, "attn_cp_size", 1) > 1:
        suffix += f"_cp{getattr(config, 'attn_cp_rank', 0)}"
    if getattr(config, "dcp_size", 1) > 1:
        suffix += f"_dcp{getattr(config, 'dcp_rank', 0)}"
    if getattr(config, "pp_size", 1) > 1:
        suffix += f"_pp{getattr(config, 'pp_rank', 0)}"
    if flat:
        suffix += "#flat"
    if key_prefix is None:
        model = getattr(config, "model_name", None)
        key_prefix = f"{model}/" if model else ""
    return KeyScheme(key_prefix, suffix)


# -- buffers --------------------------------------------------------------------
def page_buffers(ptrs: Sequence[int], sizes: Sequence[int], pages: int) -> list[list[tuple[int, int]]]:
    """The buffers of each page, from a host pool's ``get_page_buffer_meta``
    (flat lists: for each page in order, its buffers in order; MHA gives a k
    and a v, MLA one, split pools more).

    Contract: ``len(ptrs) == len(sizes)``, a positive multiple of ``pages``,
    and every size positive; returns ``pages`` lists of ``(address,
    length)`` pairs, each as many buffers as the others. Raises ValueError
    otherwise (a pool this backend does not understand must not be guessed)."""
    if pages <= 0:
        raise ValueError(f"{pages} pages: a batch has at least one")
    if len(ptrs) != len(sizes):
        raise ValueError(f"the host pool gave {len(ptrs)} buffer addresses but {len(sizes)} sizes")
    if not ptrs or len(ptrs) % pages:
        raise ValueError(f"the host pool gave {len(ptrs)} buffers for {pages} pages: not the same number per page")
    per = len(ptrs) // pages
    out = []
    for p in range(pages):
        page = []
        for i in range(p * per, (p + 1) * per):
            if int(sizes[i]) <= 0:
                raise ValueError(f"buffer {i} of the host pool has size {sizes[i]}")
            page.append((int(ptrs[i]), int(sizes[i])))
        out.append(page)
    return out


# -- v2 pools -------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class PoolPresence:
    """One extra pool of a ``batch_exists_v2`` query: its name, SGLang's hit
    policy ("all_pages" or "trailing_pages"), how many trailing pages the
    policy needs (``len(transfer.keys)``, at least 1), and which of the KV
    pages have this pool's part in the store."""

    name: str
    policy: str
    trailing: int
    present: Sequence[bool]


def pool_hits(kv_present: Sequence[bool], pools: Sequence[PoolPresence]) -> tuple[int, dict, list[int]]:
    """The usable prefix of a hybrid model's pages: (pages, hits per pool,
    restorable prefix lengths), as SGLang's ``batch_exists_v2`` reports them.

    Contract:
    - The KV prefix is the leading run of ``kv_present``; ``hits["kv"]`` is
      its length when positive.
    - A prefix of length p (1..KV prefix) is restorable if every pool allows
      it: "all_pages" when the pool has all of pages [0, p), "trailing_pages"
      when it has the last ``trailing`` pages before p. A pool's hit count
      is the longest prefix it allows (absent when 0).
    - Pools are taken in order and stop being examined once nothing is
      restorable; ``pages`` is the longest restorable prefix, 0 if none.
    - Any other policy (SGLang's "block_groups") raises ValueError.
    """
    kv = next((i for i, p in enumerate(kv_present) if not p), len(kv_present))
    hits: dict = {"kv": kv} if kv else {}
    restorable = list(range(1, kv + 1))
    for pool in pools:
        if not restorable:
            break
        if pool.policy == "all_pages":
            boundary = next((i for i in range(kv) if not pool.present[i]), kv)
            allowed = set(range(1, boundary + 1))
        elif pool.policy == "trailing_pages":
            n = max(1, pool.trailing)
            allowed = {p for p in range(1, kv + 1) if all(pool.present[i] for i in range(max(0, p - n), p))}
            boundary = max(allowed, default=0)
        else:
            raise ValueError(
                f"kvfabric HiCache backend: pool {pool.name}: hit policy {pool.policy!r} is not supported "
                "(all_pages and trailing_pages are)"
            )
        if boundary:
            hits[pool.name] = boundary
        restorable = [p for p in restorable if p in allowed]
    return (restorable[-1] if restorable else 0), hits, restorable


def options_markdown() -> str:
    """The options as the table of docs/sglang.md (``python -m
    kvfabric.integrations.hicache_layout`` prints it)."""
    rows = ["| option | environment | default | meaning |", "|---|---|---|---|"]
    for o in OPTIONS:
        default = "unset" if o.default is None else (f"`{o.default}`" if o.default != "" else "empty")
        rows.append(f"| `{o.name}` | " + (f"`{o.env}`" if o.env else "") + f" | {default} | {o.meaning} |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    print(options_markdown(), end="")
