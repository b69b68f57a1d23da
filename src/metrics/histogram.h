// metrics::Histogram: a latency histogram the hot path fills without locks
// (one relaxed atomic add per bucket hit, one for the sum), read whole by
// whoever reports it. Buckets are fixed: 5 us to 10 s, about three a decade,
// which covers a 4 KiB shm write and a multi-GB transfer alike.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>

#include "kvfabric/stats.h"

namespace kvfabric::metrics {

class Histogram {
 public:
  // Upper bounds of the buckets, in nanoseconds; one more bucket counts the rest.
  static constexpr std::array<int64_t, 20> kUpperNs = {
      5'000,       10'000,      25'000,        50'000,        100'000,       250'000,        500'000,
      1'000'000,   2'500'000,   5'000'000,     10'000'000,    25'000'000,    50'000'000,     100'000'000,
      250'000'000, 500'000'000, 1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};

  // The bucket `ns` falls in: the first whose bound is at least `ns`, or
  // kUpperNs.size() when it exceeds them all. A negative `ns` (a clock
  // read out of order) counts in the first.
  static size_t BucketOf(int64_t ns);

  void Add(int64_t ns) {
    buckets_[BucketOf(ns)].fetch_add(1, std::memory_order_relaxed);
    sum_ns_.fetch_add(static_cast<uint64_t>(ns < 0 ? 0 : ns), std::memory_order_relaxed);
  }
  // Requests counted so far.
  uint64_t count() const;
  // The buckets as of now (each read once; a request added meanwhile may
  // show in its bucket and not yet in the sum).
  LatencyHistogram Read() const;

 private:
  std::array<std::atomic<uint64_t>, kUpperNs.size() + 1> buckets_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace kvfabric::metrics
