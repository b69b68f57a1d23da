#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"
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
  impl->region_bytes = options.slots * impl->slot_bytes + 4096;  // the slots, then the credit words
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
                      {"credit_addr", impl_->credit_word()}};
  return j.dump();
}

Status WeightSync::Connect(const std::vector<std::string>& members, int me) {
  if (me < 0 || me >= static_cast<int>(members.size()))
    return Status::InvalidArgument(text::Format("member {} of a sync of {}", me, members.size()));
  impl_->Forget();
  impl_->members.clear();
  for (size_t i = 0; i < members.size(); ++i) {
    const nlohmann::json j = nlohmann::json::parse(members[i], nullptr, false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.contains("slots_addr"))
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
    impl_->members.push_back({j["name"], j.value("host", ""), j.value("rails", 1), j["slots_addr"], j["credit_addr"]});
  }
  impl_->me = me;
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
  for (int p : peers)
    KVF_RETURN_IF_ERROR(impl_->engine->OpenSegment(impl_->members[p].name, &impl_->members[p].segment)
                            .Annotate(text::Format("weight-sync member {}", p)));
  return Status::OK();
}

Status WeightSync::Impl::AwaitNotice(uint16_t notice, Clock::time_point deadline, const std::string& what) {
  for (;;) {
    if (auto it = stash.find(notice); it != stash.end()) {
      stash.erase(it);
      return Status::OK();
    }
    if (std::find_if(stash.begin(), stash.end(), IsFailureNotice) != stash.end()) return FailureReported(what);
    const int64_t left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    std::vector<uint16_t> got;
    const auto waiting = Clock::now();
    const Status s = left > 0 ? engine->WaitNotices(left, &got) : Status::Timeout("");
    stats.notice_wait_ns += NsSince(waiting);
    if (!s.ok() && s.code() != Status::Code::kTimeout) return s.Annotate(what);
    if (!s.ok())
      return Status::Timeout(
          text::Format("{}: nothing within {} ms ({} of version {})", what, options.timeout_ms, role(), version));
    stash.insert(got.begin(), got.end());
  }
}

Status WeightSync::Impl::WriteToChildren(uint64_t bucket, uint64_t bytes) {
  Writes w;
  std::vector<TransferRequest> reqs;
  for (int c : children) {
    if (members[c].gone) continue;
    TransferRequest r{OpCode::kWrite, slot(bucket), members[c].segment,
                      members[c].slots_addr + (bucket % options.slots) * slot_bytes, bytes};
    r.notice = DataNotice(bucket);
    reqs.push_back(r);
    w.to.push_back(c);
  }
  if (reqs.empty()) return Status::OK();
  KVF_RETURN_IF_ERROR(engine->AllocateBatch(reqs.size(), &w.batch));
  const Status s = engine->Submit(w.batch, reqs);
  if (!s.ok()) {
    (void)engine->FreeBatch(w.batch);
    return s.Annotate(text::Format("bucket {} of version {}", bucket, version));
  }
  slot_writes[static_cast<int>(bucket % options.slots)] = std::move(w);
  return Status::OK();
}

void WeightSync::Impl::FinishWrites(uint64_t bucket) {
  const auto it = slot_writes.find(static_cast<int>(bucket % options.slots));
  if (it == slot_writes.end()) return;
  TransferStatus all;
  const auto waiting = Clock::now();
  (void)engine->WaitBatch(it->second.batch, options.timeout_ms, &all);
  stats.write_wait_ns += NsSince(waiting);
  for (size_t i = 0; i < it->second.to.size(); ++i) {
    TransferStatus st;
    if (engine->GetTaskStatus(it->second.batch, i, &st).ok() && st.state != TaskState::kCompleted) {
      Peer& child = members[it->second.to[i]];
      child.gone = true;
      KVF_LOG_WARN("weight sync: bucket {} of version {} did not reach member {} ({}): {}; it is left out from now",
                   bucket, version, it->second.to[i], child.name, st.error.ToString());
    }
  }
  (void)engine->FreeBatch(it->second.batch);
  slot_writes.erase(it);
}

Status WeightSync::Impl::AwaitSlotFree(uint64_t bucket) {
  FinishWrites(bucket);
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
  for (int c : children) {
    if (members[c].gone) continue;
    // One credit per child: AwaitNotice takes them one at a time.
    const Status s =
        AwaitNotice(CreditNotice(bucket), deadline,
                    text::Format("the slot of bucket {} given back by member {} ({})", bucket, c, members[c].name));
    if (!s.ok()) return s;
  }
  return Status::OK();
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
  uint64_t* word = reinterpret_cast<uint64_t*>(credit_word() + 16);
  *word = bucket;
  for (int n : neighbours) {
    if (members[n].gone) continue;
    TransferRequest r{OpCode::kWrite, word, members[n].segment, members[n].credit_addr, 8};
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
  for (auto& [slot, w] : slot_writes) {
    TransferStatus st;
    (void)engine->WaitBatch(w.batch, options.timeout_ms, &st);
    (void)engine->FreeBatch(w.batch);
  }
  slot_writes.clear();
}

void WeightSync::Impl::ClearVersion() {
  packer.reset();
  open_bucket = -1;
  entries.clear();
  sent = 0;
  loaded = -1;
  pieces.clear();
  cursor = 0;
  joined.clear();
  finished = false;
}

void WeightSync::Impl::Forget() {
  DropWrites();
  if (unfinished) {  // after a version that completed, every notice of it was taken; later ones may be early
    stash.clear();
    std::vector<uint16_t> stale;
    (void)engine->TakeNotices(&stale);
  }
  ClearVersion();
  unfinished = false;
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

Status WeightSync::Impl::GiveCredit(uint64_t bucket) {
  if (parent < 0) return Status::OK();
  uint64_t* word = reinterpret_cast<uint64_t*>(credit_word() + 8);
  *word = bucket;
  TransferRequest r{OpCode::kWrite, word, members[parent].segment, members[parent].credit_addr, 8};
  r.notice = CreditNotice(bucket);
  const std::string what =
      text::Format("giving member {} ({}) the slot of bucket {} back", parent, members[parent].name, bucket);
  // Within the sync's deadline, not the engine's (a stopped parent would
  // hold this member for KVF_TRANSFER_TIMEOUT_MS).
  BatchId batch;
  KVF_RETURN_IF_ERROR(engine->AllocateBatch(1, &batch).Annotate(what));
  Status s = engine->Submit(batch, {r});
  if (s.ok()) s = AwaitOwnWrite(batch, what);
  if (!s.ok() && s.code() != Status::Code::kProtocolError) {
    const Status failed = FailureReported(what);  // a parent's failure says more than the WRITE's end
    s = failed.ok() ? s.Annotate(what) : failed;
  }
  (void)engine->FreeBatch(batch);
  return s;
}

Status WeightSync::Impl::AwaitOwnWrite(BatchId batch, const std::string& what) {
  TransferStatus st;
  const auto deadline = Clock::now() + std::chrono::milliseconds(options.timeout_ms);
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
  return st.error.ok() ? Status::Timeout(text::Format("nothing within {} ms", options.timeout_ms)) : st.error;
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
