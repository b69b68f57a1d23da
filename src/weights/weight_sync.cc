#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"
#include "common/unreachable.h"
#include "kvfabric/weights.h"
#include "weights/weight_sync_impl.h"

namespace kvfabric::weights {

using Clock = std::chrono::steady_clock;

WeightSync::WeightSync(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

WeightSync::~WeightSync() {
  if (!impl_) return;
  impl_->DropWrites();
  if (impl_->region != nullptr) {
    (void)impl_->engine->UnregisterMemory(impl_->region);
    std::free(impl_->region);
  }
}

Status WeightSync::Create(Engine* engine, const SyncOptions& options, std::unique_ptr<WeightSync>* out) {
  if (options.slots < 1 || options.bucket_bytes == 0 || options.manifest_bytes == 0)
    return Status::InvalidArgument("a weight sync needs at least one slot, and buckets and manifests of some bytes");
  auto impl = std::make_unique<Impl>();
  impl->engine = engine;
  impl->options = options;
  impl->slot_bytes = (kPayloadAt + options.bucket_bytes + options.manifest_bytes + 4095) & ~uint64_t{4095};
  impl->region_bytes = options.slots * impl->slot_bytes + kTailBytes;  // the slots, then the tail
  impl->region = static_cast<uint8_t*>(std::aligned_alloc(4096, impl->region_bytes));
  if (impl->region == nullptr)
    return Status::Unavailable(text::Format("no memory for {} weight-sync slots", impl->region_bytes));
  std::memset(impl->region, 0, impl->region_bytes);
  Status s = engine->RegisterMemory(impl->region, impl->region_bytes);
  if (!s.ok()) {
    std::free(impl->region);
    return s.Annotate("weight-sync slots");
  }
  impl->host = options.host.empty() ? engine->name().substr(0, engine->name().rfind(':')) : options.host;
  impl->rails = options.rails > 0 ? options.rails : std::max<int>(1, static_cast<int>(engine->rails().size()));
  out->reset(new WeightSync(std::move(impl)));
  return Status::OK();
}

void WeightSync::set_seal_hook(std::function<void(uint64_t, uint8_t*, uint64_t)> hook) {
  impl_->seal_hook = std::move(hook);
}

std::vector<int> WeightSync::parents() const { return impl_->plan.parent; }

SyncStats WeightSync::Stats() const { return impl_->stats; }

std::string WeightSync::Describe() const {
  nlohmann::json j = {{"name", impl_->engine->name()},
                      {"host", impl_->host},
                      {"rails", impl_->rails},
                      {"slots", impl_->options.slots},
                      {"bucket_bytes", impl_->options.bucket_bytes},
                      {"manifest_bytes", impl_->options.manifest_bytes},
                      {"slots_addr", reinterpret_cast<uint64_t>(impl_->region)},
                      {"tail_addr", impl_->tail()}};
  return j.dump();
}

Status WeightSync::Connect(const std::vector<std::string>& members, int me) {
  if (me < 0 || me >= static_cast<int>(members.size()))
    return Status::InvalidArgument(text::Format("member {} of a sync of {}", me, members.size()));
  if (members.size() > kMostMembers)
    return Status::InvalidArgument(
        text::Format("a weight sync of {} members: at most {} take part in one", members.size(), kMostMembers));
  impl_->Forget();
  impl_->members.clear();
  for (size_t i = 0; i < members.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(members[i], nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.contains("slots_addr") ||
        !j.contains("tail_addr"))
      return Status::InvalidArgument(text::Format("member {}'s description is not one WeightSync::Describe gave", i));
    if (j.value("slots", 0) != impl_->options.slots ||
        j.value("bucket_bytes", uint64_t{0}) != impl_->options.bucket_bytes ||
        j.value("manifest_bytes", uint64_t{0}) != impl_->options.manifest_bytes)
      return Status::InvalidArgument(text::Format(
          "member {} ({}) has slots {}, buckets of {} bytes and manifests of {}; this one {}, {} and {}: give every "
          "member the same options",
          i, j.value("name", ""), j.value("slots", 0), j.value("bucket_bytes", uint64_t{0}),
          j.value("manifest_bytes", uint64_t{0}), impl_->options.slots, impl_->options.bucket_bytes,
          impl_->options.manifest_bytes));
    impl_->members.push_back({j["name"], j.value("host", ""), j.value("rails", 1), j["slots_addr"], j["tail_addr"]});
  }
  impl_->me = me;
  // The words of the last plan, whatever version they name, are of no use
  // to this one (every member connects again before a version is sent).
  std::memset(reinterpret_cast<void*>(impl_->tail()), 0, kTailBytes);
  std::vector<Member> receivers;
  for (size_t i = 1; i < impl_->members.size(); ++i)
    receivers.push_back({impl_->members[i].host, impl_->members[i].rails});
  // The model's size is not known before the first Send: the plan assumes
  // 64 buckets' worth, where a chain's extra bucket per hop costs little.
  const int64_t total = static_cast<int64_t>(impl_->options.bucket_bytes) * 64;
  impl_->plan = PlanRelays({impl_->members[0].host, impl_->members[0].rails}, receivers, total,
                           static_cast<int64_t>(impl_->options.bucket_bytes));
  impl_->parent = impl_->plan.parent[me];
  impl_->children = impl_->plan.children[me];
  std::vector<int> peers = impl_->children;
  if (impl_->parent >= 0) peers.push_back(impl_->parent);
  if (me > 0 && impl_->parent != 0) peers.push_back(0);  // asked for adoption should the parent die
  for (int p : peers)
    KVF_RETURN_IF_ERROR(impl_->engine->OpenSegment(impl_->members[p].name, &impl_->members[p].segment)
                            .Annotate(text::Format("weight-sync member {}", p)));
  return Status::OK();
}

Status WeightSync::Impl::WriteToChildren(uint64_t bucket, uint64_t bytes, const std::vector<int>& to) {
  // A batch per child: one that dies is given up alone (AwaitWrite).
  for (int c : to.empty() ? children : to) {
    if (members[c].gone) continue;
    TransferRequest r{OpCode::kWrite, slot(bucket), members[c].segment,
                      members[c].slots_addr + (bucket % options.slots) * slot_bytes, bytes};
    r.notice = members[c].adopted ? AdoptedNotice(version, bucket) : DataNotice(bucket);
    Writes w{0, c};
    KVF_RETURN_IF_ERROR(engine->AllocateBatch(1, &w.batch));
    if (const Status s = engine->Submit(w.batch, {r}); !s.ok()) {
      (void)engine->FreeBatch(w.batch);
      return s.Annotate(text::Format("bucket {} of version {} to member {}", bucket, version, c));
    }
    slot_writes[static_cast<int>(bucket % options.slots)].push_back(w);
  }
  return Status::OK();
}

void WeightSync::Impl::FinishWrites(uint64_t bucket) {
  const auto it = slot_writes.find(static_cast<int>(bucket % options.slots));
  if (it == slot_writes.end()) return;
  for (const Writes& w : it->second) {
    const auto waiting = Clock::now();
    const Status s = AwaitWrite(w);
    stats.write_wait_ns += NsSince(waiting);
    if (!s.ok())
      LeaveOut(w.to, text::Format("bucket {} of version {} did not reach it: {}", bucket, version, s.ToString()));
    (void)engine->FreeBatch(w.batch);
  }
  slot_writes.erase(it);
}

Status WeightSync::Impl::AwaitWrite(const Writes& w) {
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  TransferStatus st;
  uint64_t moved = 0;
  auto moving = Clock::now();
  for (;;) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    KVF_RETURN_IF_ERROR(engine->WaitBatch(w.batch, std::clamp<int64_t>(left, 0, ProbeMs()), &st));
    if (st.state != TaskState::kPending) break;
    if (st.transferred_bytes != moved) {  // slices land: slow, not dead
      moved = st.transferred_bytes;
      moving = Clock::now();
    } else if (Clock::now() - moving >= std::chrono::milliseconds(ProbeMs()) && !Probe(w.to)) {
      (void)engine->ExpireBatch(w.batch);
      return Status::NetworkError("nothing of it moved, and the member did not answer a probe");
    }
    if (left <= 0) {
      (void)engine->ExpireBatch(w.batch);
      return Status::Timeout(text::Format("nothing within {} ms", options.timeout_ms));
    }
  }
  return st.state == TaskState::kCompleted ? Status::OK() : st.error;
}

Status WeightSync::Impl::AwaitSlotFree(uint64_t bucket) {
  FinishWrites(bucket);
  return AwaitCredits(bucket);
}

Status WeightSync::Impl::AwaitCredits(uint64_t bucket) {
  auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  for (;;) {
    if (me == 0) ServeAdoptions();
    int late = -1;
    for (int c : children) {
      const uint64_t w = word(c);
      if (!members[c].gone && !(WordOf(w, version) && (w & kCountMask) > bucket)) late = c;
    }
    for (int o : orphans) {  // not adopted yet
      const uint64_t w = members[o].probed;
      if (!members[o].gone && !(WordOf(w, version) && (w & kCountMask) > bucket)) late = o;
    }
    if (late < 0) return Status::OK();
    const std::string what =
        text::Format("the slot of bucket {} given back by member {} ({})", bucket, late, members[late].name);
    bool quiet = false;
    KVF_RETURN_IF_ERROR(WaitSlice(deadline, what, &quiet));
    if (!quiet || Probe(late)) continue;
    LeaveOut(late, text::Format("it did not answer a probe while {} waited for {}", role(), what));
    deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);  // a new plan: its orphans' turn
  }
}

