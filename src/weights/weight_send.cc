// WeightSync, the sender's side: tensors packed into the sender's slots
// (BucketPacker), each full bucket sealed (manifest, checksum, header) and
// written to the sender's children with its notice.
#include <cstring>

#include "common/text.h"
#include "kvfabric/weights.h"
#include "weights/weight_sync_impl.h"

namespace kvfabric::weights {
namespace {

// Seals bucket `bucket` in its slot: manifest after the payload, header in
// front. Returns the bytes to WRITE.
Status Seal(WeightSync::Impl* m, uint64_t bucket, bool last, uint64_t* bytes) {
  const std::string manifest = EncodeManifest(m->entries);
  if (manifest.size() > m->options.manifest_bytes)
    return Status::InvalidArgument(text::Format(
        "bucket {} of version {} names {} tensor pieces in a manifest of {} bytes, more than the {} a slot holds: "
        "raise the manifest size (SyncOptions::manifest_bytes) or send larger tensors",
        bucket, m->version, m->entries.size(), manifest.size(), m->options.manifest_bytes));
  uint8_t* slot = m->slot(bucket);
  const uint64_t payload = m->packer->used(bucket);
  std::memcpy(slot + kPayloadAt + payload, manifest.data(), manifest.size());
  BucketHeader h;
  h.flags = last ? BucketHeader::kLast : 0;
  h.version = m->version;
  h.bucket = bucket;
  h.payload_bytes = payload;
  h.manifest_bytes = static_cast<uint32_t>(manifest.size());
  h.pieces = static_cast<uint32_t>(m->entries.size());
  const auto summing = std::chrono::steady_clock::now();
  h.checksum = BucketChecksum(manifest.data(), manifest.size(), slot + kPayloadAt, payload);
  m->stats.checksum_ns += NsSince(summing);
  const std::string header = EncodeHeader(h);
  std::memcpy(slot, header.data(), header.size());
  *bytes = kPayloadAt + payload + manifest.size();
  return Status::OK();
}

// Seals the open bucket and writes it to the children.
Status Flush(WeightSync::Impl* m, bool last) {
  const uint64_t bucket = static_cast<uint64_t>(m->open_bucket);
  uint64_t bytes = 0;
  KVF_RETURN_IF_ERROR(Seal(m, bucket, last, &bytes));
  if (m->seal_hook) m->seal_hook(bucket, m->slot(bucket), bytes);
  m->sealed_bytes[bucket % m->options.slots] = bytes;
  KVF_RETURN_IF_ERROR(m->WriteToChildren(bucket, bytes));
  m->entries.clear();
  m->sent = bucket + 1;
  ++m->stats.buckets;
  return Status::OK();
}

// Makes `bucket` the open one: its slot free again (the WRITEs that read it
// done, every child's credit for the bucket that last used it taken).
Status Open(WeightSync::Impl* m, uint64_t bucket) {
  if (bucket >= static_cast<uint64_t>(m->options.slots))
    KVF_RETURN_IF_ERROR(m->AwaitSlotFree(bucket - m->options.slots));
  m->open_bucket = static_cast<int64_t>(bucket);
  return Status::OK();
}

}  // namespace

Status WeightSync::BeginSend(uint64_t version) {
  Impl& m = *impl_;
  if (m.me != 0) return Status::InvalidArgument("only member 0 of a weight sync sends");
  KVF_RETURN_IF_ERROR(m.Begin(version));
  m.packer.emplace(m.options.bucket_bytes, 64);
  m.sealed_bytes.assign(static_cast<size_t>(m.options.slots), 0);
  return Open(&m, 0);
}

Status WeightSync::Send(const TensorRef& t) {
  Impl& m = *impl_;
  if (!m.packer || m.open_bucket < 0) return Status::InvalidArgument("Send before BeginSend");
  for (const Piece& p : m.packer->Add(t.bytes)) {
    if (static_cast<int64_t>(p.bucket) != m.open_bucket) {
      KVF_RETURN_IF_ERROR(Flush(&m, false));
      KVF_RETURN_IF_ERROR(Open(&m, p.bucket));
    }
    if (p.length > 0) {
      const auto copying = std::chrono::steady_clock::now();
      std::memcpy(m.slot(p.bucket) + kPayloadAt + p.bucket_offset,
                  static_cast<const uint8_t*>(t.data) + p.tensor_offset, p.length);
      m.stats.copy_ns += NsSince(copying);
    }
    m.entries.push_back({t.name, t.dtype, t.shape, t.bytes, p.tensor_offset, p.bucket_offset, p.length});
  }
  m.stats.bytes += t.bytes;
  return Status::OK();
}

Status WeightSync::EndSend() {
  Impl& m = *impl_;
  if (!m.packer || m.open_bucket < 0) return Status::InvalidArgument("EndSend before BeginSend");
  KVF_RETURN_IF_ERROR(Flush(&m, true));
  KVF_RETURN_IF_ERROR(m.AwaitSlotsFree(m.sent));
  m.packer.reset();
  m.open_bucket = -1;
  m.unfinished = false;
  return Status::OK();
}

}  // namespace kvfabric::weights
