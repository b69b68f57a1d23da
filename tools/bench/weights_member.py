"""One process of weights_bench.py: a member of a weight sync (kvfabric.weights),
of a torch.distributed gloo group, or a worker of one of verl's checkpoint
engines (verl-kvfabric, verl-mooncake), moving the same named tensors.

Started with a JSON spec; prints {"ready": ...}; then for each line "go V"
it sends (rank 0) or receives version V and prints {"start": t0, "end": t1}
(time.time()) with "spent": where a kvfabric member's time went
(WeightSync.stats(), seconds); "quit" ends it."""

import json
import os
import sys
import time

import numpy as np

spec = json.loads(sys.argv[1])


def model_shapes(layers: int, hidden: int, inter: int, kv: int, vocab: int) -> list[tuple[str, tuple]]:
    """The parameter shapes of a Qwen3-style decoder (embeddings, per layer
    attention with grouped K/V heads, gated MLP, norms; an untied LM head)."""
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [
            (p + "input_layernorm.weight", (hidden,)),
            (p + "self_attn.q_proj.weight", (hidden, hidden)),
            (p + "self_attn.k_proj.weight", (kv, hidden)),
            (p + "self_attn.v_proj.weight", (kv, hidden)),
            (p + "self_attn.o_proj.weight", (hidden, hidden)),
            (p + "self_attn.q_norm.weight", (128,)),
            (p + "self_attn.k_norm.weight", (128,)),
            (p + "post_attention_layernorm.weight", (hidden,)),
            (p + "mlp.gate_proj.weight", (inter, hidden)),
            (p + "mlp.up_proj.weight", (inter, hidden)),
            (p + "mlp.down_proj.weight", (hidden, inter)),
        ]
    out += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return out


shapes = model_shapes(spec["layers"], spec["hidden"], spec["inter"], spec["kv"], spec["vocab"])
rank, world = spec["rank"], spec["world"]


def exchange(name: str, mine: str) -> list[str]:
    """Every member's `mine` for `name`, in rank order, through files in the run's directory."""
    path = os.path.join(spec["dir"], f"{name}-{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(mine)
    os.rename(path + ".tmp", path)
    out = []
    for i in range(world):
        p = os.path.join(spec["dir"], f"{name}-{i}")
        while not os.path.exists(p):
            time.sleep(0.005)
        with open(p) as f:
            out.append(f.read())
    return out


def tensors():
    """Two-byte tensors (float16: the size of bf16, which numpy lacks),
    filled once with a cheap pattern."""
    out = []
    for i, (name, shape) in enumerate(shapes):
        a = np.empty(shape, dtype=np.float16)
        a.reshape(-1).view(np.uint16)[:] = (np.arange(a.size, dtype=np.uint32) * 2654435761 + i) >> 20
        out.append((name, a))
    return out


def kvfabric_member():
    import kvfabric
    from kvfabric.weights import WeightSync

    engine = kvfabric.Engine(
        protocol=spec["protocol"], local_server_name=spec.get("listen", "127.0.0.1:0"), nic_filter=spec.get("nics", "")
    )
    sync = WeightSync(engine, bucket_bytes=spec["bucket"], timeout=120)
    sync.connect(exchange("member", sync.describe()), rank)
    model = tensors() if rank == 0 else None

    def run(version: int) -> dict:
        before = sync.stats()
        if rank == 0:
            sync.send(version, model)
        else:
            for _name, _t in sync.receive(version):
                pass
        after = sync.stats()
        return {k: after[k] - before[k] for k in after if k.endswith("_s")}

    def close():
        sync.close()
        engine.close()

    return run, close


def gloo_member():
    if spec.get("nics"):  # the lab's rails: gloo spreads its connections over them
        os.environ["GLOO_SOCKET_IFNAME"] = spec["nics"]
    import torch
    import torch.distributed as dist

    dist.init_process_group(
        "gloo", init_method="file://" + os.path.join(spec["dir"], "gloo"), rank=rank, world_size=world
    )
    model = (
        [torch.from_numpy(a) for _n, a in tensors()]
        if rank == 0
        else [torch.empty(s, dtype=torch.float16) for _n, s in shapes]
    )

    def run(version: int) -> dict:
        for t in model:
            dist.broadcast(t, src=0)
        return {}

    return run, dist.destroy_process_group


def verl_member(backend: str):
    """A worker of verl's checkpoint engine `backend` (kvfabric's, or verl's
    own Mooncake backend over kvfabric's shim), each version as verl's
    manager runs a step: prepare, build_topology, init_process_group,
    send_weights or receive_weights, finalize. Rank 0 is the trainer."""
    import asyncio

    import torch
    from verl.checkpoint_engine import CheckpointEngineRegistry

    if backend == "kvfabric":
        import kvfabric.integrations.verl  # noqa: F401  (registers the backend)

        host = spec.get("listen", "127.0.0.1:0").rsplit(":", 1)[0]
        kwargs = {"protocol": spec["protocol"], "host": host, "nic_filter": spec.get("nics", ""), "timeout": 120}
    else:  # its constructor picks a CUDA device and it synchronizes one: a host with one GPU, idle
        os.environ.update(RANK=str(rank), MC_FORCE_TCP="1")
        torch.cuda.device_count = lambda: 1
        torch.cuda.set_device = lambda device: None
        torch.cuda.synchronize = lambda device=None: None
        kwargs = {"device": "cpu", "device_name": spec.get("nics", "")}  # the lab's rails, as Mooncake's devices
    if rank == 0:
        kwargs["is_master"] = True
    engine = CheckpointEngineRegistry.new(backend, bucket_size=spec["bucket"], **kwargs)
    model = [(n, torch.from_numpy(a.view(np.uint16)).view(torch.bfloat16)) for n, a in tensors()] if rank == 0 else None

    async def step(version: int):
        if rank == 0:
            await engine.send_weights(iter(model), global_steps=version)
        else:
            async for _name, _t in engine.receive_weights(global_steps=version):
                pass

    def run(version: int) -> dict:
        metadata = [json.loads(m) for m in exchange(f"verl-{version}", json.dumps(engine.prepare()))]
        actor, rollout = type(engine).build_topology(1, world - 1, metadata)
        kw, i = (actor, 0) if rank == 0 else (rollout, rank - 1)
        engine.init_process_group(**{k: v[i] for k, v in kw.items()})
        asyncio.run(step(version))
        exchange(f"verl-done-{version}", "")  # verl finalizes once every worker is done
        engine.finalize()
        return {}

    return run, getattr(engine, "close", lambda: None)


kinds = {"kvfabric": kvfabric_member, "gloo": gloo_member}
kinds.update({k: (lambda b=k.removeprefix("verl-"): verl_member(b)) for k in ("verl-kvfabric", "verl-mooncake")})
run, close = kinds[spec["kind"]]()
print(
    json.dumps({"ready": True, "bytes": sum(int(np.prod(s)) * 2 for _n, s in shapes), "tensors": len(shapes)}),
    flush=True,
)
for line in sys.stdin:
    if line.strip() == "quit":
        break
    version = int(line.split()[1])
    t0 = time.time()
    spent = run(version)
    print(json.dumps({"start": t0, "end": time.time(), "spent": spent}), flush=True)
close()
