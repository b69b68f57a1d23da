// WeightSync, re-planned around a receiver that died: its children ask the
// sender to adopt them (RequestAdoption), and the sender, which still
// holds in its slots every bucket they may lack, writes those to them and
// every later bucket with the others (ServeAdoptions). Why the sender
// holds them: it fills a slot again only once its children gave it back,
// and a child gives a bucket back only once its own WRITEs of it, to the
// children of its own, are done; so a grandchild of the sender lacks at
// most the buckets still in the sender's slots. A receiver further down
// may lack more: then the adoption is refused, and it says so at once.
#include "common/log.h"
#include "common/text.h"
#include "kvfabric/weights.h"
#include "weights/weight_sync_impl.h"

namespace kvfabric::weights {

bool WeightSync::Impl::Probe(int i) {
  TransferRequest r{OpCode::kRead, own(kProbeAt), members[i].segment, members[i].tail_addr + kCreditSourceAt, 8};
  BatchId batch;
  if (members[i].segment < 0 || !engine->AllocateBatch(1, &batch).ok()) return false;
  TransferStatus st;
  bool answered = false;
  if (engine->Submit(batch, {r}).ok() && engine->WaitBatch(batch, ProbeMs(), &st).ok()) {
    if (st.state == TaskState::kPending) (void)engine->ExpireBatch(batch);
    answered = st.state == TaskState::kCompleted;
  }
  if (answered) members[i].probed = __atomic_load_n(own(kProbeAt), __ATOMIC_ACQUIRE);
  (void)engine->FreeBatch(batch);
  return answered;
}

Status WeightSync::Impl::RequestAdoption(uint64_t next, const Status& why) {
  const int dead = parent;
  members[dead].gone = true;
  KVF_LOG_WARN("weight sync: member {} ({}), the parent of this receiver, is gone ({}); asking the sender to write "
               "to it from bucket {} of version {} on",
               dead, members[dead].name, why.ToString(), next, version);
  *own(kRequestSourceAt) = MakeWord(version, next, kRequest);
  KVF_RETURN_IF_ERROR(WriteWord(0, kRequestSourceAt, kWordNotice,
                                why.message() + "; asking the sender (member 0) to adopt this receiver", ProbeMs()));
  parent = 0;
  adopted = true;
  return Status::OK();
}

uint64_t FirstHeld(uint64_t sent, int64_t open, uint64_t slots) {
  if (open >= static_cast<int64_t>(sent) && sent >= slots) return sent - slots + 1;  // its slot is being filled
  return sent > slots ? sent - slots : 0;
}

void WeightSync::Impl::ServeAdoptions() {
  const uint64_t slots = static_cast<uint64_t>(options.slots);
  const uint64_t held = FirstHeld(sent, open_bucket, slots);
  for (int a = 1; a < static_cast<int>(members.size()); ++a) {
    Peer& m = members[a];
    const uint64_t w = word(a);
    if (m.gone || m.adopted || !WordOf(w, version) || (w & kRequest) == 0) continue;
    const uint64_t next = w & kCountMask;
    if (next < held || next > sent || (m.segment < 0 && !engine->OpenSegment(m.name, &m.segment).ok())) {
      KVF_LOG_WARN("weight sync: member {} ({}) lost its parent and lacks bucket {} of version {} on; of the {} "
                   "buckets sent, the sender holds those from {} on, so it cannot take it over",
                   a, m.name, next, version, sent, held);
      *own(kRequestSourceAt) = 0;
      (void)WriteWord(a, kRequestSourceAt, kRefusedNotice, "refusing an adoption");
      // Left out without waiting for its children: they stay behind it,
      // and fail with it.
      m.gone = true;
      std::erase(orphans, a);
      continue;
    }
    m.adopted = true;
    children.push_back(a);
    std::erase(orphans, a);
    KVF_LOG_INFO("weight sync: member {} ({}) lost its parent; the sender writes to it from bucket {} of version {} on",
                 a, m.name, next, version);
    for (uint64_t b = next; b < sent; ++b)
      if (Status s = WriteToChildren(b, sealed_bytes[b % slots], {a}); !s.ok())
        KVF_LOG_WARN("weight sync: bucket {} to adopted member {}: {}", b, a, s.ToString());
  }
}

}  // namespace kvfabric::weights