Status WeightSync::Impl::WaitSlice(Clock::time_point deadline, const std::string& what, bool* quiet) {
  const size_t had = stash.size();
  if (Status failed = FailureReported(what); !failed.ok()) return failed;
  if (stash.size() > had) {  // notices came meanwhile (taken into the stash): what is awaited may be among them
    stash.erase(kWordNotice);
    *quiet = false;
    return Status::OK();
  }
  const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  if (left <= 0)
    return Status::Timeout(
        text::Format("{}: nothing within {} ms ({} of version {})", what, options.timeout_ms, role(), version));
  std::vector<uint16_t> got;
  const auto waiting = Clock::now();
  const Status s = engine->WaitNotices(std::min<int64_t>(left, 200), &got);
  stats.notice_wait_ns += NsSince(waiting);
  if (!s.ok() && s.code() != Status::Code::kTimeout) return s.Annotate(what);
  stash.insert(got.begin(), got.end());
  stash.erase(kWordNotice);  // a doorbell: the words say what changed
  *quiet = !s.ok();
  return Status::OK();
}

void WeightSync::Impl::LeaveOut(int i, const std::string& why) {
  if (members[i].gone) return;
  members[i].gone = true;
  KVF_LOG_WARN("weight sync: member {} ({}) is left out from now on: {}", i, members[i].name, why);
  std::erase(orphans, i);
  if (me != 0) return;  // its children ask the sender, which serves them if it still holds what they lack
  for (int c : plan.children[i]) {
    if (members[c].gone || members[c].adopted) continue;
    if (members[c].segment < 0 && !engine->OpenSegment(members[c].name, &members[c].segment).ok()) continue;
    orphans.push_back(c);
  }
}

