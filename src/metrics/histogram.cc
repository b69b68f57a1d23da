#include "metrics/histogram.h"

#include <algorithm>

namespace kvfabric::metrics {

size_t Histogram::BucketOf(int64_t ns) {
  return static_cast<size_t>(std::lower_bound(kUpperNs.begin(), kUpperNs.end(), ns) - kUpperNs.begin());
}

uint64_t Histogram::count() const {
  uint64_t n = 0;
  for (const auto& b : buckets_) n += b.load(std::memory_order_relaxed);
  return n;
}

LatencyHistogram Histogram::Read() const {
  LatencyHistogram h;
  h.upper_seconds.reserve(kUpperNs.size());
  for (int64_t ns : kUpperNs) h.upper_seconds.push_back(static_cast<double>(ns) * 1e-9);
  h.counts.reserve(buckets_.size());
  for (const auto& b : buckets_) {
    h.counts.push_back(b.load(std::memory_order_relaxed));
    h.count += h.counts.back();
  }
  h.sum_seconds = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) * 1e-9;
  return h;
}

}  // namespace kvfabric::metrics
