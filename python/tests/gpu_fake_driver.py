"""Run by test_gpu.py in its own process, with KVF_CUDA_LIBRARY set to the
fake driver (tests/support/fake_cuda.c): a DLPack object on a CUDA device
registers as cuda:N and moves over tcp, byte-exact, both ways."""

import ctypes
import os

import kvfabric
from kvfabric.engine import buffer_address

lib = ctypes.CDLL(os.environ["KVF_CUDA_LIBRARY"])
lib.fake_cuda_alloc.restype = ctypes.c_void_p
lib.fake_cuda_alloc.argtypes = [ctypes.c_size_t, ctypes.c_int]


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    _fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", ctypes.c_void_p)]


class FakeCudaTensor:
    """uint8 device memory of the fake driver, offered through DLPack."""

    def __init__(self, nbytes, device):
        self.ptr = lib.fake_cuda_alloc(nbytes, device)
        self.nbytes, self.device = nbytes, device
        self._shape = (ctypes.c_int64 * 1)(nbytes)
        self._mt = DLManagedTensor()
        t = self._mt.dl_tensor
        t.data, t.device, t.ndim = self.ptr, DLDevice(2, device), 1
        t.dtype, t.shape = DLDataType(1, 8, 1), self._shape

    def __dlpack_device__(self):
        return (2, self.device)

    def __dlpack__(self, stream=None):
        new = ctypes.pythonapi.PyCapsule_New
        new.restype, new.argtypes = ctypes.py_object, [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        return new(ctypes.addressof(self._mt), b"dltensor", None)


def view(t):
    return (ctypes.c_uint8 * t.nbytes).from_address(t.ptr)  # fake device memory is host-addressable


n = 8 << 20
gpu = FakeCudaTensor(n, 1)
assert buffer_address(gpu)[2] == "cuda:1"
host = bytearray(n)
with kvfabric.Engine(protocol="tcp") as a, kvfabric.Engine(protocol="tcp") as b:
    a.register(gpu)  # location from the DLPack device
    b.register(host)
    seg = a.open(b.name)
    pattern = bytes((i * 7 + 3) % 251 for i in range(n))
    ctypes.memmove(gpu.ptr, pattern, n)
    a.write(seg, gpu, buffer_address(host)[0])  # GPU -> peer host, through staging
    assert bytes(host) == pattern
    host[:] = bytes(reversed(pattern))
    a.read(seg, gpu, buffer_address(host)[0])  # peer host -> GPU
    assert bytes(view(gpu)) == bytes(reversed(pattern))
    a.unregister(gpu)
print("ok")
