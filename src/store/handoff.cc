#include "store/handoff.h"

#include <algorithm>
#include <chrono>
#include <new>
#include <string>
#include <unordered_set>
#include <vector>

#include "common/log.h"

namespace kvfabric::store {
namespace {
using Clock = std::chrono::steady_clock;
constexpr uint64_t kBatchBytes = 16ull << 20;  // pages copied out per batch, unless one page is larger
}  // namespace

Handoff::Handoff(Engine* engine, NodeService* node, StoreClient* client, MemberView* members,
                 const Settings& settings)
    : engine_(engine), node_(node), client_(client), members_(members), settings_(settings) {}

Handoff::~Handoff() { Stop(); }

void Handoff::Start() {
  thread_ = std::thread([this] { Run(); });
}

void Handoff::Stop() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  FreeScratch();
}

void Handoff::Run() {
  const auto window = std::chrono::milliseconds(settings_.store_handoff_ms);
  bool in_window = false;
  std::unique_lock<std::mutex> g(mu_);
  while (!cv_.wait_for(g, std::chrono::milliseconds(settings_.store_membership_refresh_ms), [&] { return stopping_; })) {
    g.unlock();
    const bool now_in = members_->Current()->AnyRecent(Clock::now(), window);
    if (now_in || in_window) {
      const Moved m = Pass(!now_in);
      if (m.handed + m.present > 0)
        KVF_LOG_INFO("store node {}: handed {} page(s) over to their new homes ({} were there already, {} refused "
                     "and kept)", node_->address(), m.handed + m.present, m.present, m.kept);
      if (!now_in) FreeScratch();
    }
    in_window = now_in;
    g.lock();
  }
}

Status Handoff::EnsureScratch() {
  if (scratch_) return Status::OK();
  const uint64_t bytes = std::max<uint64_t>(kBatchBytes, static_cast<uint64_t>(settings_.store_max_page_bytes));
  std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[bytes]);
  if (!buffer) return Status::Unavailable("no memory for " + std::to_string(bytes) + " bytes of pages to hand over");
  KVF_RETURN_IF_ERROR(engine_->RegisterMemory(buffer.get(), bytes, "cpu"));
  scratch_ = std::move(buffer);
  scratch_bytes_ = bytes;
  return Status::OK();
}

void Handoff::FreeScratch() {
  if (!scratch_) return;
  (void)engine_->UnregisterMemory(scratch_.get());
  scratch_.reset();
  scratch_bytes_ = 0;
}

bool Handoff::HoldsCopy(const Placement& placement, std::string_view key, size_t me) const {
  if (settings_.store_max_copies <= 1) return placement.Home(key) == me;
  const std::vector<size_t> ranked = placement.Place(key, static_cast<size_t>(settings_.store_max_copies));
  return std::find(ranked.begin(), ranked.end(), me) != ranked.end();
}

Handoff::Moved Handoff::Pass(bool last) {
  Moved moved;
  const auto snap = members_->Current();
  const auto& members = snap->placement.members();
  const auto self = std::find_if(members.begin(), members.end(), [&](const Member& m) { return m.name == node_->address(); });
  if (self == members.end()) return moved;
  const size_t me = static_cast<size_t>(self - members.begin());
  if (Status s = EnsureScratch(); !s.ok()) {
    KVF_LOG_WARN("store node {}: cannot hand pages over to their new homes: {}", node_->address(), s.ToString());
    return moved;
  }
  std::unordered_set<std::string> refused;  // this pass: not copied again
  Status first_refusal;
  for (;;) {
    const std::vector<NodeService::CopiedPage> pages = node_->CopyPagesHomedElsewhere(
        [&](std::string_view key) { return !HoldsCopy(snap->placement, key, me) && !refused.contains(std::string(key)); },
        scratch_.get(), scratch_bytes_);
    if (pages.empty()) break;
    std::vector<std::string> keys;
    for (const auto& p : pages) keys.push_back(p.key);
    std::vector<bool> there;
    client_->ExistsAtHomes(keys, node_->address(), &there);  // never this node's own copy
    std::vector<std::string> put_keys;
    std::vector<std::vector<StoreBuffer>> buffers;
    std::vector<NodeService::CopiedPage> done, kept;
    for (size_t i = 0; i < pages.size(); ++i) {
      if (there[i]) {
        done.push_back(pages[i]);
        ++moved.present;
        continue;
      }
      put_keys.push_back(pages[i].key);
      buffers.push_back({StoreBuffer{scratch_.get() + pages[i].at, pages[i].length}});
    }
    std::vector<Status> put;
    if (!put_keys.empty()) client_->PutIfAbsent(put_keys, buffers, node_->address(), &put);
    for (size_t i = 0, j = 0; i < pages.size(); ++i) {
      if (there[i]) continue;
      const Status& s = put[j++];
      if (s.ok()) {
        done.push_back(pages[i]);
        ++moved.handed;
        continue;
      }
      if (first_refusal.ok()) first_refusal = s;
      refused.insert(pages[i].key);
      kept.push_back(pages[i]);
    }
    node_->RemoveCopied(done);
    moved.kept += kept.size();
    std::lock_guard<std::mutex> g(mu_);
    if (stopping_) break;
  }
  if (!first_refusal.ok())
    KVF_LOG_WARN("store node {}: {} page(s) could not be handed over to their new homes ({}); {}", node_->address(),
                 moved.kept, first_refusal.ToString(),
                 last ? "they stay here, read by processes whose view places them here, evicted in their turn"
                      : "tried again at the next membership refresh");
  return moved;
}

}  // namespace kvfabric::store
