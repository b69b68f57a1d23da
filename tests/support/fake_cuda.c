/* A stand-in for libcuda.so.1, for tests on hosts without a GPU
 * (KVF_CUDA_LIBRARY=<this library>). "Device memory" is host memory handed
 * out by fake_cuda_alloc and remembered with its device ordinal, so the
 * engine's CUDA paths (pointer detection, location checks, device copies
 * under a device's context) run for real; what it cannot show is the speed
 * or the DMA of a real GPU, which the hardware runbook (tests/hw/) measures.
 * FAKE_CUDA_DEVICES (default 2) sets the device count; FAKE_CUDA_DMABUF=0
 * makes the devices say they cannot export dma-bufs. An exported dma-buf is
 * a memfd whose allocation fake_cuda_dmabuf_range names, so a test can check
 * what a registration was handed. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

typedef int CUresult;
typedef unsigned long long CUdeviceptr;

enum { kMaxRanges = 1024, kInvalidValue = 1, kInvalidContext = 201 };

static struct {
  uintptr_t addr;
  size_t length;
  int device;
} ranges[kMaxRanges];
static int nranges;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static __thread void* current;
static unsigned long copies;
static unsigned long stream_syncs;
static struct {
  int fd;
  uintptr_t addr;
  size_t length;
} exports[kMaxRanges];
static int nexports;

void* fake_cuda_alloc(size_t n, int device) {
  void* p = NULL;
  if (posix_memalign(&p, 4096, n) != 0) return NULL;
  pthread_mutex_lock(&mu);
  if (nranges == kMaxRanges) {
    pthread_mutex_unlock(&mu);
    free(p);
    return NULL;
  }
  ranges[nranges].addr = (uintptr_t)p;
  ranges[nranges].length = n;
  ranges[nranges].device = device;
  ++nranges;
  pthread_mutex_unlock(&mu);
  return p;
}

void fake_cuda_free(void* p) {
  pthread_mutex_lock(&mu);
  for (int i = 0; i < nranges; ++i)
    if (ranges[i].addr == (uintptr_t)p) {
      ranges[i] = ranges[--nranges];
      break;
    }
  pthread_mutex_unlock(&mu);
  free(p);
}

/* cuStreamSynchronize calls so far: proves a stream was waited for. */
unsigned long fake_cuda_stream_syncs(void) { return __atomic_load_n(&stream_syncs, __ATOMIC_RELAXED); }

/* cuMemcpy calls so far: proves a copy went through the driver. */
unsigned long fake_cuda_copies(void) { return __atomic_load_n(&copies, __ATOMIC_RELAXED); }

/* The allocation holding p: its index in ranges, or -1. mu held. */
static int range_of(CUdeviceptr p) {
  for (int i = 0; i < nranges; ++i)
    if (p >= ranges[i].addr && p - ranges[i].addr < ranges[i].length) return i;
  return -1;
}

/* The allocation a dma-buf fd from cuMemGetHandleForAddressRange exports
 * (0 when fd is not one, or was closed and reused). */
int fake_cuda_dmabuf_range(int fd, uintptr_t* addr, size_t* length) {
  int found = 0;
  pthread_mutex_lock(&mu);
  for (int i = nexports - 1; i >= 0 && !found; --i)
    if (exports[i].fd == fd) {
      *addr = exports[i].addr;
      *length = exports[i].length;
      found = 1;
    }
  pthread_mutex_unlock(&mu);
  return found;
}

/* dma-bufs exported so far. */
unsigned long fake_cuda_dmabuf_exports(void) {
  pthread_mutex_lock(&mu);
  const unsigned long n = (unsigned long)nexports;
  pthread_mutex_unlock(&mu);
  return n;
}

static int device_count(void) {
  const char* s = getenv("FAKE_CUDA_DEVICES");
  return s ? atoi(s) : 2;
}

CUresult cuInit(unsigned flags) {
  (void)flags;
  return 0;
}

CUresult cuDeviceGetCount(int* n) {
  *n = device_count();
  return 0;
}

CUresult cuDeviceGet(int* dev, int ordinal) {
  if (ordinal < 0 || ordinal >= device_count()) return kInvalidValue;
  *dev = ordinal;
  return 0;
}

