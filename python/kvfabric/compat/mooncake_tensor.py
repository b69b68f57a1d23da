"""Tensors in ``mooncake.store``: a value is a 304-byte header followed by the
tensor's bytes, laid out as Mooncake lays it out (``TensorMetadata`` in
``mooncake-integration/integration_utils.h``), so a tensor put by either side
is read by the other. Tensor-parallel shards are stored under ``KEY_tp_RANK``,
split evenly along ``split_dim``. torch is imported at the first tensor call;
without it those calls log why and answer None or INVALID_PARAMS."""

from __future__ import annotations

import ctypes
import struct
from typing import Any, List, NamedTuple, Optional, Sequence

from .mooncake import _log
from .mooncake_types import INVALID_PARAMS

MAGIC = 0x4D4F4F4E
VERSION = 1
MAX_DIMS = 8
MAX_AXES = 4
FULL, SHARD = 0, 1  # layout kinds
AXIS_TP = 1  # LayoutAxisKind::TP

# magic, version, header size, dtype, ndim, layout kind, flags, data offset, data bytes
_HEADER = struct.Struct("<IHHiiIIQQ")
_SHAPES = struct.Struct(f"<{MAX_DIMS}q{MAX_DIMS}qII")  # global shape, local shape, axis count, reserved
_AXIS = struct.Struct("<iiiiiiq")  # kind, axis index, shard rank, shard count, split dim, reserved, local extent
HEADER_BYTES = _HEADER.size + _SHAPES.size + MAX_AXES * _AXIS.size  # 304

# Mooncake's TensorDtype codes, by torch dtype name, and their element sizes.
DTYPES = [
    "float32",
    "float64",
    "int8",
    "uint8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "uint64",
    "bool",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
]
ITEM_BYTES = [4, 8, 1, 1, 2, 2, 4, 4, 8, 8, 1, 2, 2, 1, 1]


class Layout(NamedTuple):
    """What a tensor value's header says: its dtype code, its own shape and where its bytes are."""

    dtype: int
    shape: tuple
    data_offset: int
    data_bytes: int


def pack_header(
    dtype: int, global_shape: Sequence[int], local_shape: Sequence[int], data_bytes: int, tp: Optional[tuple] = None
) -> bytes:
    """The header of a tensor value. ``tp`` = (rank, size, split_dim) makes it a shard
    of a tensor of ``global_shape`` split along ``split_dim``; None a whole tensor."""
    dims = lambda shape: list(shape) + [-1] * (MAX_DIMS - len(shape))  # noqa: E731
    header = _HEADER.pack(
        MAGIC, VERSION, HEADER_BYTES, dtype, len(global_shape), SHARD if tp else FULL, 0, HEADER_BYTES, data_bytes
    )
    shapes = _SHAPES.pack(*dims(global_shape), *dims(local_shape), 1 if tp else 0, 0)
    axes = [_AXIS.pack(AXIS_TP, 0, tp[0], tp[1], tp[2], 0, local_shape[tp[2]])] if tp else []
    axes += [bytes(_AXIS.size)] * (MAX_AXES - len(axes))
    return header + shapes + b"".join(axes)


def parse_header(value: Any, total: int) -> Optional[Layout]:
    """The layout of a tensor value of ``total`` bytes whose first bytes are ``value``
    (a buffer), or None when its header is not a valid one for that length (the checks
    of Mooncake's ValidateTensorMetadata)."""
    if total < HEADER_BYTES:
        return None
    raw = bytes(memoryview(value)[:HEADER_BYTES])
    magic, version, size, dtype, ndim, kind, _, offset, nbytes = _HEADER.unpack_from(raw)
    fields = _SHAPES.unpack_from(raw, _HEADER.size)
    global_shape, local_shape, axis_count = fields[:MAX_DIMS], fields[MAX_DIMS : 2 * MAX_DIMS], fields[2 * MAX_DIMS]
    if (magic, version, size) != (MAGIC, VERSION, HEADER_BYTES) or not 0 <= dtype < len(DTYPES):
        return None
    if not 0 <= ndim <= MAX_DIMS or axis_count > MAX_AXES or kind > SHARD:
        return None
    if not HEADER_BYTES <= offset <= total or nbytes != total - offset:
        return None
    if any(d < 0 for d in global_shape[:ndim] + local_shape[:ndim]):
        return None
    if any(d != -1 for d in global_shape[ndim:] + local_shape[ndim:]):
        return None
    numel = 1
    for d in local_shape[:ndim]:
        numel *= d
    if nbytes != numel * ITEM_BYTES[dtype]:
        return None
    for i in range(axis_count):
        akind, _, rank, count, split, _, _ = _AXIS.unpack_from(raw, _HEADER.size + _SHAPES.size + i * _AXIS.size)
        if not 0 <= akind <= 4 or count <= 0 or not 0 <= rank < count or not -1 <= split < ndim:
            return None
    return Layout(dtype, tuple(local_shape[:ndim]), offset, nbytes)


