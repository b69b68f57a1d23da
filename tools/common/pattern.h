// Deterministic byte patterns and checksums shared by kvfabric-bench's
// --verify, the tests and their test peer, so both sides of a transfer agree
// on the bytes. Here under tools/ because tools must not include test code;
// tests may include this.
#pragma once

#include <cstddef>
#include <cstdint>

namespace kvfabric::tools {

// Byte i of pattern `seed` (position-dependent, so misplaced bytes are caught).
inline uint8_t PatternByte(uint64_t i, uint32_t seed) {
  uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ (static_cast<uint64_t>(seed) * 0xD1B54A32D192ED03ull);
  x ^= x >> 29;
  return static_cast<uint8_t>(x);
}

inline void FillPattern(void* dst, size_t len, uint64_t start, uint32_t seed) {
  auto* p = static_cast<uint8_t*>(dst);
  for (size_t i = 0; i < len; ++i) p[i] = PatternByte(start + i, seed);
}

// Index of the first byte that differs from the pattern, or len when all match.
inline size_t CheckPattern(const void* src, size_t len, uint64_t start, uint32_t seed) {
  const auto* p = static_cast<const uint8_t*>(src);
  for (size_t i = 0; i < len; ++i)
    if (p[i] != PatternByte(start + i, seed)) return i;
  return len;
}

// FNV-1a 64: a checksum the target computes of its own memory.
inline uint64_t Checksum(const void* src, size_t len) {
  const auto* p = static_cast<const uint8_t*>(src);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < len; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

}  // namespace kvfabric::tools
