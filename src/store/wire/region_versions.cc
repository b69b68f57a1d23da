#include "store/wire/region_versions.h"

#include <algorithm>
#include <atomic>

namespace kvfabric::store {

uint64_t RegionVersions::RegionBytes(uint64_t pool_bytes, uint64_t alignment) {
  const uint64_t per = (pool_bytes + kRegions - 1) / kRegions;
  return std::max<uint64_t>(alignment, (per + alignment - 1) & ~(alignment - 1));
}

size_t RegionVersions::RegionOf(uint64_t offset) const {
  return static_cast<size_t>(std::min<uint64_t>(offset / region_bytes_, kRegions - 1));
}

uint64_t RegionVersions::VersionAt(uint64_t offset) const {
  return std::atomic_ref<uint64_t>(words_[RegionOf(offset)]).load(std::memory_order_relaxed);
}

void RegionVersions::Bump(uint64_t offset) {
  std::atomic_ref<uint64_t> word(words_[RegionOf(offset)]);
  // Release: the bump is visible no later than the slot's reuse that follows it.
  word.store(word.load(std::memory_order_relaxed) + 1, std::memory_order_release);
}

void RegionVersions::BumpAll() {
  for (size_t r = 0; r < kRegions; ++r) {
    std::atomic_ref<uint64_t> word(words_[r]);
    word.store(word.load(std::memory_order_relaxed) + 1, std::memory_order_release);
  }
}

}  // namespace kvfabric::store
