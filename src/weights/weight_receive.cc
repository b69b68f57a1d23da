// WeightSync, a receiver's side: each bucket awaited by its notice,
// checked (header, manifest, checksum), written on to this member's
// children, handed out tensor by tensor, then its slot given back.
#include <algorithm>
#include <cstring>

#include "common/text.h"
#include "kvfabric/weights.h"
#include "weights/weight_sync_impl.h"

namespace kvfabric::weights {
namespace {

using Clock = std::chrono::steady_clock;

// "a, b, c and 4 more": the tensors of a bucket, for its errors.
std::string TensorsOf(const std::vector<PieceEntry>& pieces) {
  std::string out;
  for (size_t i = 0; i < pieces.size() && i < 3; ++i) out += (i ? ", " : "") + pieces[i].name;
  if (pieces.size() > 3) out += text::Format(" and {} more", pieces.size() - 3);
  return out.empty() ? "no tensors" : out;
}

// Checks the bucket that landed in its slot; fills m->header and m->pieces.
Status Check(WeightSync::Impl* m, uint64_t bucket) {
  const uint8_t* slot = m->slot(bucket);
  const std::string where = text::Format("bucket {} of version {}", bucket, m->version);
  KVF_RETURN_IF_ERROR(DecodeHeader(slot, kHeaderBytes, &m->header).Annotate(where));
  KVF_RETURN_IF_ERROR(CheckHeader(m->header, m->version, bucket, m->options.manifest_bytes, m->options.bucket_bytes));
  const uint8_t* manifest = slot + kPayloadAt + m->header.payload_bytes;
  KVF_RETURN_IF_ERROR(
      DecodeManifest(manifest, m->header.manifest_bytes, m->header.pieces, m->header.payload_bytes, &m->pieces)
          .Annotate(where));
  const auto summing = Clock::now();
  const uint64_t sum = BucketChecksum(manifest, m->header.manifest_bytes, slot + kPayloadAt, m->header.payload_bytes);
  m->stats.checksum_ns += NsSince(summing);
  if (sum != m->header.checksum)
    return Status::ProtocolError(
        text::Format("{} ({}) does not match its checksum: its bytes were damaged on the way; "
                     "nothing of it is handed out",
                     where, TensorsOf(m->pieces)));
  return Status::OK();
}

// Takes out of the stash the notices that can no longer say anything of
// bucket `bucket` or later: data notices once the sender adopted this
// member (its dead parent's), and adopted-data notices of the buckets
// before it (the sender writes again the buckets this member may lack).
void DropStale(WeightSync::Impl* m, uint64_t bucket) {
  const uint64_t back = std::min<uint64_t>(bucket, 2 * static_cast<uint64_t>(m->options.slots));
  for (uint64_t b = bucket - back; b < bucket; ++b) m->stash.erase(AdoptedNotice(m->version, b));
  if (m->adopted) std::erase_if(m->stash, IsDataNotice);
}

// Awaits bucket `bucket`, checks it and writes it on to the children.
Status Load(WeightSync::Impl* m, uint64_t bucket) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(m->options.timeout_ms);
  KVF_RETURN_IF_ERROR(m->AwaitBucket(bucket, deadline));
  const Status checked = Check(m, bucket);
  if (!checked.ok()) {
    m->pieces.clear();
    m->TellFailure(bucket);  // the members before and after stop now, not at their deadline
    return checked;
  }
  if (bucket >= static_cast<uint64_t>(m->options.slots))
    KVF_RETURN_IF_ERROR(m->AwaitSlotFree(bucket - m->options.slots));
  KVF_RETURN_IF_ERROR(m->WriteToChildren(bucket, kPayloadAt + m->header.payload_bytes + m->header.manifest_bytes));
  m->loaded = static_cast<int64_t>(bucket);
  m->cursor = 0;
  ++m->stats.buckets;
  return Status::OK();
}

// The loaded bucket is no longer handed out: once the WRITEs that read its
// slot are done, the parent may fill it again.
Status Release(WeightSync::Impl* m) {
  const uint64_t bucket = static_cast<uint64_t>(m->loaded);
  m->FinishWrites(bucket);
  return m->GiveCredit(bucket, (m->header.flags & BucketHeader::kLast) != 0);
}

}  // namespace

Status WeightSync::Impl::AwaitBucket(uint64_t bucket, Clock::time_point deadline) {
  for (;;) {
    DropStale(this, bucket);
    const uint16_t notice = adopted ? AdoptedNotice(version, bucket) : DataNotice(bucket);
    if (auto it = stash.find(notice); it != stash.end()) {
      stash.erase(it);
      return Status::OK();
    }
    const std::string what =
        text::Format("bucket {} from member {} ({}){}", bucket, parent, members[parent].name,
                     parent == 0 ? ": the sender may have died"
                                 : ": this receiver's parent, or a member before it, may have died");
    if (stash.erase(kRefusedNotice) > 0)
      return Status::Unavailable(text::Format(
          "{}: its parent died and the sender no longer holds the buckets this receiver lacks (it is more than {} "
          "buckets behind), so it cannot adopt it",
          what, options.slots));
    bool quiet = false;
    KVF_RETURN_IF_ERROR(WaitSlice(deadline, what, &quiet));
    // Probed only when nothing came (WaitSlice returns at once when
    // notices came, the awaited one perhaps among them).
    if (!quiet || parent == 0 || Probe(parent)) continue;
    KVF_RETURN_IF_ERROR(RequestAdoption(bucket, Status::NetworkError(what + ": it did not answer a probe")));
    deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);  // the sender's turn
  }
}

Status WeightSync::BeginReceive(uint64_t version) {
  Impl& m = *impl_;
  if (m.me <= 0) return Status::InvalidArgument("member 0 of a weight sync sends; the others receive");
  return m.Begin(version);
}

Status WeightSync::Next(TensorRef* out, bool* done) {
  Impl& m = *impl_;
  *done = false;
  for (;;) {
    if (m.finished) {
      *done = true;
      return Status::OK();
    }
    if (m.loaded >= 0 && m.cursor < m.pieces.size()) {
      const PieceEntry& p = m.pieces[m.cursor++];
      const uint8_t* bytes = m.slot(static_cast<uint64_t>(m.loaded)) + kPayloadAt + p.bucket_offset;
      if (p.length < p.tensor_bytes) {  // a piece of a tensor spanning buckets
        const auto copying = Clock::now();
        m.joined.resize(p.tensor_bytes);
        std::memcpy(m.joined.data() + p.tensor_offset, bytes, p.length);
        m.stats.copy_ns += NsSince(copying);
        if (p.tensor_offset + p.length < p.tensor_bytes) continue;
        bytes = m.joined.data();
      }
      *out = {p.name, p.dtype, p.shape, bytes, p.tensor_bytes};
      m.stats.bytes += p.tensor_bytes;
      return Status::OK();
    }
    if (m.loaded >= 0) {
      const bool last = (m.header.flags & BucketHeader::kLast) != 0;
      KVF_RETURN_IF_ERROR(Release(&m));
      if (last) {
        // Every child's credit for the buckets still in its slots.
        KVF_RETURN_IF_ERROR(m.AwaitSlotsFree(static_cast<uint64_t>(m.loaded) + 1));
        m.finished = true;
        m.unfinished = false;
        continue;
      }
    }
    KVF_RETURN_IF_ERROR(Load(&m, static_cast<uint64_t>(m.loaded + 1)));
  }
}

}  // namespace kvfabric::weights
