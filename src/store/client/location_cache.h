// LocationCache: where this process last found the pages of keys, from
// its homes' lookup answers, so a GET can start reading a hot key's page at
// once instead of after a control round trip. A cached location is only
// ever a guess: the GET still sends its lookup, at the same moment, and
// keeps what it read only when the answer names the very same page (same
// home and epoch, address, length, generation and checksum); otherwise it
// reads again from where the answer says, or reports the miss. So a stale
// entry costs a wasted READ, never a wrong or outdated page.
//
// Bounded: about `capacity` keys, the least recently used dropped first.
// From 1024 keys up the keys are spread by hash over 16 shards, each with
// its own lock (so threads calling at once rarely wait for each other) and
// a sixteenth of the capacity, rounded up; smaller caches are one shard,
// holding exactly `capacity`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>

#include "store/wire/messages.h"

namespace kvfabric::store {

// A page's location as a member answered it.
struct CachedLocation {
  std::string node;    // the member's control address
  uint64_t epoch = 0;  // the member's epoch when it answered (a restart changes it)
  Location where;      // found is always true
};

// Whether `cached` can be read speculatively from the member `node` of
// epoch `epoch` (the key's home now) into buffers of `room` bytes: the
// same member, not restarted since, and buffers large enough for the page.
bool CachedLocationUsable(const CachedLocation& cached, std::string_view node, uint64_t epoch, uint64_t room);

class LocationCache {
 public:
  // capacity 0: the cache keeps nothing (every Find misses).
  explicit LocationCache(size_t capacity);
  ~LocationCache();
  LocationCache(const LocationCache&) = delete;
  LocationCache& operator=(const LocationCache&) = delete;

  // The entry of `key` into `out` (and it becomes the most recently used):
  // false when there is none.
  bool Find(std::string_view key, CachedLocation* out);
  // Sets the entry of `key`, dropping the least recently used key of its
  // shard when the shard is full.
  void Put(std::string_view key, CachedLocation location);
  void Erase(std::string_view key);
  void Clear();
  size_t size() const;
  size_t capacity() const { return capacity_; }

 private:
  struct Shard;
  Shard& ShardOf(std::string_view key);

  const size_t capacity_;
  const size_t shards_;
  std::unique_ptr<Shard[]> shard_;
};

}  // namespace kvfabric::store
