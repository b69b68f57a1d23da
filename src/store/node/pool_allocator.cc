#include "store/node/pool_allocator.h"

#include <iterator>

namespace kvfabric::store {

PoolAllocator::PoolAllocator(uint64_t pool_bytes, uint64_t alignment)
    : pool_bytes_(pool_bytes & ~(alignment - 1)), alignment_(alignment) {
  if (pool_bytes_ > 0) AddFree(0, pool_bytes_);
}

uint64_t PoolAllocator::ExtentBytes(uint64_t bytes) const {
  return (bytes + alignment_ - 1) & ~(alignment_ - 1);
}

void PoolAllocator::AddFree(uint64_t offset, uint64_t bytes) {
  by_offset_.emplace(offset, bytes);
  by_size_.emplace(bytes, offset);
  free_bytes_ += bytes;
}

void PoolAllocator::RemoveFree(std::map<uint64_t, uint64_t>::iterator it) {
  auto [first, last] = by_size_.equal_range(it->second);
  for (auto s = first; s != last; ++s)
    if (s->second == it->first) {
      by_size_.erase(s);
      break;
    }
  free_bytes_ -= it->second;
  by_offset_.erase(it);
}

std::optional<uint64_t> PoolAllocator::Allocate(uint64_t bytes) {
  if (bytes == 0 || bytes > pool_bytes_) return std::nullopt;
  const uint64_t need = ExtentBytes(bytes);
  auto fit = by_size_.lower_bound(need);
  if (fit == by_size_.end()) return std::nullopt;
  const uint64_t offset = fit->second, have = fit->first;
  RemoveFree(by_offset_.find(offset));
  if (have > need) AddFree(offset + need, have - need);
  allocated_.emplace(offset, need);
  return offset;
}

bool PoolAllocator::Free(uint64_t offset) {
  auto a = allocated_.find(offset);
  if (a == allocated_.end()) return false;
  uint64_t start = offset, bytes = a->second;
  allocated_.erase(a);
  auto next = by_offset_.lower_bound(offset);
  if (next != by_offset_.end() && next->first == offset + bytes) {
    bytes += next->second;
    auto after = std::next(next);
    RemoveFree(next);
    next = after;
  }
  if (next != by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      bytes += prev->second;
      RemoveFree(prev);
    }
  }
  AddFree(start, bytes);
  return true;
}

bool PoolAllocator::Claim(uint64_t offset, uint64_t bytes) {
  const uint64_t need = ExtentBytes(bytes);
  auto it = by_offset_.upper_bound(offset);
  if (need == 0 || offset % alignment_ != 0 || it == by_offset_.begin()) return false;
  --it;  // the free extent that starts at or before offset
  const uint64_t start = it->first, end = start + it->second;
  if (offset >= end || need > end - offset) return false;
  RemoveFree(it);
  if (offset > start) AddFree(start, offset - start);
  if (end > offset + need) AddFree(offset + need, end - offset - need);
  allocated_.emplace(offset, need);
  return true;
}

}  // namespace kvfabric::store
