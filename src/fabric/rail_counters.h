// RailCounters: what one rail did since it opened, counted where it
// happens (completions, stalls) with relaxed atomics, and read by whoever
// reports it (Engine::Stats). Never reset.
#pragma once

#include <atomic>
#include <cstdint>

namespace kvfabric::fabric {

struct RailCounters {
  std::atomic<uint64_t> write_bytes{0};  // of WRITE operations that completed
  std::atomic<uint64_t> read_bytes{0};
  std::atomic<uint64_t> writes{0};       // WRITE operations that completed
  std::atomic<uint64_t> reads{0};
  std::atomic<uint64_t> errors{0};       // operations that ended with an error
  std::atomic<uint64_t> stalls{0};       // times the rail was taken out of service
  std::atomic<uint64_t> recoveries{0};   // times it came back into service
  std::atomic<uint64_t> remote_data{0};  // peers' WRITEs that carried remote CQ data here
  std::atomic<uint64_t> stray_completions{0};  // completions naming no operation and carrying no data

  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }
};

}  // namespace kvfabric::fabric