Status WeightSync::Impl::AwaitSlotsFree(uint64_t end) {
  const uint64_t slots = static_cast<uint64_t>(options.slots);
  for (uint64_t b = end > slots ? end - slots : 0; b < end; ++b) KVF_RETURN_IF_ERROR(AwaitSlotFree(b));
  return Status::OK();
}

void WeightSync::Impl::TellFailure(uint64_t bucket) {
  std::vector<int> neighbours = children;
  if (parent >= 0) neighbours.push_back(parent);
  std::vector<TransferRequest> reqs;
  uint64_t* word = own(kFailureSourceAt);
  *word = bucket;
  for (int n : neighbours) {
    if (members[n].gone) continue;
    TransferRequest r{OpCode::kWrite, word, members[n].segment, members[n].tail_addr, 8};  // its unread first word
    r.notice = FailureNotice(bucket);
    reqs.push_back(r);
  }
  BatchId batch;
  if (reqs.empty() || !engine->AllocateBatch(reqs.size(), &batch).ok()) return;
  TransferStatus st;
  if (engine->Submit(batch, reqs).ok() && engine->WaitBatch(batch, std::min<int64_t>(options.timeout_ms, 2000), &st).ok() &&
      st.state == TaskState::kPending)
    (void)engine->ExpireBatch(batch);
  (void)engine->FreeBatch(batch);
}

void WeightSync::Impl::DropWrites() {
  for (auto& [slot, writes] : slot_writes) {
    for (const Writes& w : writes) {
      (void)AwaitWrite(w);
      (void)engine->FreeBatch(w.batch);
    }
  }
  slot_writes.clear();
}

void WeightSync::Impl::ClearVersion() {
  packer.reset();
  open_bucket = -1;
  entries.clear();
  sent = 0;
  loaded = -1;
  released = 0;
  pieces.clear();
  cursor = 0;
  joined.clear();
  finished = false;
}

