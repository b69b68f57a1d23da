// What a weight-sync bucket says of itself (docs/design/weights.md,
// "A bucket on the wire"): a fixed header (version, bucket number, sizes,
// checksum) and a manifest naming the tensor pieces it holds, written in
// front of its payload in one WRITE. A receiver checks both before it
// hands out a tensor: bytes it cannot parse, a version or bucket it did not
// ask for, or a checksum that does not match are errors, never weights.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric::weights {

// One piece of a tensor in a bucket (see BucketPacker's Piece): the
// tensor's name, dtype ("bfloat16", "float32", ...) and shape, its size in
// bytes, and where this piece sits in the tensor and in the bucket.
struct PieceEntry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t tensor_bytes = 0;
  uint64_t tensor_offset = 0;
  uint64_t bucket_offset = 0;
  uint64_t length = 0;

  bool operator==(const PieceEntry&) const = default;
};

// The fixed header, kHeaderBytes on the wire (little-endian).
struct BucketHeader {
  static constexpr uint32_t kMagic = 0x5746564b;  // "KVFW"
  static constexpr uint16_t kFormat = 1;
  static constexpr uint16_t kLast = 1;  // flags: the version's last bucket
  uint16_t flags = 0;
  uint64_t version = 0;
  uint64_t bucket = 0;  // 0, 1, ... within the version
  uint64_t payload_bytes = 0;
  uint32_t manifest_bytes = 0;
  uint32_t pieces = 0;
  uint64_t checksum = 0;  // BucketChecksum of the manifest and the payload
};
inline constexpr size_t kHeaderBytes = 64;
// Bounds a receiver enforces before it trusts a manifest.
inline constexpr size_t kMaxNameBytes = 4096;
inline constexpr size_t kMaxDims = 16;

// The header's kHeaderBytes bytes.
std::string EncodeHeader(const BucketHeader& h);
// Parses kHeaderBytes at `data`. Errors (InvalidArgument): not a bucket
// (magic), an unknown format.
Status DecodeHeader(const uint8_t* data, size_t size, BucketHeader* out);
// What a receiver asks of a header: its version and bucket, and sizes that
// fit its slot (`manifest_cap`, `payload_cap`). The error names what
// differs.
Status CheckHeader(const BucketHeader& h, uint64_t version, uint64_t bucket, size_t manifest_cap, size_t payload_cap);

std::string EncodeManifest(const std::vector<PieceEntry>& pieces);
// Parses `size` bytes into exactly `count` pieces. Contract: never reads
// past `size`; a truncated or malformed manifest (a name or dtype over
// kMaxNameBytes, more than kMaxDims dimensions, a piece past the payload of
// `payload_bytes` or past its tensor) is InvalidArgument and leaves `out`
// empty.
Status DecodeManifest(const uint8_t* data, size_t size, uint32_t count, uint64_t payload_bytes,
                      std::vector<PieceEntry>* out);

// xxh3-64 of the payload, seeded with the xxh3-64 of the manifest.
uint64_t BucketChecksum(const void* manifest, size_t manifest_bytes, const void* payload, size_t payload_bytes);

}  // namespace kvfabric::weights
