// PoolAllocator: where pages of mixed sizes go in a node's pool of
// registered memory. It hands out offsets only; the memory, the pages and
// their eviction belong to the store. Best fit over free extents that merge
// with their neighbours when freed, so a pool serving mixed sizes keeps its
// free space in large pieces (PoolAllocatorTest measures how full it gets).
#pragma once

#include <cstdint>
#include <map>
#include <optional>

namespace kvfabric::store {

class PoolAllocator {
 public:
  // A pool of `pool_bytes`; every extent starts at a multiple of `alignment`
  // (a power of two) and spans a multiple of it.
  explicit PoolAllocator(uint64_t pool_bytes, uint64_t alignment = 4096);

  // The offset of a free extent of at least `bytes` (> 0): the smallest one
  // that fits, its lowest part. Nothing when no free extent is that large
  // (the store evicts, then asks again).
  std::optional<uint64_t> Allocate(uint64_t bytes);
  // Returns the extent at `offset` (from Allocate, not yet freed; anything
  // else is ignored and returns false), merged with free neighbours.
  bool Free(uint64_t offset);
  // Takes the extent of `bytes` at `offset` (a multiple of the alignment)
  // when all of it is free, as if Allocate had returned it: true. False,
  // changing nothing, otherwise. Undoes a Free (the store takes back slots
  // it freed to see whether evicting makes room, when it does not).
  bool Claim(uint64_t offset, uint64_t bytes);
  // The bytes an allocation of `bytes` takes: rounded up to the alignment.
  uint64_t ExtentBytes(uint64_t bytes) const;

  uint64_t pool_bytes() const { return pool_bytes_; }
  uint64_t free_bytes() const { return free_bytes_; }
  uint64_t largest_free() const { return by_size_.empty() ? 0 : by_size_.rbegin()->first; }
  size_t allocations() const { return allocated_.size(); }
  size_t free_extents() const { return by_offset_.size(); }

 private:
  void AddFree(uint64_t offset, uint64_t bytes);
  void RemoveFree(std::map<uint64_t, uint64_t>::iterator it);

  const uint64_t pool_bytes_;
  const uint64_t alignment_;
  uint64_t free_bytes_ = 0;
  std::map<uint64_t, uint64_t> by_offset_;     // free: offset -> bytes
  std::multimap<uint64_t, uint64_t> by_size_;  // free: bytes -> offset
  std::map<uint64_t, uint64_t> allocated_;     // offset -> bytes
};

}  // namespace kvfabric::store
