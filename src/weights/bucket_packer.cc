#include "weights/bucket_packer.h"

#include <algorithm>

namespace kvfabric::weights {

BucketPacker::BucketPacker(uint64_t bucket_bytes, uint64_t align) : bucket_bytes_(bucket_bytes), align_(align) {}

void BucketPacker::Take(uint64_t end) {
  used_ = end;
  if (ends_.size() <= bucket_) ends_.resize(bucket_ + 1, 0);
  ends_[bucket_] = end;
}

std::vector<Piece> BucketPacker::Add(uint64_t bytes) {
  std::vector<Piece> pieces;
  const size_t tensor = tensor_++;
  if (bytes == 0) {
    pieces.push_back({tensor, 0, bucket_, used_, 0});
    return pieces;
  }
  uint64_t at = (used_ + align_ - 1) & ~(align_ - 1);
  if (at >= bucket_bytes_ || (bytes > bucket_bytes_ - at && bytes <= bucket_bytes_)) {
    // No room left, or the tensor fits whole only in a bucket of its own.
    if (used_ > 0) ++bucket_;
    used_ = 0;
    at = 0;
  }
  uint64_t done = 0;
  while (done < bytes) {
    if (at == bucket_bytes_) {
      ++bucket_;
      at = 0;
    }
    const uint64_t n = std::min(bytes - done, bucket_bytes_ - at);
    pieces.push_back({tensor, done, bucket_, at, n});
    Take(at + n);
    done += n;
    at += n;
  }
  return pieces;
}

}  // namespace kvfabric::weights
