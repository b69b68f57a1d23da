#include "engine/poster.h"

#include <algorithm>
#include <cstring>

#include "common/text.h"
#include "engine/rail_choice.h"
#include "engine/slicing.h"
#include "memory/cuda.h"

namespace kvfabric::engine {

void AimSlice(const Route& route, int peer_rail, uint64_t ra, const metadata::ChunkDesc& rc, fabric::Slice* s) {
  s->remote_va = ra;
  s->remote_addr = route.desc->rails[peer_rail].virt_addr ? ra : ra - rc.addr;
  s->remote_key = *rc.keys[peer_rail];
}

Poster::~Poster() = default;

TaskTally Poster::TallyOf(const Plan& p) const {
  if (counters_ == nullptr) return {};
  PeerCounters* peer = p.peer ? p.peer->counters() : counters_->self();
  return {counters_, peer, p.req->opcode == OpCode::kWrite, p.req->length};
}

void Poster::StartTask(Batch* batch, Task* task, const Plan& p, std::shared_ptr<Route> route, size_t slices) {
  const TransferRequest& r = *p.req;
  const bool write = r.opcode == OpCode::kWrite;
  const std::string memory = p.local->device >= 0 ? text::Format("of {} memory ", p.local->location) : "";
  task->Start(batch, static_cast<uint32_t>(slices),
              Clock::now() + std::chrono::milliseconds(options_.transfer_timeout_ms), options_.transfer_timeout_ms,
              text::Format("{} of {} bytes {}{} {}", write ? "WRITE" : "READ", r.length, memory, write ? "to" : "from",
                           p.peer->name()),
              p.peer, this, std::move(route), TallyOf(p));
  batch->outstanding_slices().fetch_add(static_cast<int64_t>(slices));
}

Status Poster::MakeSlices(const Route& route, bool write, Peer* peer, size_t rail, uintptr_t l, uint64_t ra,
                          size_t len, uint32_t attempts, Task* task, std::vector<fabric::Slice>* out) const {
  fabric::Rail* fr = (*rails_)[rail];
  thread_local std::vector<Cut> cuts;
  cuts.clear();
  CutAtChunks(route.local->chunks, route.remote->chunks, l, ra, len, fr->info().max_msg_size, &cuts);
  int resolved_rail = -1;
  fi_addr_t dest = FI_ADDR_NOTAVAIL;
  for (const Cut& c : cuts) {
    const metadata::ChunkDesc& rc = route.remote->chunks[c.remote_chunk];
    const int peer_rail = peer->PeerRailFor(rail, rc.keys);
    const auto& mr = route.local->chunks[c.local_chunk].regions[rail];
    if (peer_rail < 0 && route.remote->location.rfind("cuda", 0) == 0)
      return Status::Unavailable(text::Format(
          "segment {}'s buffer is GPU memory ({}) that no rail reachable from local rail {} registered (no FI_HMEM "
          "there); only same-process copies reach it",
          peer->name(), route.remote->location, rail));
    if (peer_rail < 0 || !mr)
      return Status::Unavailable(text::Format("memory not registered on both ends of local rail {}", rail));
    if (peer_rail != resolved_rail) {
      KVF_RETURN_IF_ERROR(peer->Resolve(fr, peer_rail, &dest));
      resolved_rail = peer_rail;
    }
    fabric::Slice s;
    s.owner = task;
    s.rail = static_cast<uint32_t>(rail);
    s.attempts = attempts;
    s.write = write;
    s.local = reinterpret_cast<void*>(c.local);
    s.length = c.length;
    s.local_desc = mr->desc();
    s.dest = dest;
    AimSlice(route, peer_rail, c.remote, rc, &s);
    s.keepalive = route.local;
    out->push_back(std::move(s));
  }
  return Status::OK();
}

size_t Poster::RailsFor(const Route& route, const Peer& peer, size_t* out) const {
  const auto& keys = route.remote->chunks.front().keys;
  const auto& regions = route.local->chunks.front().regions;
  PairView pairs[kMaxLocalRails];
  int peer_rails[kMaxLocalRails];
  auto paired = [&](const std::vector<size_t>& group) {
    peer.PeerRailsFor(group, keys, peer_rails);
    for (size_t i = 0; i < group.size(); ++i) {
      const size_t r = group[i];
      pairs[r] = {regions[r] != nullptr, route.local->device >= 0 && !(*rails_)[r]->hmem(), peer_rails[i]};
    }
    return PairedRails(group, pairs, out);
  };
  if (const size_t n = paired(*peer.usable_rails()); n > 0) return n;
  return paired(*peer.fallback_rails());
}

Status Poster::NoRailPair(const Route& route, const Peer& peer) const {
  if (route.remote->location.rfind("cuda", 0) == 0) {
    bool any_key = false;
    for (const auto& k : route.remote->chunks.front().keys) any_key = any_key || k.has_value();
    if (!any_key)
      return Status::Unavailable(text::Format(
          "segment {}'s buffer is GPU memory ({}) its rails cannot expose (no FI_HMEM there); only same-process "
          "copies reach it",
          peer.name(), route.remote->location));
  }
  // "0,2": the rails on which a per-rail vector (MRs, keys) holds something.
  auto held = [](const auto& per_rail) {
    std::string out;
    for (size_t r = 0; r < per_rail.size(); ++r)
      if (per_rail[r]) out += (out.empty() ? "" : ",") + std::to_string(r);
    return out;
  };
  const std::string local = held(route.local->chunks.front().regions);
  const std::string remote = held(route.remote->chunks.front().keys);
  return Status::Unavailable(text::Format(
      "segment {}: no rail pair holds this memory on both ends: the local buffer ({}) is registered on rails "
      "{{{}}}, the peer's ({}) on its rails {{{}}}, and no local rail reaches one of those (KVF_REGISTER_RAILS=all "
      "registers every buffer on every rail)",
      peer.name(), route.local->location, local, route.remote->location, remote));
}

Status Poster::Post(Batch* batch, Task* task, const Plan& p, std::vector<fabric::Slice>* scratch) {
  const TransferRequest& r = *p.req;
  const bool write = r.opcode == OpCode::kWrite;
  const uintptr_t l = reinterpret_cast<uintptr_t>(r.local);
  auto route = std::make_shared<Route>(Route{p.local, p.desc, p.remote, l, r.remote_addr});
  size_t paired[kMaxLocalRails];
  const size_t npaired = RailsFor(*route, *p.peer, paired);
  if (npaired == 0) return NoRailPair(*route, *p.peer);
  const int64_t now = SteadyNowNs();
  RailView views[kMaxLocalRails];
  rails_->View(*p.peer, {paired, npaired}, p.local->near_rails, now, views);
  size_t cand[kMaxLocalRails];
  const size_t ncand = CandidateRails({paired, npaired}, views, -1, /*fallback=*/true, cand);
  if (ncand == 0) return Status::Unavailable(text::Format("segment {} has no usable rail", p.peer->name()));
  // GPU memory the rails did not register (no FI_HMEM): through staging.
  if (p.local->device >= 0 && !p.local->chunks.front().regions[cand[0]])
    return PostStaged(batch, task, p, std::move(route), cand, ncand, views);
  const PiecePlan plan = PlanPieces(options_.rail_policy, r.length, ncand, options_.stripe_threshold);
  // A notice carried as CQ data counts the WRITE's slices when they are
  // posted: such a WRITE posts every piece at once.
  bool cq_notice = r.notice != 0 && options_.notice_path != NoticePath::kMessage;
  for (size_t i = 0; i < ncand && cq_notice; ++i) cq_notice = (*rails_)[cand[i]]->cq_data_size() >= 4;
  const size_t pieces = (r.length + plan.piece - 1) / plan.piece;
  const size_t posted = plan.up_front > 0 && !cq_notice ? plan.up_front : pieces;
  if (posted < pieces) {
    route->feed = std::make_shared<PieceFeed>();
    route->feed->next.store(posted * plan.piece);
    route->feed->end = r.length;
    route->feed->piece = plan.piece;
    route->feed->write = write;
  }
  const Peer::PostGuard posting(p.peer.get());  // the slots resolved below stay until the slices are queued
  uint64_t planned[kMaxLocalRails] = {};
  const size_t first = NextRotation();
  scratch->clear();
  for (size_t off = 0, k = 0; off < r.length && k < posted; ++k) {
    const size_t n = std::min(plan.piece, r.length - off);
    const size_t ri = ncand == 1    ? cand[0]
                      : plan.by_load ? PickRail({cand, ncand}, views, n, planned, first)
                                     : cand[(first + k) % ncand];
    planned[ri] += n;
    KVF_RETURN_IF_ERROR(
        MakeSlices(*route, write, p.peer.get(), ri, l + off, r.remote_addr + off, n, 0, task, scratch));
    off += n;
  }
  bool by_message = false;
  if (r.notice != 0) KVF_RETURN_IF_ERROR(CarryNotice(r.notice, p.peer->name(), scratch, &by_message));
  const uint64_t epoch = route->desc->epoch;
  StartTask(batch, task, p, std::move(route), scratch->size());
  if (by_message) task->MailNotice(mailer_, r.notice, epoch);
  if (plan.piece < r.length)  // one queue operation per rail
    std::stable_sort(scratch->begin(), scratch->end(),
                     [](const fabric::Slice& a, const fabric::Slice& b) { return a.rail < b.rail; });
  for (size_t i = 0; i < scratch->size();) {
    size_t j = i;
    while (j < scratch->size() && (*scratch)[j].rail == (*scratch)[i].rail) ++j;
    (*rails_)[(*scratch)[i].rail]->Enqueue(scratch->data() + i, j - i);
    i = j;
  }
  return Status::OK();
}

Status Poster::CarryNotice(uint16_t notice, const std::string& peer, std::vector<fabric::Slice>* slices,
                           bool* by_message) const {
  bool cq_data = options_.notice_path != NoticePath::kMessage && slices->size() <= kMaxNoticeSlices;
  for (const fabric::Slice& s : *slices) cq_data = cq_data && (*rails_)[s.rail]->cq_data_size() >= 4;
  *by_message = options_.notice_path != NoticePath::kCqData && !cq_data;
  if (*by_message) {
    if (mailer_ == nullptr)
      return Status::Unavailable(text::Format("this engine sends no notices as messages, so no notice to segment {}",
                                              peer));
    for (fabric::Slice& s : *slices) s.delivery_complete = true;
    return Status::OK();
  }
  if (slices->size() > kMaxNoticeSlices)
    return Status::InvalidArgument(text::Format(
        "a WRITE with a notice to segment {} would be cut into {} pieces, more than the {} a notice counts; "
        "write fewer bytes per request (KVF_NOTICE_PATH=cq_data; auto or message send it after the WRITE)",
        peer, slices->size(), kMaxNoticeSlices));
  for (fabric::Slice& s : *slices) {
    if ((*rails_)[s.rail]->cq_data_size() < 4)
      return Status::Unavailable(text::Format("rail {} ({}) carries no remote CQ data, so no notice to segment {} "
                                              "(KVF_NOTICE_PATH=cq_data; auto or message send it after the WRITE)",
                                              s.rail, (*rails_)[s.rail]->info().provider, peer));
    s.has_remote_data = true;
    s.remote_data = EncodeNotice(notice, static_cast<uint32_t>(slices->size()));
  }
  return Status::OK();
}

void Poster::CopyLocal(Batch* batch, Task* task, const Plan& p) {
  const TransferRequest& r = *p.req;
  void* remote = reinterpret_cast<void*>(r.remote_addr);
  void* dst = r.opcode == OpCode::kWrite ? remote : r.local;
  const void* src = r.opcode == OpCode::kWrite ? r.local : remote;
  // GPU memory on either side: a device copy under that device.
  const int device = p.local->device >= 0 ? p.local->device : p.self_remote->device;
  Status copied;
  if (device >= 0)
    copied = memory::cuda::Copy(dst, src, r.length, device);
  else
    std::memmove(dst, src, r.length);
  task->Start(batch, 0, Clock::now(), 0, "local copy", nullptr, nullptr, nullptr, TallyOf(p));
  if (copied.ok() && r.notice != 0 && r.opcode == OpCode::kWrite && own_notices_ != nullptr)
    own_notices_->Landed(r.notice);
  task->Complete(copied.ok() ? r.length : 0, copied);
}

}  // namespace kvfabric::engine
