"""One process of the tensor test: puts (role ``put``) or reads back (role
``get``) torch tensors through ``mooncake.store``'s tensor calls, as a
trainer and a rollout worker would. Runs with an interpreter that has torch.

    python mooncake_tensor_rank.py put|get PROTOCOL

The store's members come from KVF_STORE_MEMBERS. Prints one JSON line: per
check, whether it held."""

import ctypes
import json
import sys

import torch

from mooncake.store import MooncakeDistributedStore, ReplicateConfig


def tensors() -> dict:
    """The tensors of the test, the same in every process (seeded)."""
    g = torch.Generator().manual_seed(5)
    return {
        "full": torch.randn(3, 5, 7, generator=g).to(torch.bfloat16),
        "a": torch.randn(4, 4, generator=g),
        "b": torch.randint(-1 << 40, 1 << 40, (10,), generator=g, dtype=torch.int64),
        "tp": torch.randn(8, 6, generator=g).to(torch.float16),
        "flags": torch.rand(17, generator=g) > 0.5,
        "empty": torch.empty(0, 3, dtype=torch.int32),
        "from": torch.randint(0, 255, (64, 33), generator=g, dtype=torch.uint8),
    }


def put(store, t: dict) -> dict:
    checks = {
        "put_tensor": store.put_tensor("t/full", t["full"]) == 0,
        "batch_put_tensor": store.batch_put_tensor(
            ["t/a", "t/b", "t/flags", "t/empty"], [t["a"], t["b"], t["flags"], t["empty"]]
        )
        == [0] * 4,
        "put_tensor_with_tp": store.put_tensor_with_tp("t/w", t["tp"], tp_rank=0, tp_size=2, split_dim=1) == 0,
        "uneven_tp_refused": store.put_tensor_with_tp("t/odd", t["full"], tp_size=2, split_dim=1) == -600,
        "not_a_tensor_refused": store.put_tensor("t/list", [1, 2, 3]) == -600,
        "bytes": store.put("t/bytes", b"not a tensor value" * 40) == 0,
        "pub_tensor": store.pub_tensor("t/pub", t["a"] * 2, ReplicateConfig()) == 0,
        "with_parallelism": store.put_tensor_with_parallelism("t/par", t["b"]) == 0,
        "a_spec_refused": store.put_tensor_with_parallelism("t/spec", t["b"], parallelism=object()) == -600,
    }
    # A value laid out by the caller ([header][bytes]) in registered memory.
    scratch = torch.zeros(1 << 16, dtype=torch.uint8)
    assert store.register_buffer(scratch.data_ptr(), scratch.numel()) == 0
    assert store.put_tensor("t/staged", t["from"]) == 0
    n = store.batch_get_into(["t/staged"], [scratch.data_ptr()], [scratch.numel()])[0]
    checks["put_tensor_from"] = n > 304 and store.put_tensor_from("t/from", scratch.data_ptr(), n) == 0
    checks["put_tensor_from_refuses_garbage"] = store.put_tensor_from("t/junk", scratch.data_ptr() + 1, n - 1) == -600
    checks["put_tensor_with_tp_from"] = (
        store.put_tensor_with_tp_from("t/wf", scratch.data_ptr(), n, tp_size=4, split_dim=0) == 0
    )
    store.unregister_buffer(scratch.data_ptr())
    return checks


def get(store, t: dict) -> dict:
    same = lambda got, want: isinstance(got, torch.Tensor) and got.dtype == want.dtype and torch.equal(got, want)  # noqa: E731
    checks = {
        "get_tensor": same(store.get_tensor("t/full"), t["full"]),
        "batch_get_tensor": all(
            same(g, w) for g, w in zip(store.batch_get_tensor(["t/a", "t/b", "t/flags"]), [t["a"], t["b"], t["flags"]])
        ),
        "empty": same(store.get_tensor("t/empty"), t["empty"]) and store.get_tensor("t/empty").shape == (0, 3),
        "miss_is_none": store.get_tensor("t/never") is None,
        "bytes_are_not_a_tensor": store.get_tensor("t/bytes") is None,
        "tp_rank0": same(store.get_tensor_with_tp("t/w", tp_rank=0, tp_size=2, split_dim=1), t["tp"][:, :3]),
        "tp_rank1": same(store.get_tensor_with_tp("t/w", tp_rank=1, tp_size=2), t["tp"][:, 3:]),
        "tp_batch": same(store.batch_get_tensor_with_tp(["t/w"], tp_rank=1, tp_size=2)[0], t["tp"][:, 3:]),
        "put_tensor_from": same(store.get_tensor("t/from"), t["from"]),
        "tp_from": all(
            same(store.get_tensor_with_tp("t/wf", r, 4), t["from"][16 * r : 16 * (r + 1)]) for r in range(4)
        ),
        "junk_refused": store.is_exist("t/junk") == 0 and store.is_exist("t/odd_tp_0") == 0,
        "pub_tensor": same(store.get_tensor("t/pub"), t["a"] * 2),
        "with_parallelism": same(store.get_tensor_with_parallelism("t/par"), t["b"]) and store.is_exist("t/spec") == 0,
    }
    into = torch.zeros(1 << 16, dtype=torch.uint8)
    assert store.register_buffer(into.data_ptr(), into.numel()) == 0
    got = store.get_tensor_into("t/a", into.data_ptr(), into.numel())
    checks["get_tensor_into"] = same(got, t["a"]) and got.data_ptr() == into.data_ptr() + 304
    both = store.batch_get_tensor_into(["t/b", "t/never"], [into.data_ptr(), into.data_ptr() + 32768], [32768] * 2)
    checks["batch_get_tensor_into"] = same(both[0], t["b"]) and both[1] is None
    checks["tp_into"] = same(store.get_tensor_with_tp_into("t/w", into.data_ptr(), into.numel(), 1, 2), t["tp"][:, 3:])
    import mooncake.store as module

    header, ptr, nbytes, owner = module._serialize_tensor(t["full"])
    payload = header + bytes((ctypes.c_char * nbytes).from_address(ptr))
    checks["serialize_round_trip"] = len(header) == module._tensor_metadata_size() == 304 and same(
        module._deserialize_tensor(payload), t["full"]
    )
    store.unregister_buffer(into.data_ptr())
    return checks


def main() -> None:
    role, protocol = sys.argv[1], sys.argv[2]
    store = MooncakeDistributedStore()
    rc = store.setup("127.0.0.1", "P2PHANDSHAKE", 0, "16MB", protocol, "", "")
    checks = {"setup": rc == 0}
    if rc == 0:
        checks.update((put if role == "put" else get)(store, tensors()))
        store.close()
    print(json.dumps(checks), flush=True)


if __name__ == "__main__":
    main()