def shard_range(extent: int, rank: int, count: int) -> tuple:
    """(start, length) of shard ``rank`` of ``count`` along a dimension of ``extent``."""
    start = extent * rank // count
    return start, extent * (rank + 1) // count - start


def tp_key(key: str, rank: int) -> str:
    """Where shard ``rank`` of a tensor put under ``key`` is stored."""
    return f"{key}_tp_{rank}"


def _torch():
    try:
        import torch
    except ImportError as e:
        raise TypeError(f"tensor calls need torch ({e})") from None
    return torch


def _encode(tensor: Any, tp: Optional[tuple] = None) -> List[memoryview]:
    """A tensor (or the shard ``tp`` = (rank, size, split_dim) of it) as its value's
    parts: the header and the bytes. TypeError or ValueError says why it cannot be."""
    torch = _torch()
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{type(tensor).__name__} is not a torch.Tensor")
    name = str(tensor.dtype).replace("torch.", "")
    if name not in DTYPES:
        raise TypeError(f"dtype {tensor.dtype} has no Mooncake tensor code")
    if tensor.dim() > MAX_DIMS:
        raise ValueError(f"{tensor.dim()} dimensions; at most {MAX_DIMS}")
    whole = list(tensor.shape)
    if tp is not None:
        rank, size, split = tp
        if not 0 <= split < len(whole) or size <= 0 or whole[split] % size:
            raise ValueError(f"shape {whole} does not split evenly into {size} along dimension {split}")
        start, length = shard_range(whole[split], rank, size)
        tensor = tensor.narrow(split, start, length)
    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8).numpy()
    header = pack_header(DTYPES.index(name), whole, list(tensor.shape), data.nbytes, tp)
    return [memoryview(header), memoryview(data)]


def decode(value: Any, total: int) -> Any:
    """The torch tensor a value of ``total`` bytes holds, sharing its memory; None
    (logged) when the value is not a tensor value."""
    layout = parse_header(value, total)
    if layout is None:
        _log("error", f"not a tensor value ({total} bytes with no valid {HEADER_BYTES}-byte header)")
        return None
    torch = _torch()
    dtype = getattr(torch, DTYPES[layout.dtype])
    if layout.data_bytes == 0:
        return torch.empty(layout.shape, dtype=dtype)
    flat = torch.frombuffer(value, dtype=torch.uint8, count=layout.data_bytes, offset=layout.data_offset)
    return flat.view(dtype).reshape(layout.shape)


def tensor_metadata_size() -> int:
    """The bytes of a tensor value's header (Mooncake's ``_tensor_metadata_size``)."""
    return HEADER_BYTES


def serialize_tensor(tensor: Any) -> tuple:
    """Mooncake's ``_serialize_tensor``: (the header, the data's address, its bytes, the
    tensor that owns them: the caller's, or a contiguous copy). ValueError for anything
    that is not a torch tensor of a dtype Mooncake has a code for."""
    torch = _torch()
    name = str(getattr(tensor, "dtype", "")).replace("torch.", "")
    if not isinstance(tensor, torch.Tensor) or name not in DTYPES or tensor.dim() > MAX_DIMS:
        raise ValueError("unsupported tensor for Mooncake tensor serialization")
    owner = tensor.contiguous()
    nbytes = owner.numel() * owner.element_size()
    shape = list(owner.shape)
    return pack_header(DTYPES.index(name), shape, shape, nbytes), owner.data_ptr(), nbytes, owner


def deserialize_tensor(payload: bytes) -> Any:
    """Mooncake's ``_deserialize_tensor``: the tensor a header and its bytes make, owning a
    copy of them; ValueError for a payload that is not one."""
    value = bytearray(payload)
    if parse_header(value, len(value)) is None:
        raise ValueError("invalid serialized Mooncake tensor payload")
    return decode(value, len(value))


def _at(ptr: int, size: int):
    """``size`` bytes of memory at ``ptr`` as a writable buffer (no copy)."""
    return (ctypes.c_char * size).from_address(ptr)


