// RegionVersions: a version number for each region of a node's pool, kept
// in memory the node registers so that clients READ them one-sided. The
// node bumps a region's version whenever a page there leaves its key
// (evicted, removed, overwritten), before its slot can be written again.
// A lookup answers each page's location with its region's version; a
// client that remembers the location and later READs the same version
// knows the page is still the key's latest, with no message to the node
// (a version only grows, so an equal one means nothing left that region in
// between). A page is in the region of its first byte.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfabric::store {

class RegionVersions {
 public:
  // Regions per pool: their versions are 2 KiB, one small READ.
  static constexpr size_t kRegions = 256;
  static constexpr size_t kBytes = kRegions * sizeof(uint64_t);

  // The region size of a pool of `pool_bytes`: pool_bytes / kRegions rounded
  // up to `alignment` (a power of two), at least `alignment`.
  static uint64_t RegionBytes(uint64_t pool_bytes, uint64_t alignment);

  // Over `words`: kRegions 64-bit words, zeroed, aligned to 8, owned by the
  // caller and outliving this object. REQUIRES: region_bytes > 0.
  RegionVersions(uint64_t* words, uint64_t region_bytes) : words_(words), region_bytes_(region_bytes) {}

  // The region of the pool offset `offset` (the last region holds all
  // offsets beyond the others).
  size_t RegionOf(uint64_t offset) const;
  uint64_t VersionAt(uint64_t offset) const;
  // Bumps the version of the region of `offset`. The store is atomic (a
  // peer's READ sees the old or the new value of each word, never a mix).
  void Bump(uint64_t offset);
  // Bumps every region's version.
  void BumpAll();

  uint64_t region_bytes() const { return region_bytes_; }

 private:
  uint64_t* const words_;
  const uint64_t region_bytes_;
};

}  // namespace kvfabric::store
