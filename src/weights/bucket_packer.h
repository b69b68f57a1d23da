// Where each tensor of a weight sync goes among its buckets
// (docs/design/weights.md). The sender packs tensors, in the order its
// generator yields them, into buckets of a fixed size that move one WRITE
// each; every member derives the same layout from the tensors' sizes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfabric::weights {

// `length` bytes of tensor `tensor` from `tensor_offset`, at
// `bucket_offset` of bucket `bucket`.
struct Piece {
  size_t tensor = 0;
  uint64_t tensor_offset = 0;
  size_t bucket = 0;
  uint64_t bucket_offset = 0;
  uint64_t length = 0;

  bool operator==(const Piece&) const = default;
};

// Packs tensors one after the other. Contract:
// - each tensor starts at a multiple of `align` in its bucket (so a
//   receiver can view it in place with its dtype's alignment);
// - a tensor that fits in what is left of the current bucket goes there;
//   one that does not but fits in a bucket starts the next bucket (so it
//   lies whole in one bucket); one larger than a bucket starts where the
//   current bucket's free space begins and fills whole buckets after it,
//   its last piece leaving room behind it for the next tensors;
// - pieces are returned in tensor order; together they cover the tensor
//   exactly once; no two tensors' pieces overlap; no piece ends past
//   `bucket_bytes`;
// - a tensor of 0 bytes is one piece of length 0 at the current bucket's
//   end, needing no bytes (a receiver yields it without waiting; when
//   every tensor is empty there are no buckets at all).
// REQUIRES: bucket_bytes > 0; align a power of two, at most bucket_bytes.
class BucketPacker {
 public:
  explicit BucketPacker(uint64_t bucket_bytes, uint64_t align = 64);

  // The pieces of the next tensor, of `bytes` bytes.
  std::vector<Piece> Add(uint64_t bytes);
  // Buckets no later tensor can reach: those before the current one, and
  // the current one too once it is full.
  size_t sealed() const { return bucket_ + (used_ == bucket_bytes_ ? 1 : 0); }
  // Buckets holding bytes so far (the count once the last tensor is added).
  size_t buckets() const { return ends_.size(); }
  // Bytes in use in bucket `b` (its last piece's end), for b < buckets().
  uint64_t used(size_t b) const { return b < ends_.size() ? ends_[b] : 0; }

 private:
  void Take(uint64_t end);
  uint64_t bucket_bytes_;
  uint64_t align_;
  size_t tensor_ = 0;
  size_t bucket_ = 0;  // the current bucket
  uint64_t used_ = 0;  // its bytes in use
  std::vector<uint64_t> ends_;
};

}  // namespace kvfabric::weights
