"""A verl checkpoint-engine backend over ``kvfabric.weights``.

verl loads it by module name; the settings a user sets (docs/weights.md has
the whole list)::

    actor_rollout_ref.rollout.checkpoint_engine.backend=kvfabric
    actor_rollout_ref.rollout.checkpoint_engine.custom_backend_module=kvfabric.integrations.verl
    actor_rollout_ref.rollout.checkpoint_engine.update_weights_bucket_megabytes=512
    +actor_rollout_ref.rollout.checkpoint_engine.engine_kwargs.kvfabric.protocol=efa

Each step, verl calls ``prepare`` on every trainer and rollout worker, hands
what they returned to ``build_topology``, then ``init_process_group`` with
its answer, ``send_weights`` on the trainer ranks beside ``receive_weights``
on the rollout ranks, and ``finalize``. Trainer rank 0 sends; the other
trainer ranks only run their generator (it may gather shards collectively).
Every rollout rank receives, and passes each bucket on to the ranks behind
it in kvfabric's relay plan, so the trainer's link carries each byte once.
The engine and the registered buckets are made at the first ``prepare`` and
kept for every step after; ``close`` releases them.

Weights travel through host memory: a tensor on a GPU is copied to the host
(in ``rollout_dtype``) before it is packed, and the rollout side yields CPU
tensors, views of a registered bucket valid until the next one is taken
(verl's server adapters copy them onto the GPU).

This module imports verl: it is importable only where verl is installed.
"""

from __future__ import annotations

import time
from typing import Any, AsyncIterator, Iterable

import torch
from verl.checkpoint_engine.base import CheckpointEngine, CheckpointEngineRegistry
from verl.workers.rollout.utils import ensure_async_iterator

from ..engine import Engine
from ..errors import InvalidArgumentError
from ..weights import WeightSync


def _node_address() -> str:
    """This host's address as Ray, which runs verl's workers, knows it."""
    import ray

    return ray.util.get_node_ip_address().strip("[]")