void WeightSync::Impl::Forget() {
  DropWrites();
  // After a version that completed, every notice of it was taken (later
  // ones may be early), unless a dead parent's may still come.
  if (unfinished || adopted) {
    stash.clear();
    std::vector<uint16_t> stale;
    (void)engine->TakeNotices(&stale);
  }
  ClearVersion();
  unfinished = false;
  adopted = false;
  orphans.clear();
}

Status WeightSync::Impl::Begin(uint64_t next) {
  if (unfinished)
    return Status::InvalidArgument(text::Format(
        "version {} did not complete on {} (it failed half-way or was left): call Connect on every member "
        "again before version {}",
        version, role(), next));
  ClearVersion();
  unfinished = true;
  version = next;
  return Status::OK();
}

Status WeightSync::Impl::GiveCredit(uint64_t bucket, bool last) {
  released = bucket + 1;
  if (parent < 0) return Status::OK();
  *own(kCreditSourceAt) = MakeWord(version, released);
  const int to = parent;
  // A receiver parent that does not take the credit within a probe's time
  // is dead (a WRITE to a process gone may wait, refused, to its deadline).
  const Status s = WriteWord(to, kCreditSourceAt, kWordNotice,
                             text::Format("giving member {} ({}) the slot of bucket {} back", to, members[to].name,
                                          bucket),
                             to == 0 ? options.timeout_ms : ProbeMs());
  if (s.ok() || !Unreachable(s)) return s;  // a neighbour's failure (ProtocolError) stands
  if (last) {
    KVF_LOG_DEBUG("weight sync: {}", s.ToString());
    return Status::OK();
  }
  if (to == 0) return s;
  return RequestAdoption(released, s);  // the parent died: from the next bucket on, the sender writes
}

Status WeightSync::Impl::WriteWord(int to, uint64_t from, uint16_t notice, const std::string& what,
                                   int64_t deadline_ms) {
  TransferRequest r{OpCode::kWrite, own(from), members[to].segment, members[to].tail_addr + kWordsAt + 8 * me, 8};
  r.notice = notice;
  // Within the sync's deadline, not the engine's (a stopped member would
  // hold this one for KVF_TRANSFER_TIMEOUT_MS).
  if (deadline_ms < 0) deadline_ms = options.timeout_ms;
  BatchId batch;
  KVF_RETURN_IF_ERROR(engine->AllocateBatch(1, &batch).Annotate(what));
  Status s = engine->Submit(batch, {r});
  if (s.ok()) s = AwaitOwnWrite(batch, what, deadline_ms);
  if (!s.ok() && s.code() != Status::Code::kProtocolError) {
    const Status failed = FailureReported(what);  // a neighbour's failure says more than the WRITE's end
    s = failed.ok() ? s.Annotate(what) : failed;
  }
  (void)engine->FreeBatch(batch);
  return s;
}

Status WeightSync::Impl::AwaitOwnWrite(BatchId batch, const std::string& what, int64_t deadline_ms) {
  TransferStatus st;
  const auto deadline = Clock::now() + std::chrono::milliseconds(deadline_ms);
  for (;;) {
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    KVF_RETURN_IF_ERROR(engine->WaitBatch(batch, std::clamp<int64_t>(left, 0, 100), &st));
    if (st.state != TaskState::kPending || left <= 100) break;
    if (Status failed = FailureReported(what); !failed.ok()) {
      (void)engine->ExpireBatch(batch);
      return failed;
    }
  }
  if (st.state == TaskState::kPending) {
    (void)engine->ExpireBatch(batch);
    (void)engine->GetBatchStatus(batch, &st);
  }
  if (st.state == TaskState::kCompleted) return Status::OK();
  return st.error.ok() ? Status::Timeout(text::Format("nothing within {} ms", deadline_ms)) : st.error;
}

Status WeightSync::Impl::FailureReported(const std::string& what) {
  std::vector<uint16_t> got;
  if (engine->TakeNotices(&got).ok()) stash.insert(got.begin(), got.end());
  const auto it = std::find_if(stash.begin(), stash.end(), IsFailureNotice);
  if (it == stash.end()) return Status::OK();
  return Status::ProtocolError(text::Format(
      "{}: a member next to this one failed on bucket {} of version {} and stopped (its own error says why); "
      "{} stops too",
      what, *it - kFailureNotices, version, role()));
}

}  // namespace kvfabric::weights
