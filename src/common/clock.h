// The one clock reading kvfabric compares across layers: steady-clock
// nanoseconds. Rails stamp their health with it and the engine asks them
// about it (InService, Throughput) with readings of the same clock.
#pragma once

#include <chrono>
#include <cstdint>

namespace kvfabric {

inline int64_t SteadyNowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace kvfabric
