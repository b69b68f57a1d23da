// Poster, staged posting: a request whose local memory is on a GPU that the
// rails cannot register (no FI_HMEM) moves through pinned staging slots.
// A WRITE's slice is copied device -> slot here, on the submitting thread,
// while the slices before it are on the wire; a READ's is copied slot ->
// device by Unstage as it completes. Slices pick rails as any other; they
// are not moved to another rail on failure. Submit blocks while every slot
// is in use.
#include "common/text.h"
#include "engine/poster.h"
#include "engine/rail_choice.h"
#include "engine/slicing.h"
#include "memory/cuda.h"

namespace kvfabric::engine {
namespace {

// The request's device memory as one chunk: staged slices are cut at the
// peer's chunk edges and the slot size only.
struct Extent {
  uint64_t addr = 0;
  uint64_t length = 0;
};

}  // namespace

Status Poster::EnsureStaging() {
  std::lock_guard<std::mutex> g(staging_mu_);
  if (staging_) return Status::OK();
  const size_t bytes = options_.staging_bytes;
  return memory::StagingPool::Create(rails_->raw(), bytes, std::min<size_t>(1 << 20, bytes / 4), &staging_);
}

Status Poster::PostStaged(Batch* batch, Task* task, const Plan& p, std::shared_ptr<Route> route, const size_t* cand,
                          size_t ncand, const RailView* views) {
  const TransferRequest& r = *p.req;
  const bool write = r.opcode == OpCode::kWrite;
  // Staged pieces carry no remote CQ data: a notice goes as a message.
  if (r.notice != 0 && (options_.notice_path == NoticePath::kCqData || mailer_ == nullptr))
    return Status::Unavailable(text::Format(
        "a WRITE with a notice from GPU memory ({}) that the rails did not register: its pieces go through host "
        "staging, which carries no remote CQ data (KVF_NOTICE_PATH=cq_data; auto or message send the notice after "
        "the WRITE), or write from GPU memory on a rail with FI_HMEM",
        p.local->location));
  KVF_RETURN_IF_ERROR(EnsureStaging().Annotate("GPU memory on " + (*rails_)[cand[0]]->info().provider));
  const auto& rchunks = p.remote->chunks;
  size_t max_msg = staging_->slot_bytes();
  for (size_t i = 0; i < ncand; ++i) {
    max_msg = std::min(max_msg, (*rails_)[cand[i]]->info().max_msg_size);
    for (const auto& c : rchunks)
      if (p.peer->PeerRailFor(cand[i], c.keys) < 0)
        return Status::Unavailable(text::Format("segment {}'s buffer is not reachable from local rail {}{}",
                                                p.peer->name(), cand[i],
                                                p.remote->location.rfind("cuda", 0) == 0
                                                    ? " (GPU memory there, without FI_HMEM)"
                                                    : ""));
  }
  // The slices: at most one slot each, cut at the peer's chunk edges.
  const uintptr_t l = reinterpret_cast<uintptr_t>(r.local);
  const std::vector<Extent> device{{l, r.length}};
  std::vector<Cut> cuts;
  CutAtChunks(device, rchunks, l, r.remote_addr, r.length, max_msg, &cuts);
  StartTask(batch, task, p, route, cuts.size());
  if (r.notice != 0) task->MailNotice(mailer_, r.notice, route->desc->epoch);
  const Peer::PostGuard posting(p.peer.get());  // the slots resolved below stay until the slices are queued
  uint64_t planned[kMaxLocalRails] = {};
  const size_t first = NextRotation();
  for (const Cut& c : cuts) {
    const size_t ri = ncand == 1 ? cand[0] : PickRail({cand, ncand}, views, c.length, planned, first);
    planned[ri] += c.length;
    fabric::Slice s;
    s.owner = task;
    s.rail = static_cast<uint32_t>(ri);
    s.write = write;
    s.delivery_complete = write && r.notice != 0;
    s.length = c.length;
    const int peer_rail = p.peer->PeerRailFor(ri, rchunks[c.remote_chunk].keys);
    AimSlice(*route, peer_rail, c.remote, rchunks[c.remote_chunk], &s);
    s.keepalive = route->local;
    s.owner_tag = static_cast<int32_t>(staging_->Acquire());
    s.local = staging_->Address(static_cast<uint32_t>(s.owner_tag));
    s.local_desc = staging_->Desc(ri);
    Status st = p.peer->Resolve((*rails_)[ri], peer_rail, &s.dest);
    if (st.ok() && write) st = memory::cuda::Copy(s.local, reinterpret_cast<void*>(c.local), c.length, p.local->device);
    if (!st.ok()) {
      task->OnSliceDone(s, 0, st);  // releases the slot, fails the task
      continue;
    }
    (*rails_)[ri]->Enqueue(&s, 1);
  }
  return Status::OK();
}

Status Poster::Unstage(Task* task, const fabric::Slice& s, bool copy_back) {
  Status st;
  if (copy_back) {
    const auto route = std::static_pointer_cast<const Route>(task->route());
    void* device = reinterpret_cast<void*>(route->request_local + (s.remote_va - route->request_remote));
    st = memory::cuda::Copy(device, staging_->Address(static_cast<uint32_t>(s.owner_tag)), s.length,
                            route->local->device);
  }
  staging_->Release(static_cast<uint32_t>(s.owner_tag));
  return st;
}

}  // namespace kvfabric::engine