CUresult cuPointerGetAttribute(void* data, int attribute, CUdeviceptr p) {
  pthread_mutex_lock(&mu);
  const int i = range_of(p);
  CUresult r = 0;
  if (i < 0) r = kInvalidValue; /* what the driver says for unknown host memory */
  else if (attribute == 2) *(unsigned*)data = 2; /* CU_MEMORYTYPE_DEVICE */
  else if (attribute == 9) *(int*)data = ranges[i].device;
  else if (attribute == 11) *(CUdeviceptr*)data = ranges[i].addr; /* RANGE_START_ADDR */
  else if (attribute == 12) *(size_t*)data = ranges[i].length;    /* RANGE_SIZE */
  else r = kInvalidValue;
  pthread_mutex_unlock(&mu);
  return r;
}

CUresult cuDeviceGetAttribute(int* value, int attribute, int dev) {
  if (dev < 0 || dev >= device_count()) return kInvalidValue;
  if (attribute != 124) return kInvalidValue; /* only CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED */
  const char* s = getenv("FAKE_CUDA_DMABUF");
  *value = s ? atoi(s) : 1;
  return 0;
}

/* Exports exactly one whole allocation (the real driver accepts any
 * page-aligned range; kvfabric asks for whole allocations). */
CUresult cuMemGetHandleForAddressRange(void* handle, CUdeviceptr p, size_t size, int type, unsigned long long flags) {
  if (type != 1 || flags != 0) return kInvalidValue; /* CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD */
  pthread_mutex_lock(&mu);
  const int i = range_of(p);
  const int whole = i >= 0 && ranges[i].addr == p && ranges[i].length == size;
  int fd = -1;
  if (whole && nexports < kMaxRanges) fd = memfd_create("fake-cuda-dmabuf", MFD_CLOEXEC);
  if (fd >= 0) {
    exports[nexports].fd = fd;
    exports[nexports].addr = p;
    exports[nexports].length = size;
    ++nexports;
  }
  pthread_mutex_unlock(&mu);
  if (fd < 0) return kInvalidValue;
  *(int*)handle = fd;
  return 0;
}

CUresult cuDevicePrimaryCtxRetain(void** ctx, int dev) {
  *ctx = (void*)(uintptr_t)(dev + 1);
  return 0;
}

CUresult cuCtxSetCurrent(void* ctx) {
  current = ctx;
  return 0;
}

CUresult cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  if (current == NULL) return kInvalidContext;
  memmove((void*)(uintptr_t)dst, (const void*)(uintptr_t)src, n);
  __atomic_add_fetch(&copies, 1, __ATOMIC_RELAXED);
  return 0;
}

CUresult cuStreamSynchronize(void* stream) {
  (void)stream;
  if (current == NULL) return kInvalidContext;
  __atomic_add_fetch(&stream_syncs, 1, __ATOMIC_RELAXED);
  return 0;
}

CUresult cuMemAlloc_v2(CUdeviceptr* p, size_t n) {
  if (current == NULL) return kInvalidContext;
  void* m = fake_cuda_alloc(n, (int)((uintptr_t)current - 1));
  if (m == NULL) return 2; /* CUDA_ERROR_OUT_OF_MEMORY */
  *p = (CUdeviceptr)(uintptr_t)m;
  return 0;
}

CUresult cuMemFree_v2(CUdeviceptr p) {
  fake_cuda_free((void*)(uintptr_t)p);
  return 0;
}

CUresult cuMemHostRegister_v2(void* p, size_t n, unsigned flags) {
  (void)p, (void)n, (void)flags;
  return 0;
}

CUresult cuMemHostUnregister(void* p) {
  (void)p;
  return 0;
}

CUresult cuDeviceGetPCIBusId(char* buf, int len, int dev) {
  snprintf(buf, (size_t)len, "0000:%02X:00.0", 0x1A + dev);
  return 0;
}

CUresult cuGetErrorString(CUresult r, const char** s) {
  *s = r == kInvalidContext ? "invalid device context (fake)" : "invalid argument (fake)";
  return 0;
}
