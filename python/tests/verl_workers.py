"""verl's weight update over kvfabric's checkpoint engine, run the way verl's
CheckpointEngineManager runs it, with worker processes in place of Ray actors.

The driver imports the backend through verl (``import_external_libs``, as
``checkpoint_engine.custom_backend_module`` makes verl do) before it forks
the workers, and each makes it with
``CheckpointEngineRegistry.new("kvfabric", ...)``: trainer ranks with
``is_master``, rollout ranks without, as verl's workers call it. Each step:
``prepare`` everywhere, ``build_topology`` here, ``init_process_group``
everywhere, ``send_weights`` beside ``receive_weights``, ``finalize``. Every
rollout rank checks each tensor it got, byte for byte, against the trainer's.

    python verl_workers.py BACKEND TRAINERS ROLLOUTS BUCKET_BYTES STEPS PROTOCOL

prints one JSON line: each step's metrics and what every worker saw.
BACKEND ``kvfabric`` is kvfabric's backend; ``mooncake`` is verl's own
Mooncake backend over kvfabric's ``mooncake`` shim, with CPU buffers
(``device: cpu``). That backend picks a CUDA device in its constructor
(``rank % device_count()``, ``set_device``) and synchronizes the device
around each bucket whatever its buffers' device: on a host without a GPU,
torch.cuda's device count, device choice and synchronize are stood in by
a host with one GPU and nothing queued on it. Its ``rdma`` protocol runs
over tcp (``MC_FORCE_TCP``, as Mooncake's own variable asks).
"""

import asyncio
import json
import multiprocessing as mp
import sys

BACKEND_MODULE = "kvfabric.integrations.verl"


def model(step: int):
    """(name, tensor) of a model whose values depend on the step: mixed dtypes,
    one tensor larger than a bucket of 1 MiB, many smaller than one."""
    import torch

    g = torch.Generator().manual_seed(1000 + step)
    out = [("embed.weight", torch.randn(640, 1024, generator=g, dtype=torch.float32))]  # 2.5 MiB
    for layer in range(24):
        out.append((f"layers.{layer}.attn.qkv", torch.randn(96, 64, generator=g).to(torch.bfloat16)))
        out.append((f"layers.{layer}.norm", torch.randn(64, generator=g, dtype=torch.float32)))
        out.append((f"layers.{layer}.rope_ids", torch.randint(0, 1 << 30, (33,), generator=g, dtype=torch.int64)))
    out.append(("lm_head.bias", torch.randn(1, generator=g).to(torch.float16)))
    return out


def expected(step: int, rollout_dtype, backend: str):
    """What a rollout rank must get: floating tensors in the rollout dtype
    (verl's Mooncake backend converts every tensor)."""
    convert = (lambda t: True) if backend == "mooncake" else (lambda t: t.is_floating_point())
    return [(n, t.to(rollout_dtype) if convert(t) else t) for n, t in model(step)]


def stand_in_one_gpu() -> None:
    """torch.cuda as verl's Mooncake backend asks it, on a host without a GPU."""
    import torch

    torch.cuda.device_count = lambda: 1
    torch.cuda.set_device = lambda device: None
    torch.cuda.synchronize = lambda device=None: None


def make_engine(backend: str, role: str, rank: int, index: int, bucket_bytes: int, protocol: str):
    from verl.checkpoint_engine import CheckpointEngineRegistry

    if backend == "kvfabric":
        kwargs = {"protocol": protocol, "host": "127.0.0.1", "timeout": 60}
    else:
        import os

        os.environ["RANK"] = str(index)
        os.environ["MC_FORCE_TCP"] = "1"
        stand_in_one_gpu()
        kwargs = {"device": "cpu"}
    if role == "trainer":
        kwargs["is_master"] = rank == 0
    return CheckpointEngineRegistry.new(backend, bucket_size=bucket_bytes, **kwargs)


def worker(backend: str, role: str, rank: int, index: int, conn, bucket_bytes: int, protocol: str, steps: int):
    import torch

    engine = make_engine(backend, role, rank, index, bucket_bytes, protocol)
    try:
        for step in range(1, steps + 1):
            conn.send(engine.prepare())
            engine.init_process_group(**conn.recv())
            if role == "trainer":
                yielded = [0]

                def weights():
                    for pair in model(step):
                        yielded[0] += 1
                        yield pair

                metrics = asyncio.run(engine.send_weights(weights(), global_steps=step))
                conn.send({"metrics": metrics, "yielded": yielded[0]})
            else:
                want = iter(expected(step, torch.bfloat16, backend))
                got, wrong = 0, []

                async def receive():
                    nonlocal got
                    async for name, tensor in engine.receive_weights(global_steps=step):
                        w_name, w = next(want)
                        same = (
                            name == w_name
                            and tensor.dtype == w.dtype
                            and tensor.shape == w.shape
                            and torch.equal(tensor.view(torch.uint8), w.view(torch.uint8))
                        )
                        if not same:
                            wrong.append(name)
                        got += 1

                asyncio.run(receive())
                conn.send({"got": got, "wrong": wrong, "left": sum(1 for _ in want)})
            conn.recv()  # verl finalizes once every worker is done with the step
            engine.finalize()
    except Exception as e:  # reported to the driver, which fails the run
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        if hasattr(engine, "close"):  # kvfabric's; verl's Mooncake backend has none
            engine.close()


def main() -> int:
    name = sys.argv[1]
    trainers, rollouts, bucket_bytes, steps = (int(a) for a in sys.argv[2:6])
    protocol = sys.argv[6]
    from verl.checkpoint_engine import CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs

    if name == "kvfabric":
        import_external_libs(BACKEND_MODULE)
    backend = CheckpointEngineRegistry.get(name)
    ctx = mp.get_context("fork")  # the workers inherit verl and torch, imported once here
    roles = [("trainer", r) for r in range(trainers)] + [("rollout", r) for r in range(rollouts)]
    pipes, procs = [], []
    for index, (role, rank) in enumerate(roles):
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=worker, args=(name, role, rank, index, theirs, bucket_bytes, protocol, steps))
        p.start()
        pipes.append(mine)
        procs.append(p)
    report = {"steps": []}
    for _ in range(steps):
        metadata = [c.recv() for c in pipes]
        errors = [m["error"] for m in metadata if "error" in m]
        if errors:
            report["errors"] = errors
            break
        actor_kw, rollout_kw = backend.build_topology(trainers, rollouts, metadata)
        for i, c in enumerate(pipes):
            kw, j = (actor_kw, i) if i < trainers else (rollout_kw, i - trainers)
            c.send({k: v[j] for k, v in kw.items()})
        report["steps"].append([c.recv() for c in pipes])
        for c in pipes:
            c.send("finalize")
    for p in procs:
        p.join(timeout=60)
    report["exit_codes"] = [p.exitcode for p in procs]
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
