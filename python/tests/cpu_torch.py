"""A stand-in for the few torch calls vLLM's encoder-cache store makes on CPU
tensors, over numpy arrays: real host memory at real addresses, so the store
moves their bytes as it would a torch tensor's.

torch is not installed here (its PyPI wheels need CUDA's libraries), and
the code under test (vllm_interface.py) calls only this much of it, on
CPU tensors (vLLM moves GPU encoder outputs in production; that path, GPU
pointers, pinned buffers and events, is not stood in for):
``empty``, ``from_numpy``, ``device``, the dtypes by name, and a tensor's
``data_ptr``, ``nbytes``, ``numel``, ``element_size``, ``shape``, ``ndim``,
``dtype`` (printed as ``torch.float16``), ``device.type``,
``is_contiguous``, ``view`` (as a dtype or a shape), slicing, ``copy_`` and
``untyped_storage``. Anything else is an AttributeError, so a vLLM release
that calls more fails loudly here instead of passing by accident.
"""

import types

import numpy as np


class dtype:
    def __init__(self, name: str, np_dtype):
        self.name = name
        self.np = np.dtype(np_dtype)
        self.itemsize = self.np.itemsize

    def __repr__(self) -> str:
        return f"torch.{self.name}"

    __str__ = __repr__


uint8 = dtype("uint8", np.uint8)
int64 = dtype("int64", np.int64)
float16 = dtype("float16", np.float16)
float32 = dtype("float32", np.float32)
bfloat16 = dtype("bfloat16", np.uint16)  # numpy has none: two bytes each, which is all a store sees
_BY_NUMPY = {d.np: d for d in (uint8, int64, float16, float32)}


class device:
    def __init__(self, spec="cpu"):
        self.type = spec.type if isinstance(spec, device) else str(spec).split(":")[0]
        if self.type != "cpu":
            raise RuntimeError(f"cpu_torch stands in for CPU tensors only, not {spec!r}")

    def __repr__(self) -> str:
        return f"device(type='{self.type}')"


class UntypedStorage:
    def __init__(self, base: np.ndarray):
        self._base = base

    def data_ptr(self) -> int:
        return self._base.ctypes.data

    def nbytes(self) -> int:
        return self._base.nbytes


class Tensor:
    def __init__(self, array: np.ndarray, dt: dtype):
        self._a = array
        self.dtype = dt
        self.device = device("cpu")

    @property
    def shape(self) -> tuple:
        return tuple(self._a.shape)

    @property
    def ndim(self) -> int:
        return self._a.ndim

    @property
    def nbytes(self) -> int:
        return self._a.nbytes

    def numel(self) -> int:
        return self._a.size

    def element_size(self) -> int:
        return self.dtype.itemsize

    def data_ptr(self) -> int:
        return self._a.ctypes.data

    def is_contiguous(self) -> bool:
        return self._a.flags.c_contiguous

    def view(self, *args):
        if len(args) == 1 and isinstance(args[0], dtype):
            return Tensor(self._a.view(args[0].np), args[0])
        shape = args[0] if len(args) == 1 and isinstance(args[0], tuple) else args
        out = self._a.view()
        out.shape = shape  # a view or an error, never a silent copy
        return Tensor(out, self.dtype)

    def __getitem__(self, index):
        return Tensor(self._a[index], self.dtype)

    def copy_(self, src: "Tensor", non_blocking: bool = False) -> "Tensor":
        # torch would convert values and broadcast; only the byte-for-byte
        # case vLLM uses is stood in for, anything else is an error.
        if src.dtype is not self.dtype or src.numel() != self.numel():
            raise NotImplementedError(
                f"cpu_torch: copy_ of {src.dtype} x {src.numel()} into "
                f"{self.dtype} x {self.numel()} (same dtype and count only)"
            )
        np.copyto(self._a, src._a.reshape(self._a.shape))
        return self

    def untyped_storage(self) -> UntypedStorage:
        base = self._a
        while base.base is not None and isinstance(base.base, np.ndarray):
            base = base.base
        return UntypedStorage(base)

    def numpy(self) -> np.ndarray:
        return self._a


def empty(*size, dtype=float32, device="cpu", pin_memory=False) -> Tensor:
    globals()["device"](device)  # only the CPU
    shape = size[0] if len(size) == 1 and isinstance(size[0], (tuple, list)) else size
    return Tensor(np.empty(tuple(shape), dtype=dtype.np), dtype)


def from_numpy(array: np.ndarray) -> Tensor:
    return Tensor(array, _BY_NUMPY[array.dtype])


def module() -> types.ModuleType:
    """This stand-in as a module named torch."""
    m = types.ModuleType("torch")
    for name in (
        "dtype",
        "uint8",
        "int64",
        "float16",
        "float32",
        "bfloat16",
        "device",
        "UntypedStorage",
        "Tensor",
        "empty",
        "from_numpy",
    ):
        setattr(m, name, globals()[name])
    m.Event = type("Event", (), {})  # named in annotations; only CUDA tensors create one
    return m
