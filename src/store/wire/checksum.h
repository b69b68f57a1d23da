// Checksum: what the store keeps of a page's bytes to tell them from any
// others: the 128-bit xxh3 of the page, its buffers taken in order as one
// run of bytes. A GET that reads a page recomputes it over what arrived, and
// a page whose bytes differ in any way (torn by a concurrent overwrite, its
// slot reused, corrupted in memory) fails the comparison except with
// probability about 2^-128.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>

namespace kvfabric::store {

struct Checksum {
  uint64_t low = 0;
  uint64_t high = 0;
  bool operator==(const Checksum&) const = default;
};

// One piece of a page in local memory.
struct ByteRange {
  const void* data = nullptr;
  size_t length = 0;
};

// The checksum of a page fed in order, piece by piece, as its pieces come:
// the same as ChecksumOf over all of them. A GET feeds each piece of a large
// page as soon as it lands, while it is still in cache.
class ChecksumStream {
 public:
  ChecksumStream();
  ~ChecksumStream();
  ChecksumStream(const ChecksumStream&) = delete;
  ChecksumStream& operator=(const ChecksumStream&) = delete;
  void Add(const void* data, size_t length);
  // The checksum of everything added so far; more may be added after.
  Checksum Digest() const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The checksum of the first `length` bytes of `pieces` taken in order (all
// of them when `length` is their total); `length` beyond the total is the
// caller's bug and covers only what there is.
Checksum ChecksumOf(std::span<const ByteRange> pieces, uint64_t length);
inline Checksum ChecksumOfBytes(const void* data, size_t length) {
  const ByteRange one{data, length};
  return ChecksumOf(std::span<const ByteRange>(&one, 1), length);
}

}  // namespace kvfabric::store
