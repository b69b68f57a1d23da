// CUDA through the driver API, loaded at run time: libcuda.so.1 is opened
// with dlopen on first use (KVF_CUDA_LIBRARY names another file), so one
// build serves hosts with and without GPUs and needs no CUDA toolkit. Without
// the library, or without a device, every call says why in its Status.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric::memory::cuda {

// Loads the driver library and calls cuInit once. `library` (empty: the
// default libcuda.so.1) is honoured only by the first call in the process.
// OK when at least one device is usable; else the reason, for example
// "libcuda.so.1 not found (no NVIDIA driver on this host)".
Status Load(const std::string& library = "");

// Devices the driver reports (0 when Load failed).
int DeviceCount();

// Whether `p` is device memory the driver knows, and its device ordinal.
// False (not an error) for host memory or when CUDA is not loaded.
bool IsDevicePointer(const void* p, int* device);

// Whether `device` can export its memory as dma-buf file descriptors (the
// driver has cuMemGetHandleForAddressRange and says the device supports it).
bool DmabufSupported(int device);

// A dma-buf file descriptor exporting the device allocation that holds
// [p, +n), and the offset of `p` within it. The caller closes `*fd` (a
// registration that used it keeps its own reference). InvalidArgument when
// the range is not inside one device allocation.
Status ExportDmabuf(const void* p, size_t n, int* fd, uint64_t* offset);

// The device's PCI bus id as sysfs writes it ("0000:4f:00.0").
Status PciBusId(int device, std::string* out);
// Every device's PCI bus id, in the driver's ordinal order (what
// topology::Topology::SetCudaOrdinals takes); empty when CUDA is not loaded.
std::vector<std::string> PciBusIds();

// Copies between host and device memory, or device and device (unified
// addressing: the driver works out which is which), under the device's
// primary context. Synchronous.
Status Copy(void* dst, const void* src, size_t n, int device);

// Waits until the work queued on `stream` (a CUstream handle as an integer;
// 0 is the legacy default stream) has finished, under `device`'s primary
// context (the one frameworks' streams belong to).
Status StreamSynchronize(uintptr_t stream, int device);

// Page-locks host memory for fast device copies (cuMemHostRegister).
Status PinHost(void* p, size_t n);
void UnpinHost(void* p);

// Device memory (cuMemAlloc) on `device`, for tools and tests.
Status Alloc(int device, size_t n, void** out);
void Free(void* p);

}  // namespace kvfabric::memory::cuda
