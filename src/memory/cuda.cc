#include "memory/cuda.h"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "common/log.h"
#include "common/text.h"

namespace kvfabric::memory::cuda {
namespace {

// The few driver API types and constants used here (cuda.h is not needed).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;
constexpr int kPointerMemoryType = 2;     // CU_POINTER_ATTRIBUTE_MEMORY_TYPE
constexpr int kPointerDeviceOrdinal = 9;  // CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL
constexpr unsigned kMemoryTypeDevice = 2; // CU_MEMORYTYPE_DEVICE
constexpr int kPointerRangeStart = 11;    // CU_POINTER_ATTRIBUTE_RANGE_START_ADDR
constexpr int kPointerRangeSize = 12;     // CU_POINTER_ATTRIBUTE_RANGE_SIZE
constexpr int kDeviceDmabufSupported = 124;  // CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
constexpr int kRangeHandleDmabufFd = 1;      // CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD

struct Driver {
  void* lib = nullptr;
  CUresult (*cuInit)(unsigned) = nullptr;
  CUresult (*cuDeviceGetCount)(int*) = nullptr;
  CUresult (*cuDeviceGet)(CUdevice*, int) = nullptr;
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr) = nullptr;
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*cuCtxSetCurrent)(CUcontext) = nullptr;
  CUresult (*cuMemcpy)(CUdeviceptr, CUdeviceptr, size_t) = nullptr;
  CUresult (*cuDeviceGetPCIBusId)(char*, int, CUdevice) = nullptr;
  CUresult (*cuGetErrorString)(CUresult, const char**) = nullptr;
  CUresult (*cuMemAlloc_v2)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*cuMemFree_v2)(CUdeviceptr) = nullptr;
  CUresult (*cuMemHostRegister_v2)(void*, size_t, unsigned) = nullptr;
  CUresult (*cuMemHostUnregister)(void*) = nullptr;
  CUresult (*cuStreamSynchronize)(void*) = nullptr;
  // Optional (CUDA 11.7+ drivers): null where the driver lacks them.
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice) = nullptr;
  CUresult (*cuMemGetHandleForAddressRange)(void*, CUdeviceptr, size_t, int, unsigned long long) = nullptr;

  Status status = Status::Unavailable("CUDA not loaded");
  int count = 0;
  std::mutex ctx_mu;
  std::vector<CUcontext> contexts;  // primary context per device, retained on first use

  std::string Error(CUresult r) {
    const char* s = nullptr;
    if (cuGetErrorString != nullptr && cuGetErrorString(r, &s) == 0 && s != nullptr) return s;
    return text::Format("CUDA error {}", static_cast<int>(r));
  }
};

Driver& D() {
  static Driver d;
  return d;
}

template <typename F>
bool Bind(void* lib, const char* name, F* out) {
  *out = reinterpret_cast<F>(dlsym(lib, name));
  return *out != nullptr;
}

