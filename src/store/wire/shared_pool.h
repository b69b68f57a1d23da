// SharedPool: a node's pool and its region versions in one sealed memfd, so
// that processes on the same host (same kernel, same pid namespace) can map
// them and copy pages directly, instead of through the fabric's same-host
// provider (shm: a process_vm_readv per READ, under the target region's
// spinlock). The node creates it (Create); a client maps it (PoolMaps).
//
// Layout of the file: the pool's bytes [0, pool_bytes), then, from the
// next 4 KiB boundary (VersionsOffset), the region versions' page of
// kVersionsBytes, then (KeysOffset) the node's SharedKeys table of
// keys_bytes, if any (a file that ends with the versions has none). The
// file is sealed against shrinking and growing, so a mapping of it never
// faults past its end (no SIGBUS), whatever its node does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "kvfabric/status.h"
#include "store/wire/messages.h"

namespace kvfabric::store {

class SharedPool {
 public:
  // The region versions' page (the versions, then the node's epoch).
  static constexpr uint64_t kVersionsBytes = 4096;

  // Creates and maps (shared, read-write) a sealed memfd laid out as above.
  // *share says how a same-host process finds it.
  static Status Create(size_t pool_bytes, size_t keys_bytes, SharedPool* out, PoolShare* share);
  SharedPool() = default;
  SharedPool(const SharedPool&) = delete;
  SharedPool& operator=(const SharedPool&) = delete;
  SharedPool(SharedPool&& other) noexcept;
  SharedPool& operator=(SharedPool&& other) noexcept;
  ~SharedPool();  // closes the file; the mappings stay until their owner unmaps them

  // Where the versions' page starts in the file of a pool of pool_bytes.
  static constexpr uint64_t VersionsOffset(uint64_t pool_bytes) { return (pool_bytes + 4095) / 4096 * 4096; }
  // Where the keys' table starts.
  static constexpr uint64_t KeysOffset(uint64_t pool_bytes) { return VersionsOffset(pool_bytes) + kVersionsBytes; }

  uint8_t* pool() const { return base_; }
  uint8_t* versions() const { return base_ == nullptr ? nullptr : base_ + VersionsOffset(pool_bytes_); }
  uint8_t* keys() const { return base_ == nullptr ? nullptr : base_ + KeysOffset(pool_bytes_); }
  // Hands the mapping to the caller, who unmaps each part (pool, versions,
  // keys) itself.
  void Release() { base_ = nullptr; }

 private:
  int fd_ = -1;
  uint8_t* base_ = nullptr;
  size_t pool_bytes_ = 0;
};

// What identifies this process's host for a SharedPool: the kernel's boot
// id, the pid namespace (two processes with the same key can open each
// other's /proc/<pid>/fd/<fd>) and the network namespace: processes that
// the network tells apart (tests/lab's emulated hosts, containers) are not
// taken for one host, so they meet through the fabric.
const std::string& SharedPoolHostKey();

}  // namespace kvfabric::store
