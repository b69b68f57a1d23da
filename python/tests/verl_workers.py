"""verl's weight update over kvfabric's checkpoint engine, run the way verl's
CheckpointEngineManager runs it, with worker processes in place of Ray actors.

Every worker imports the backend through verl (``import_external_libs``, as
``checkpoint_engine.custom_backend_module`` makes verl do) and makes it with
``CheckpointEngineRegistry.new("kvfabric", ...)``: trainer ranks with
``is_master``, rollout ranks without, as verl's workers call it. Each step:
``prepare`` everywhere, ``build_topology`` here, ``init_process_group``
everywhere, ``send_weights`` beside ``receive_weights``, ``finalize``. Every
rollout rank checks each tensor it got, byte for byte, against the trainer's.

    python verl_workers.py TRAINERS ROLLOUTS BUCKET_BYTES STEPS PROTOCOL

prints one JSON line: each step's metrics and what every worker saw.
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


def expected(step: int, rollout_dtype):
    """What a rollout rank must get: floating tensors in the rollout dtype."""
    return [(n, t.to(rollout_dtype) if t.is_floating_point() else t) for n, t in model(step)]


def worker(role: str, rank: int, conn, bucket_bytes: int, protocol: str, steps: int) -> None:
    import torch
    from verl.checkpoint_engine import CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs

    import_external_libs(BACKEND_MODULE)
    kwargs = {"protocol": protocol, "host": "127.0.0.1", "timeout": 60}
    if role == "trainer":
        kwargs["is_master"] = rank == 0
    engine = CheckpointEngineRegistry.new("kvfabric", bucket_size=bucket_bytes, **kwargs)
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
                want = iter(expected(step, torch.bfloat16))
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
            engine.finalize()
    except Exception as e:  # reported to the driver, which fails the run
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        engine.close()


def main() -> int:
    trainers, rollouts, bucket_bytes, steps = (int(a) for a in sys.argv[1:5])
    protocol = sys.argv[5]
    from verl.checkpoint_engine import CheckpointEngineRegistry
    from verl.utils.import_utils import import_external_libs

    import_external_libs(BACKEND_MODULE)
    backend = CheckpointEngineRegistry.get("kvfabric")
    ctx = mp.get_context("fork")  # the workers inherit verl and torch, imported once here
    roles = [("trainer", r) for r in range(trainers)] + [("rollout", r) for r in range(rollouts)]
    pipes, procs = [], []
    for role, rank in roles:
        mine, theirs = ctx.Pipe()
        p = ctx.Process(target=worker, args=(role, rank, theirs, bucket_bytes, protocol, steps))
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
    for p in procs:
        p.join(timeout=60)
    report["exit_codes"] = [p.exitcode for p in procs]
    print(json.dumps(report), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