Status LoadOnce(const std::string& library) {
  Driver& d = D();
  const std::string path = library.empty() ? "libcuda.so.1" : library;
  d.lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (d.lib == nullptr)
    return Status::Unavailable(path + " not found (no NVIDIA driver on this host): " + dlerror());
  const char* missing = nullptr;
#define KVF_BIND(name) \
  if (missing == nullptr && !Bind(d.lib, #name, &d.name)) missing = #name;
  KVF_BIND(cuInit)
  KVF_BIND(cuDeviceGetCount)
  KVF_BIND(cuDeviceGet)
  KVF_BIND(cuPointerGetAttribute)
  KVF_BIND(cuDevicePrimaryCtxRetain)
  KVF_BIND(cuCtxSetCurrent)
  KVF_BIND(cuMemcpy)
  KVF_BIND(cuDeviceGetPCIBusId)
  KVF_BIND(cuGetErrorString)
  KVF_BIND(cuMemAlloc_v2)
  KVF_BIND(cuMemFree_v2)
  KVF_BIND(cuMemHostRegister_v2)
  KVF_BIND(cuMemHostUnregister)
  KVF_BIND(cuStreamSynchronize)
#undef KVF_BIND
  Bind(d.lib, "cuDeviceGetAttribute", &d.cuDeviceGetAttribute);
  Bind(d.lib, "cuMemGetHandleForAddressRange", &d.cuMemGetHandleForAddressRange);
  if (missing != nullptr)
    return Status::Unavailable(path + " lacks " + missing + ": the NVIDIA driver is too old or not the CUDA driver");
  CUresult r = d.cuInit(0);
  if (r != 0) return Status::Unavailable("cuInit failed: " + d.Error(r) + " (is the GPU visible to this process?)");
  r = d.cuDeviceGetCount(&d.count);
  if (r != 0) return Status::Unavailable("cuDeviceGetCount failed: " + d.Error(r));
  if (d.count <= 0) return Status::Unavailable("the CUDA driver reports no device");
  d.contexts.assign(static_cast<size_t>(d.count), nullptr);
  KVF_LOG_INFO("CUDA driver loaded from {}: {} device(s)", path, d.count);
  return Status::OK();
}

// Makes `device`'s primary context current on this thread.
Status UseDevice(int device) {
  Driver& d = D();
  KVF_RETURN_IF_ERROR(d.status);
  if (device < 0 || device >= d.count)
    return Status::InvalidArgument(text::Format("cuda:{}: this host has {} CUDA device(s)", device, d.count));
  CUcontext ctx;
  {
    std::lock_guard<std::mutex> g(d.ctx_mu);
    if (d.contexts[device] == nullptr) {
      CUdevice dev;
      CUresult r = d.cuDeviceGet(&dev, device);
      if (r == 0) r = d.cuDevicePrimaryCtxRetain(&d.contexts[device], dev);
      if (r != 0) return Status::Unavailable(text::Format("cuda:{}: primary context: {}", device, d.Error(r)));
    }
    ctx = d.contexts[device];
  }
  CUresult r = d.cuCtxSetCurrent(ctx);
  return r == 0 ? Status::OK() : Status::Unavailable("cuCtxSetCurrent: " + d.Error(r));
}

}  // namespace

Status Load(const std::string& library) {
  static std::once_flag once;
  std::call_once(once, [&] { D().status = LoadOnce(library); });
  return D().status;
}

int DeviceCount() { return Load().ok() ? D().count : 0; }

bool IsDevicePointer(const void* p, int* device) {
  if (!Load().ok() || p == nullptr) return false;
  Driver& d = D();
  unsigned type = 0;
  if (d.cuPointerGetAttribute(&type, kPointerMemoryType, reinterpret_cast<CUdeviceptr>(p)) != 0 ||
      type != kMemoryTypeDevice)
    return false;
  int ordinal = -1;
  if (d.cuPointerGetAttribute(&ordinal, kPointerDeviceOrdinal, reinterpret_cast<CUdeviceptr>(p)) != 0) return false;
  *device = ordinal;
  return true;
}

bool DmabufSupported(int device) {
  if (!Load().ok()) return false;
  Driver& d = D();
  if (d.cuDeviceGetAttribute == nullptr || d.cuMemGetHandleForAddressRange == nullptr) return false;
  CUdevice dev;
  int supported = 0;
  return d.cuDeviceGet(&dev, device) == 0 && d.cuDeviceGetAttribute(&supported, kDeviceDmabufSupported, dev) == 0 &&
         supported != 0;
}

Status ExportDmabuf(const void* p, size_t n, int* fd, uint64_t* offset) {
  KVF_RETURN_IF_ERROR(Load());
  Driver& d = D();
  const std::string what = text::Format("dma-buf of {}", text::Range(reinterpret_cast<uintptr_t>(p), n));
  if (d.cuMemGetHandleForAddressRange == nullptr)
    return Status::Unavailable(what + ": the driver has no cuMemGetHandleForAddressRange (CUDA 11.7 or later)");
  // The whole allocation is exported: the range must be page-aligned, and
  // an allocation's start and size are.
  CUdeviceptr start = 0;
  size_t size = 0;
  const auto ptr = reinterpret_cast<CUdeviceptr>(p);
  CUresult r = d.cuPointerGetAttribute(&start, kPointerRangeStart, ptr);
  if (r == 0) r = d.cuPointerGetAttribute(&size, kPointerRangeSize, ptr);
  if (r != 0) return Status::InvalidArgument(what + ": not device memory the driver knows: " + d.Error(r));
  if (ptr < start || n > size || ptr - start > size - n)
    return Status::InvalidArgument(what + ": crosses the end of its allocation");
  int handle = -1;
  r = d.cuMemGetHandleForAddressRange(&handle, start, size, kRangeHandleDmabufFd, 0);
  if (r != 0 || handle < 0) return Status::Unavailable(what + ": cuMemGetHandleForAddressRange: " + d.Error(r));
  *fd = handle;
  *offset = ptr - start;
  return Status::OK();
}

Status PciBusId(int device, std::string* out) {
  // No context needed (and none created: a primary context costs hundreds
  // of MiB of GPU memory on each device it is made for).
  KVF_RETURN_IF_ERROR(Load());
  Driver& d = D();
  CUdevice dev;
  char buf[32] = {0};
  CUresult r = d.cuDeviceGet(&dev, device);
  if (r == 0) r = d.cuDeviceGetPCIBusId(buf, sizeof(buf), dev);
  if (r != 0) return Status::Unavailable("cuDeviceGetPCIBusId: " + d.Error(r));
  std::string id = buf;  // "0000:4F:00.0": sysfs writes hex in lower case
  for (char& c : id) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  *out = id;
  return Status::OK();
}

Status Copy(void* dst, const void* src, size_t n, int device) {
  KVF_RETURN_IF_ERROR(UseDevice(device));
  Driver& d = D();
  CUresult r = d.cuMemcpy(reinterpret_cast<CUdeviceptr>(dst), reinterpret_cast<CUdeviceptr>(src), n);
  return r == 0 ? Status::OK()
                : Status::FabricError(text::Format("cuMemcpy of {} bytes on cuda:{} failed: {}", n, device, d.Error(r)));
}

std::vector<std::string> PciBusIds() {
  std::vector<std::string> out;
  for (int d = 0; d < DeviceCount(); ++d) {
    std::string id;
    if (PciBusId(d, &id).ok()) out.push_back(id);
  }
  return out;
}

Status StreamSynchronize(uintptr_t stream, int device) {
  KVF_RETURN_IF_ERROR(UseDevice(device));
  Driver& d = D();
  CUresult r = d.cuStreamSynchronize(reinterpret_cast<void*>(stream));
  return r == 0 ? Status::OK()
                : Status::FabricError(
                      text::Format("cuStreamSynchronize({}) on cuda:{} failed: {}", stream, device, d.Error(r)));
}

Status PinHost(void* p, size_t n) {
  KVF_RETURN_IF_ERROR(UseDevice(0));
  // CU_MEMHOSTREGISTER_PORTABLE: pinned for every context.
  CUresult r = D().cuMemHostRegister_v2(p, n, 1);
  return r == 0 ? Status::OK()
                : Status::Unavailable(text::Format("cuMemHostRegister of {} bytes: {}", n, D().Error(r)));
}

void UnpinHost(void* p) {
  if (p != nullptr && Load().ok()) D().cuMemHostUnregister(p);
}

Status Alloc(int device, size_t n, void** out) {
  KVF_RETURN_IF_ERROR(UseDevice(device));
  CUdeviceptr p = 0;
  CUresult r = D().cuMemAlloc_v2(&p, n);
  if (r != 0)
    return Status::Unavailable(text::Format("cuMemAlloc of {} bytes on cuda:{} failed: {}", n, device, D().Error(r)));
  *out = reinterpret_cast<void*>(p);
  return Status::OK();
}

void Free(void* p) {
  if (p != nullptr && Load().ok()) D().cuMemFree_v2(reinterpret_cast<CUdeviceptr>(p));
}

}  // namespace kvfabric::memory::cuda