class TensorCalls:
    """The tensor calls of MooncakeDistributedStore (a mixin over its ``_put_views``,
    ``_read_pages``, ``_read_one``, ``batch_put_from`` and ``batch_get_into``)."""

    # -- puts ----------------------------------------------------------------
    def _put_tensors(
        self, call: str, keys: Sequence[str], tensors: Sequence[Any], tp: Optional[tuple] = None, config: Any = None
    ) -> List[int]:
        """Puts each tensor (or, with ``tp`` = (size, split_dim), all its shards), with the
        copies ``config`` asks for. Per key 0 or a negative ErrorCode (the first shard's
        failure)."""
        if len(keys) != len(tensors):
            _log("error", f"{call}: {len(keys)} keys but {len(tensors)} tensors")
            return [INVALID_PARAMS] * len(keys)
        names, views, owner, out = [], [], [], [0] * len(keys)
        for i, (key, tensor) in enumerate(zip(keys, tensors)):
            try:
                shards = [(key, None)] if tp is None else [(tp_key(key, r), (r,) + tp) for r in range(tp[0])]
                encoded = [(name, _encode(tensor, shard)) for name, shard in shards]
            except (TypeError, ValueError, RuntimeError) as e:
                _log("error", f"{call}: key {key!r}: {e}")
                out[i] = INVALID_PARAMS
                continue
            for name, parts in encoded:
                names.append(name)
                views.append(parts)
                owner.append(i)
        for i, code in zip(owner, self._put_views(call, names, views, config)):
            if code != 0 and out[i] == 0:
                out[i] = code
        return out

    def put_tensor(self, key: str, tensor: Any) -> int:
        """Stores a torch tensor (any device; its bytes copied through the local buffer). 0 or a negative ErrorCode."""
        return self._put_tensors("put_tensor", [key], [tensor])[0]

    def batch_put_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> List[int]:
        return self._put_tensors("batch_put_tensor", keys, tensors_list)

    def put_tensor_with_tp(self, key: str, tensor: Any, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0) -> int:
        """Stores every one of the ``tp_size`` shards of a tensor split evenly along
        ``split_dim`` (under ``KEY_tp_RANK``; ``tp_rank`` is not used, as in Mooncake);
        ``tp_size`` 1 is put_tensor."""
        if tp_size <= 1:
            return self.put_tensor(key, tensor)
        return self._put_tensors("put_tensor_with_tp", [key], [tensor], (tp_size, split_dim))[0]

    def batch_put_tensor_with_tp(
        self,
        base_keys: Sequence[str],
        tensors_list: Sequence[Any],
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> List[int]:
        if tp_size <= 1:
            return self.batch_put_tensor(base_keys, tensors_list)
        return self._put_tensors("batch_put_tensor_with_tp", base_keys, tensors_list, (tp_size, split_dim))

    def batch_put_tensor_from(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[int]:
        """Puts values already laid out as [header][bytes] in registered memory, each
        header checked first (-600 for one that is not valid)."""
        return self._put_tensor_values("batch_put_tensor_from", keys, buffer_ptrs, sizes, None)

    def _put_tensor_values(
        self, call: str, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int], config: Any
    ) -> List[int]:
        if len(keys) != len(buffer_ptrs) or len(keys) != len(sizes):
            return [INVALID_PARAMS] * len(keys)
        valid = [
            i
            for i, (p, n) in enumerate(zip(buffer_ptrs, sizes))
            if p and parse_header(_at(int(p), min(int(n), HEADER_BYTES)), int(n)) is not None
        ]
        out = [INVALID_PARAMS] * len(keys)
        if len(valid) < len(keys):
            _log("error", f"{call}: {len(keys) - len(valid)} buffers hold no valid tensor header")
        for i, code in zip(
            valid,
            self.batch_put_from(
                [keys[i] for i in valid], [buffer_ptrs[i] for i in valid], [sizes[i] for i in valid], config
            ),
        ):
            out[i] = code
        return out

    def put_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        return self.batch_put_tensor_from([key], [buffer_ptr], [size])[0]

    def _tensors_at(self, call: str, buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[Any]:
        """The tensors held by [header][bytes] values at the pointers (None where not one)."""
        out = []
        for p, n in zip(buffer_ptrs, sizes):
            try:
                out.append(decode(_at(int(p), int(n)), int(n)) if p and n > 0 else None)
            except (TypeError, ValueError, RuntimeError) as e:
                _log("error", f"{call}: {e}")
                out.append(None)
        return out

    def put_tensor_with_tp_from(
        self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        """put_tensor_with_tp of the whole tensor laid out at ``buffer_ptr``."""
        return self.batch_put_tensor_with_tp_from([key], [buffer_ptr], [size], tp_rank, tp_size, split_dim)[0]

    def batch_put_tensor_with_tp_from(
        self,
        base_keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> List[int]:
        if tp_size <= 1:
            return self.batch_put_tensor_from(base_keys, buffer_ptrs, sizes)
        if len(base_keys) != len(buffer_ptrs) or len(base_keys) != len(sizes):
            return [INVALID_PARAMS] * len(base_keys)
        tensors = self._tensors_at("batch_put_tensor_with_tp_from", buffer_ptrs, sizes)
        return self._put_tensors("batch_put_tensor_with_tp_from", base_keys, tensors, (tp_size, split_dim))

    # Publishing is putting with a ReplicateConfig (its copies).
    def pub_tensor(self, key: str, tensor: Any, config: Any = None) -> int:
        return self._put_tensors("pub_tensor", [key], [tensor], None, config)[0]

    def batch_pub_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any], config: Any = None) -> List[int]:
        return self._put_tensors("batch_pub_tensor", keys, tensors_list, None, config)

    def pub_tensor_with_tp(
        self, key: str, tensor: Any, config: Any = None, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> int:
        tp = (tp_size, split_dim) if tp_size > 1 else None
        return self._put_tensors("pub_tensor_with_tp", [key], [tensor], tp, config)[0]

    def batch_pub_tensor_with_tp(
        self,
        base_keys: Sequence[str],
        tensors_list: Sequence[Any],
        config: Any = None,
        tp_rank: int = 0,
        tp_size: int = 1,
        split_dim: int = 0,
    ) -> List[int]:
        tp = (tp_size, split_dim) if tp_size > 1 else None
        return self._put_tensors("batch_pub_tensor_with_tp", base_keys, tensors_list, tp, config)

    def upsert_pub_tensor(self, key: str, tensor: Any, config: Any = None) -> int:
        return self.pub_tensor(key, tensor, config)

    def batch_upsert_pub_tensor(
        self, keys: Sequence[str], tensors_list: Sequence[Any], config: Any = None
    ) -> List[int]:
        return self.batch_pub_tensor(keys, tensors_list, config)

    # Upserts replace, as kvfabric's puts do.
    def upsert_tensor(self, key: str, tensor: Any) -> int:
        return self.put_tensor(key, tensor)

    def batch_upsert_tensor(self, keys: Sequence[str], tensors_list: Sequence[Any]) -> List[int]:
        return self.batch_put_tensor(keys, tensors_list)

    def upsert_tensor_from(self, key: str, buffer_ptr: int, size: int) -> int:
        return self.put_tensor_from(key, buffer_ptr, size)

    def batch_upsert_tensor_from(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]
    ) -> List[int]:
        return self.batch_put_tensor_from(keys, buffer_ptrs, sizes)

    # -- gets ----------------------------------------------------------------
    def _decoded(self, call: str, handle: Any) -> Any:
        try:
            return None if handle is None else decode(handle, len(handle))
        except (TypeError, ValueError, RuntimeError) as e:
            _log("error", f"{call}: {e}")
            return None

    def get_tensor(self, key: str) -> Any:
        """The torch tensor (on the CPU) stored under ``key``, or None for a miss or a value that is not a tensor."""
        return self._decoded("get_tensor", self.get_buffer(key))

    def batch_get_tensor(self, keys: Sequence[str]) -> List[Any]:
        return [self._decoded("batch_get_tensor", h) for h in self.batch_get_buffer(keys)]

    def get_tensor_with_tp(self, key: str, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0) -> Any:
        """Shard ``tp_rank`` of a tensor put with put_tensor_with_tp (the tensor itself for ``tp_size`` 1)."""
        return self.get_tensor(key if tp_size <= 1 else tp_key(key, tp_rank))

    def batch_get_tensor_with_tp(self, base_keys: Sequence[str], tp_rank: int = 0, tp_size: int = 1) -> List[Any]:
        return self.batch_get_tensor(list(base_keys) if tp_size <= 1 else [tp_key(k, tp_rank) for k in base_keys])

    def batch_get_tensor_into(self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int]) -> List[Any]:
        """Reads each value into registered memory and answers the tensor viewing it
        there (None for a miss); INVALID_PARAMS per key for lists that do not match."""
        if len(keys) != len(buffer_ptrs) or len(keys) != len(sizes) or not all(buffer_ptrs):
            return [INVALID_PARAMS] * len(keys)
        got = self.batch_get_into(keys, buffer_ptrs, sizes)
        return self._tensors_at("batch_get_tensor_into", buffer_ptrs, [max(n, 0) for n in got])

    def get_tensor_into(self, key: str, buffer_ptr: int, size: int) -> Any:
        return self.batch_get_tensor_into([key], [buffer_ptr], [size])[0]

    def get_tensor_with_tp_into(
        self, key: str, buffer_ptr: int, size: int, tp_rank: int = 0, tp_size: int = 1, split_dim: int = 0
    ) -> Any:
        return self.get_tensor_into(key if tp_size <= 1 else tp_key(key, tp_rank), buffer_ptr, size)

    def batch_get_tensor_with_tp_into(
        self,
        base_keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        tp_rank: int = 0,
        tp_size: int = 1,
    ) -> List[Any]:
        keys = list(base_keys) if tp_size <= 1 else [tp_key(k, tp_rank) for k in base_keys]
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)

    # -- Mooncake's parallelism specs: the whole tensor only ---------------------
    def _whole(self, call: str, *specs: Any) -> bool:
        """Whether no parallelism spec, writer partition or read target is given (the whole
        tensor, which these calls then put or get); one that is given is logged and refused."""
        given = [x for x in specs if x is not None and not (isinstance(x, (list, tuple)) and all(y is None for y in x))]
        if given:
            _log(
                "error",
                f"{call}: parallelism specs, writer partitions and read targets are not taken here; "
                "put the shards with put_tensor_with_tp, or the whole tensor with none",
            )
        return not given

    def put_tensor_with_parallelism(
        self, key: str, tensor: Any, parallelism: Any = None, config: Any = None, writer_partition: Any = None
    ) -> int:
        if not self._whole("put_tensor_with_parallelism", parallelism, writer_partition):
            return INVALID_PARAMS
        return self.pub_tensor(key, tensor, config)

    def batch_put_tensor_with_parallelism(
        self,
        keys: Sequence[str],
        tensors_list: Sequence[Any],
        parallelisms: Any = None,
        config: Any = None,
        writer_partitions: Any = None,
    ) -> List[int]:
        if not self._whole("batch_put_tensor_with_parallelism", parallelisms, writer_partitions):
            return [INVALID_PARAMS] * len(keys)
        return self.batch_pub_tensor(keys, tensors_list, config)

    def put_tensor_with_parallelism_from(
        self,
        key: str,
        buffer_ptr: int,
        size: int,
        parallelism: Any = None,
        config: Any = None,
        writer_partition: Any = None,
    ) -> int:
        return self.batch_put_tensor_with_parallelism_from(
            [key], [buffer_ptr], [size], parallelism and [parallelism], config, writer_partition and [writer_partition]
        )[0]

    def batch_put_tensor_with_parallelism_from(
        self,
        keys: Sequence[str],
        buffer_ptrs: Sequence[int],
        sizes: Sequence[int],
        parallelisms: Any = None,
        config: Any = None,
        writer_partitions: Any = None,
    ) -> List[int]:
        if not self._whole("batch_put_tensor_with_parallelism_from", parallelisms, writer_partitions):
            return [INVALID_PARAMS] * len(keys)
        return self._put_tensor_values("batch_put_tensor_with_parallelism_from", keys, buffer_ptrs, sizes, config)

    upsert_tensor_with_parallelism = put_tensor_with_parallelism
    batch_upsert_tensor_with_parallelism = batch_put_tensor_with_parallelism
    upsert_tensor_with_parallelism_from = put_tensor_with_parallelism_from
    batch_upsert_tensor_with_parallelism_from = batch_put_tensor_with_parallelism_from

    def get_tensor_with_parallelism(self, key: str, target: Any = None) -> Any:
        return self.get_tensor(key) if self._whole("get_tensor_with_parallelism", target) else None

    def batch_get_tensor_with_parallelism(self, keys: Sequence[str], targets: Any = None) -> List[Any]:
        if not self._whole("batch_get_tensor_with_parallelism", targets):
            return [None] * len(keys)
        return self.batch_get_tensor(keys)

    def get_tensor_with_parallelism_into(self, key: str, buffer_ptr: int, size: int, target: Any = None) -> Any:
        if not self._whole("get_tensor_with_parallelism_into", target):
            return None
        return self.get_tensor_into(key, buffer_ptr, size)

    def batch_get_tensor_with_parallelism_into(
        self, keys: Sequence[str], buffer_ptrs: Sequence[int], sizes: Sequence[int], targets: Any = None
    ) -> List[Any]:
        if not self._whole("batch_get_tensor_with_parallelism_into", targets):
            return [INVALID_PARAMS] * len(keys)
        return self.batch_get_tensor_into(keys, buffer_ptrs, sizes)
