// Pick: the elements of a batch's vector at some of its indices, in order
// (a call on part of a batch: the keys to ask again, their buffers).
#pragma once

#include <cstddef>
#include <vector>

namespace kvfabric::store {

template <typename T>
std::vector<T> Pick(const std::vector<T>& all, const std::vector<size_t>& which) {
  std::vector<T> out;
  out.reserve(which.size());
  for (size_t i : which) out.push_back(all[i]);
  return out;
}

}  // namespace kvfabric::store
