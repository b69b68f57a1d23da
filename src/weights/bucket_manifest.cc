#include "weights/bucket_manifest.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>

#include "common/text.h"

namespace kvfabric::weights {
namespace {

template <class T>
void Put(std::string* out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the hosts that run kvfabric are little-endian
  out->append(b, sizeof(T));
}

void PutText(std::string* out, const std::string& s) {
  Put<uint16_t>(out, static_cast<uint16_t>(s.size()));
  out->append(s);
}

// Reads values from a byte range, failing (and staying failed) at its end.
class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), left_(size) {}
  template <class T>
  bool Get(T* v) {
    if (left_ < sizeof(T)) return Fail();
    std::memcpy(v, p_, sizeof(T));
    p_ += sizeof(T);
    left_ -= sizeof(T);
    return true;
  }
  bool GetText(std::string* s) {
    uint16_t n = 0;
    if (!Get(&n) || n > kMaxNameBytes || n > left_) return Fail();
    s->assign(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    left_ -= n;
    return true;
  }
  size_t left() const { return left_; }

 private:
  bool Fail() {
    left_ = 0;
    return false;
  }
  const uint8_t* p_;
  size_t left_;
};

}  // namespace

std::string EncodeHeader(const BucketHeader& h) {
  std::string out;
  Put(&out, BucketHeader::kMagic);
  Put(&out, BucketHeader::kFormat);
  Put(&out, h.flags);
  Put(&out, h.version);
  Put(&out, h.bucket);
  Put(&out, h.payload_bytes);
  Put(&out, h.manifest_bytes);
  Put(&out, h.pieces);
  Put(&out, h.checksum);
  out.resize(kHeaderBytes, '\0');
  return out;
}

Status DecodeHeader(const uint8_t* data, size_t size, BucketHeader* out) {
  Reader r(data, std::min(size, kHeaderBytes));
  uint32_t magic = 0;
  uint16_t format = 0;
  if (size < kHeaderBytes || !r.Get(&magic) || magic != BucketHeader::kMagic)
    return Status::InvalidArgument("not a weight bucket (no header where the bucket's slot begins)");
  BucketHeader h;
  if (!r.Get(&format) || format != BucketHeader::kFormat)
    return Status::InvalidArgument(
        text::Format("a weight bucket of format {}, this kvfabric reads format {}: the sender runs another release",
                     format, BucketHeader::kFormat));
  r.Get(&h.flags);
  r.Get(&h.version);
  r.Get(&h.bucket);
  r.Get(&h.payload_bytes);
  r.Get(&h.manifest_bytes);
  r.Get(&h.pieces);
  r.Get(&h.checksum);
  *out = h;
  return Status::OK();
}

Status CheckHeader(const BucketHeader& h, uint64_t version, uint64_t bucket, size_t manifest_cap, size_t payload_cap) {
  if (h.version != version)
    return Status::InvalidArgument(
        text::Format("bucket {} is of version {}, not the version {} asked for", h.bucket, h.version, version));
  if (h.bucket != bucket)
    return Status::InvalidArgument(
        text::Format("bucket {} of version {} came where bucket {} was due", h.bucket, version, bucket));
  if (h.manifest_bytes > manifest_cap || h.payload_bytes > payload_cap)
    return Status::InvalidArgument(text::Format(
        "bucket {} of version {} says it holds a manifest of {} bytes and {} bytes of tensors; its slot has room "
        "for {} and {}",
        bucket, version, h.manifest_bytes, h.payload_bytes, manifest_cap, payload_cap));
  return Status::OK();
}

std::string EncodeManifest(const std::vector<PieceEntry>& pieces) {
  std::string out;
  for (const PieceEntry& p : pieces) {
    PutText(&out, p.name);
    PutText(&out, p.dtype);
    Put<uint8_t>(&out, static_cast<uint8_t>(p.shape.size()));
    for (int64_t d : p.shape) Put(&out, d);
    Put(&out, p.tensor_bytes);
    Put(&out, p.tensor_offset);
    Put(&out, p.bucket_offset);
    Put(&out, p.length);
  }
  return out;
}

Status DecodeManifest(const uint8_t* data, size_t size, uint32_t count, uint64_t payload_bytes,
                      std::vector<PieceEntry>* out) {
  out->clear();
  Reader r(data, size);
  std::vector<PieceEntry> pieces;
  for (uint32_t i = 0; i < count; ++i) {
    PieceEntry p;
    uint8_t dims = 0;
    bool ok = r.GetText(&p.name) && r.GetText(&p.dtype) && r.Get(&dims) && dims <= kMaxDims;
    p.shape.resize(ok ? dims : 0);
    for (int64_t& d : p.shape) ok = ok && r.Get(&d) && d >= 0;
    ok = ok && r.Get(&p.tensor_bytes) && r.Get(&p.tensor_offset) && r.Get(&p.bucket_offset) && r.Get(&p.length);
    if (!ok)
      return Status::InvalidArgument(text::Format("the bucket's manifest is cut short or malformed at piece {}", i));
    if (p.bucket_offset > payload_bytes || p.length > payload_bytes - p.bucket_offset ||
        p.tensor_offset > p.tensor_bytes || p.length > p.tensor_bytes - p.tensor_offset)
      return Status::InvalidArgument(
          text::Format("piece {} of the bucket's manifest ({}) lies outside its bucket or its tensor", i, p.name));
    pieces.push_back(std::move(p));
  }
  if (r.left() != 0)
    return Status::InvalidArgument(
        text::Format("the bucket's manifest has {} bytes after its {} pieces", r.left(), count));
  *out = std::move(pieces);
  return Status::OK();
}

uint64_t BucketChecksum(const void* manifest, size_t manifest_bytes, const void* payload, size_t payload_bytes) {
  return XXH3_64bits_withSeed(payload, payload_bytes, XXH3_64bits(manifest, manifest_bytes));
}

}  // namespace kvfabric::weights