@CheckpointEngineRegistry.register("kvfabric")
class KvfabricCheckpointEngine(CheckpointEngine):
    """verl's ``CheckpointEngine`` over a kvfabric weight sync.

    verl passes ``bucket_size`` (``update_weights_bucket_megabytes``) and, on
    trainer ranks only, ``is_master``; everything else comes from
    ``engine_kwargs.kvfabric``: ``protocol`` (``auto``, ``efa``, ``tcp``...),
    ``host`` (the address other workers reach this one at; default Ray's node
    address), ``nic_filter``, ``slots`` (buckets in flight to each receiver),
    ``timeout`` (seconds a member waits for a bucket before it fails, naming
    the member it waited for), ``rollout_dtype`` (floating-point tensors are
    sent in it; ``None`` keeps each tensor's own), ``settings`` (kvfabric
    settings, ``KVF_...`` names)."""

    def __init__(
        self,
        bucket_size: int,
        is_master: bool | None = None,
        protocol: str = "auto",
        host: str | None = None,
        nic_filter: str = "",
        slots: int = 2,
        timeout: float = 300.0,
        manifest_bytes: int = 1 << 20,
        rollout_dtype: str | None = "bfloat16",
        settings: dict | None = None,
        **unknown: Any,
    ):
        if unknown:
            raise InvalidArgumentError(
                f"kvfabric's verl backend takes no {sorted(unknown)} (engine_kwargs.kvfabric): it takes protocol, "
                "host, nic_filter, slots, timeout, manifest_bytes, rollout_dtype, settings"
            )
        if bucket_size <= 0:
            raise InvalidArgumentError(f"bucket_size {bucket_size}: give update_weights_bucket_megabytes above 0")
        self.bucket_size = int(bucket_size)
        # verl gives is_master to trainer ranks only: None is a rollout rank,
        # False a trainer rank that sends nothing (it needs no engine).
        self.idle = is_master is False
        self.options = dict(protocol=protocol, host=host, nic_filter=nic_filter, settings=settings or {})
        self.slots, self.timeout, self.manifest_bytes = int(slots), float(timeout), int(manifest_bytes)
        self.rollout_dtype = getattr(torch, rollout_dtype) if rollout_dtype else None
        self.engine: Engine | None = None
        self.sync: WeightSync | None = None
        self.rank = -1
        self.steps = 0  # versions sent or received, for steps verl does not number

    # -- verl's interface ---------------------------------------------------
    def prepare(self) -> dict[str, Any]:
        """Makes the engine and the registered buckets the first time (kept for
        later steps); returns this worker's description for the others."""
        if self.idle:
            return {"member": None}
        if self.sync is None:
            host = self.options["host"] or _node_address()
            self.engine = Engine(
                local_server_name=f"{host}:0",
                protocol=self.options["protocol"],
                nic_filter=self.options["nic_filter"],
                settings=self.options["settings"],
            )
            self.sync = WeightSync(
                self.engine,
                bucket_bytes=self.bucket_size,
                manifest_bytes=self.manifest_bytes,
                slots=self.slots,
                timeout=self.timeout,
            )
        return {"member": self.sync.describe()}

    @classmethod
    def build_topology(
        cls, actor_wg_world_size: int, rollout_world_size: int, metadata: list[dict]
    ) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
        """Trainer rank 0 is member 0, the sender; rollout rank i is member
        i + 1. The relay plan is made from the members' hosts and rails."""
        if len(metadata) != actor_wg_world_size + rollout_world_size:
            raise InvalidArgumentError(
                f"{len(metadata)} descriptions for {actor_wg_world_size} trainer and {rollout_world_size} rollout "
                "workers"
            )
        members = [metadata[0]["member"]] + [m["member"] for m in metadata[actor_wg_world_size:]]
        if any(m is None for m in members):
            raise InvalidArgumentError(
                "trainer rank 0 must be the master (is_master=True) and every rollout worker a receiver"
            )
        actor = {
            "rank": [0] + [-1] * (actor_wg_world_size - 1),
            "members": [members if r == 0 else None for r in range(actor_wg_world_size)],
        }
        rollout = {"rank": list(range(1, rollout_world_size + 1)), "members": [members] * rollout_world_size}
        return actor, rollout

    def init_process_group(self, rank: int, members: list[str] | None) -> None:
        """Joins this step's sync as member ``rank`` (-1: a trainer rank that
        does not send)."""
        self.rank = rank
        if rank >= 0:
            self._live().connect(members, rank)

    def finalize(self) -> None:
        """Keeps the engine and the buckets for the next step (``close`` frees them)."""

    async def send_weights(self, weights: Iterable | AsyncIterator, global_steps: int | None = None) -> dict:
        """Trainer rank 0 sends ``(name, tensor)`` pairs as version
        ``global_steps``; other trainer ranks only run the generator. Returns
        verl's per-sync metrics."""
        version = self._version(global_steps)
        if self.rank < 0:
            async for _ in ensure_async_iterator(weights):
                pass
            return {}
        sync = self._live()
        begun, sent = time.perf_counter(), 0
        sync.begin_send(version)
        async for name, t in ensure_async_iterator(weights):
            t = t.detach()
            if self.rollout_dtype is not None and t.is_floating_point() and t.dtype != self.rollout_dtype:
                t = t.to(self.rollout_dtype)
            t = t.cpu()
            sync.put(name, t)
            sent += t.numel() * t.element_size()
        sync.end_send()
        took = time.perf_counter() - begun
        return {"kvfabric/sync_s": took, "kvfabric/bytes": sent, "kvfabric/GBps": sent / took / 1e9 if took else 0.0}

    async def receive_weights(self, global_steps: int | None = None):
        """``(name, tensor)`` of version ``global_steps``, checked, in the
        sender's order: CPU tensors valid until the next one is taken."""
        version = self._version(global_steps)
        for name, tensor in self._live().receive(version, torch=True):
            yield name, tensor

    # -- kvfabric's -----------------------------------------------------------
    def close(self) -> None:
        """Unregisters the buckets and stops the engine (idempotent)."""
        if self.sync is not None:
            self.sync.close()
            self.sync = None
        if self.engine is not None:
            self.engine.close()
            self.engine = None

    def stats(self) -> dict:
        """Where this worker's time went (``WeightSync.stats``)."""
        return self.sync.stats() if self.sync is not None else {}

    def _live(self) -> WeightSync:
        if self.sync is None:
            raise InvalidArgumentError("the kvfabric checkpoint engine is used before prepare() or after close()")
        return self.sync

    def _version(self, global_steps: int | None) -> int:
        self.steps += 1
        return int(global_steps) if global_steps is not None else self.steps
