// MemoryRegistry: the engine's registered buffers. Each buffer is registered
// in chunks (KVF_MR_CHUNK_BYTES) on the rails near its memory
// (RegistrationRails), chunks and rails registered by several threads where
// registering pins memory; a transfer that crosses a chunk
// boundary is split there.
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
  bool read_only = false;  // peers may READ it, never WRITE it (fabric::PeerAccess::kRead)
  std::vector<Chunk> chunks;

  bool Contains(uintptr_t a, size_t len) const {
    return a >= addr && len <= length && a - addr <= length - len;
  }
  // The chunk holding byte `a` (which must be inside the buffer).
  const Chunk& ChunkAt(uintptr_t a) const;
};

// One rail as registration sees it.
struct RailRole {
  bool nic = true;    // a NIC (efa, tcp, verbs); false for the shm rail, near every memory
  bool hmem = false;  // registers GPU memory in place (FI_HMEM)
  bool efa = false;   // an EFA NIC, whose page tables bound a registration (KVF_EFA_MR_CHUNK_BYTES)
};

// The rails (bit r: rail r) a buffer is registered on:
//  - GPU memory (`device`): the rails with hmem; of those, the near ones
//    (`near`, bit r: near the memory) unless `all` or none is near;
//  - host memory: every rail that is not a NIC (shm), and the NICs near
//    the memory unless `all` or no NIC is near.
// A request then runs on rail pairs where both ends hold keys; near-only
// registration pins memory once per near NIC instead of once per NIC.
// REQUIRES: roles.size() <= 64.
uint64_t RegistrationRails(const std::vector<RailRole>& roles, uint64_t near, bool device, bool all);

// The registration chunk of a buffer registered on rails `on` (bit r: rail
// r): the smallest of `chunk_bytes` (KVF_MR_CHUNK_BYTES) and, when one of
// those rails is EFA, `efa_chunk_bytes` (KVF_EFA_MR_CHUNK_BYTES), zeros
// ignored; 0 registers the buffer whole. (libfabric reports no largest
// registration: fi_domain_attr has no max_mr_size, so the EFA bound is a
// setting.)
size_t ChunkBytes(const std::vector<RailRole>& roles, uint64_t on, size_t chunk_bytes, size_t efa_chunk_bytes);

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
  // `read_only`: peers may READ the buffer, never WRITE it.
  Status Register(void* addr, size_t length, const std::string& location, bool read_only = false);
  // Whether cuda:N registrations are accepted (KVF_CUDA).
  void set_cuda(bool enabled) { cuda_ = enabled; }
  // Register on every rail, not only the near ones (KVF_REGISTER_RAILS=all);
  // register a buffer's rails at once, a thread each (KVF_REGISTER_PARALLEL).
  void set_all_rails(bool all) { all_rails_ = all; }
  void set_parallel(bool parallel) { parallel_ = parallel; }
  // KVF_EFA_MR_CHUNK_BYTES (see ChunkBytes).
  void set_efa_chunk_bytes(size_t bytes) { efa_chunk_bytes_ = bytes; }
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
  // Registers each chunk of `buf` (of `step` bytes) on the rails of the
  // mask `on`, on several threads where registering pins pages; the first
  // failure (the regions registered so far close with `buf`).
  Status RegisterChunks(Buffer* buf, uint64_t on, size_t step, const Dmabuf& dmabuf);
  // A registered buffer sharing a byte with [a, +length), or null; mu_ held.
  std::shared_ptr<const Buffer> OverlapLocked(uintptr_t a, size_t length) const;

  std::vector<fabric::Rail*> rails_;
  size_t chunk_bytes_;
  size_t efa_chunk_bytes_ = 0;
  NearRails near_rails_;
  bool cuda_ = false;
  bool all_rails_ = false;
  bool parallel_ = true;
  mutable std::shared_mutex mu_;
  std::map<uintptr_t, std::shared_ptr<const Buffer>> buffers_;  // by start address
  uint64_t version_ = 0;
};

}  // namespace kvfabric::memory
