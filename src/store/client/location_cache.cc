#include "store/client/location_cache.h"

#include <functional>

namespace kvfabric::store {
namespace {

// Small caches keep one shard, so their bound is exact.
constexpr size_t kShards = 16;
constexpr size_t kShardedFrom = 1024;

}  // namespace

bool CachedLocationUsable(const CachedLocation& cached, std::string_view node, uint64_t epoch, uint64_t room) {
  return cached.where.found && cached.node == node && cached.epoch == epoch && cached.where.length <= room;
}

struct LocationCache::Shard {
  std::mutex mu;
  size_t capacity = 0;
  // Most recently used first. The index's keys view the keys held here
  // (a list's elements never move).
  std::list<std::pair<std::string, CachedLocation>> order;
  std::unordered_map<std::string_view, decltype(order)::iterator> index;
};

LocationCache::LocationCache(size_t capacity)
    : capacity_(capacity),
      shards_(capacity >= kShardedFrom ? kShards : 1),
      shard_(std::make_unique<Shard[]>(shards_)) {
  for (size_t s = 0; s < shards_; ++s) shard_[s].capacity = (capacity + shards_ - 1) / shards_;
}

LocationCache::~LocationCache() = default;

LocationCache::Shard& LocationCache::ShardOf(std::string_view key) {
  return shard_[shards_ == 1 ? 0 : std::hash<std::string_view>{}(key) % shards_];
}

bool LocationCache::Find(std::string_view key, CachedLocation* out) {
  if (capacity_ == 0) return false;
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.index.find(key);
  if (it == s.index.end()) return false;
  s.order.splice(s.order.begin(), s.order, it->second);
  *out = it->second->second;
  return true;
}

void LocationCache::Put(std::string_view key, CachedLocation location) {
  if (capacity_ == 0) return;
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> g(s.mu);
  if (auto it = s.index.find(key); it != s.index.end()) {
    it->second->second = std::move(location);
    s.order.splice(s.order.begin(), s.order, it->second);
    return;
  }
  if (s.order.size() >= s.capacity) {
    s.index.erase(s.order.back().first);
    s.order.pop_back();
  }
  s.order.emplace_front(std::string(key), std::move(location));
  s.index.emplace(s.order.front().first, s.order.begin());
}

void LocationCache::Erase(std::string_view key) {
  if (capacity_ == 0) return;
  Shard& s = ShardOf(key);
  std::lock_guard<std::mutex> g(s.mu);
  auto it = s.index.find(key);
  if (it == s.index.end()) return;
  s.order.erase(it->second);
  s.index.erase(it);
}

void LocationCache::Clear() {
  for (size_t i = 0; i < shards_; ++i) {
    std::lock_guard<std::mutex> g(shard_[i].mu);
    shard_[i].index.clear();
    shard_[i].order.clear();
  }
}

size_t LocationCache::size() const {
  size_t n = 0;
  for (size_t i = 0; i < shards_; ++i) {
    std::lock_guard<std::mutex> g(shard_[i].mu);
    n += shard_[i].order.size();
  }
  return n;
}

}  // namespace kvfabric::store
