// TouchQueue: keys whose pages were read without a lookup, per home, until
// their touch message goes. Such reads are not seen by the home's LRU, so
// their keys are sent to it in one touch message, at most every kEvery per
// home (fire and forget: a lost touch only makes its pages look older).
// Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

namespace kvfabric::store {

class TouchQueue {
 public:
  static constexpr auto kEvery = std::chrono::milliseconds(200);
  static constexpr size_t kMaxKeys = 8192;
  static constexpr size_t kMaxBytes = 1 << 20;  // well under a control frame

  // Queues `keys` for `home` (past kMaxKeys or kMaxBytes queued for it,
  // the rest are dropped). Returns every key queued for it, to send now,
  // when kEvery has passed since its last send as of `now`; else nothing.
  std::vector<std::string> Add(const std::string& home, const std::vector<std::string_view>& keys,
                               std::chrono::steady_clock::time_point now);

 private:
  struct Queued {
    std::unordered_set<std::string> keys;
    size_t bytes = 0;
    std::chrono::steady_clock::time_point sent{};
  };
  std::mutex mu_;
  std::unordered_map<std::string, Queued> homes_;
};

}  // namespace kvfabric::store
