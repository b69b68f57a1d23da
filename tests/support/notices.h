// What a target engine's notices said, for the transport tests: the target
// (kvfabric-test-peer or a LocalTarget) waits for them in its own engine
// and checks, as each arrives, that the bytes of its WRITE are there.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/engine.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {

// Waits up to `wait_ms` in all for `count` notices of `engine`. For each,
// in the order they came: "N:ok" when the `chunk` bytes at (N - 1) * chunk
// of `base` held pattern `seed` when notice N was taken, else "N:bad".
// Space-separated; "" when none came.
inline std::string GatherNotices(Engine* engine, const uint8_t* base, size_t size, int wait_ms, size_t count,
                                 size_t chunk, uint32_t seed) {
  std::string out;
  size_t got = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(wait_ms);
  while (got < count) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - std::chrono::steady_clock::now());
    std::vector<uint16_t> notices;
    if (left.count() <= 0 || !engine->WaitNotices(left.count(), &notices).ok()) break;
    for (uint16_t n : notices) {
      const size_t off = (static_cast<size_t>(n) - 1) * chunk;
      const bool ok = n > 0 && off + chunk <= size && tools::CheckPattern(base + off, chunk, off, seed) == chunk;
      out += (out.empty() ? "" : " ") + std::to_string(n) + (ok ? ":ok" : ":bad");
      ++got;
    }
  }
  return out;
}

}  // namespace kvfabric::test
