// MemoryRegistry: the engine's registered buffers. Each buffer is registered
// in chunks (KVF_MR_CHUNK_BYTES) on every rail that serves its location; a
// transfer that crosses a chunk boundary is split there.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <shared_mutex>
#include <string>
#include <utility>
#include <vector>

#include "fabric/rail.h"
#include "kvfabric/status.h"

namespace kvfabric::memory {

struct Chunk {
  uintptr_t addr = 0;
  size_t length = 0;
  // Indexed by rail index; null where the chunk is not registered.
  std::vector<std::unique_ptr<fabric::MemoryRegion>> regions;
};

struct Buffer {
  uintptr_t addr = 0;
  size_t length = 0;
  std::string location;
  // Bit r set: rail r is near this memory (its NUMA node, or its GPU's
  // PCIe switch); transfers of this buffer prefer those rails.
  uint64_t near_rails = ~uint64_t{0};
  int device = -1;  // CUDA device ordinal of GPU memory, -1 for host memory
  std::vector<Chunk> chunks;

  bool Contains(uintptr_t a, size_t len) const {
    return a >= addr && len <= length && a - addr <= length - len;
  }
  // The chunk holding byte `a` (which must be inside the buffer).
  const Chunk& ChunkAt(uintptr_t a) const;
};

// "cpu", "cpu:N" or "cuda:N"; anything else is an InvalidArgument.
Status ParseLocation(const std::string& location, std::string* kind, int* index);

// Whether every page of [addr, +length) is mapped in this process. An
// integer address that is not (freed, or never allocated) must not be
// registered: a peer's WRITE there would kill the process.
bool IsMapped(const void* addr, size_t length);

// The wildcard location: "find out", as Mooncake's register_memory defaults
// to. Frameworks register CUDA tensors by raw pointer without saying so.
inline constexpr const char* kAnyLocation = "*";

// What "*" means for the memory at `addr`: "cuda:N" when `cuda` is true and
// the CUDA driver reports device memory of device N; else "cpu:N" with N the
// NUMA node of the page holding `addr` (0 when the kernel cannot say, e.g.
// the page was never touched or the host has no NUMA). Never fails.
std::string DetectLocation(const void* addr, bool cuda);

class MemoryRegistry {
 public:
  // `near_rails` maps a location ("cpu:0") to its Buffer::near_rails mask;
  // null means every rail is near.
  using NearRails = std::function<uint64_t(const std::string& location)>;
  MemoryRegistry(std::vector<fabric::Rail*> rails, size_t chunk_bytes, NearRails near_rails = nullptr)
      : rails_(std::move(rails)), chunk_bytes_(chunk_bytes), near_rails_(std::move(near_rails)) {}

  // `location` is cpu[:N], cuda:N or "*" (DetectLocation). GPU memory
  // (cuda:N) must be device memory of device N, and device memory must not
  // be registered as cpu:N. GPU memory is registered on the rails that
  // grant FI_HMEM (by dma-buf where the rail and driver allow), and on no
  // other: transfers stage it there, and peers cannot reach it through them.
  Status Register(void* addr, size_t length, const std::string& location);
  // Whether cuda:N registrations are accepted (KVF_CUDA).
  void set_cuda(bool enabled) { cuda_ = enabled; }
  // NotFound when `addr` is not the start of a registered buffer.
  Status Unregister(void* addr);

  // The buffer holding all of [addr, addr+len), or null.
  std::shared_ptr<const Buffer> Find(uintptr_t addr, size_t len) const;
  std::vector<std::shared_ptr<const Buffer>> Snapshot() const;
  // Changes on every register/unregister; peers' cached descriptors compare it.
  uint64_t version() const;

 private:
  // Whether `location` (parsed into `kind` and `index`) is what the memory
  // at [addr, +length) is: device memory of that GPU for cuda:N, never
  // device memory for cpu:N.
  Status CheckLocation(void* addr, size_t length, const std::string& location, const std::string& kind,
                       int index) const;
  // A dma-buf of the GPU allocation being registered, closed when done.
  struct Dmabuf {
    int fd = -1;
    uint64_t offset = 0;  // of the buffer's start within the dma-buf
    Dmabuf() = default;
    Dmabuf(const Dmabuf&) = delete;
    Dmabuf& operator=(const Dmabuf&) = delete;
    Dmabuf(Dmabuf&& o) noexcept : fd(std::exchange(o.fd, -1)), offset(o.offset) {}
    ~Dmabuf();
  };
  // A dma-buf for device memory [addr, +length) of `device` when a rail
  // would register it so and the driver exports one; else none (fd -1).
  Dmabuf ExportFor(void* addr, size_t length, int device) const;
  // A registered buffer sharing a byte with [a, +length), or null; mu_ held.
  std::shared_ptr<const Buffer> OverlapLocked(uintptr_t a, size_t length) const;

  std::vector<fabric::Rail*> rails_;
  size_t chunk_bytes_;
  NearRails near_rails_;
  bool cuda_ = false;
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, std::shared_ptr<const Buffer>> buffers_;  // by start address
  uint64_t version_ = 0;
};

}  // namespace kvfabric::memory
