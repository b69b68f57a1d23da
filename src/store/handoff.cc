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
      if (!now_in) {
        FreeScratch();
        handed_.clear();
      }
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
    const std::vector<NodeService::CopiedPage> kept = HandBatch(pages, &moved, &first_refusal);
    for (const auto& p : kept) refused.insert(p.key);
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

std::vector<NodeService::CopiedPage> Handoff::HandBatch(const std::vector<NodeService::CopiedPage>& pages,
                                                         Moved* moved, Status* first_refusal) {
  std::vector<std::string> keys;
  for (const auto& p : pages) keys.push_back(p.key);
  std::vector<bool> there;
  client_->ExistsAtHomes(keys, node_->address(), &there);  // never this node's own copy
  // Three kinds: dropped at once (the home has a page from a process that
  // routes there), PUT if absent, PUT over the home's (which may be the
  // older page this node handed over before this one was written here).
  std::vector<size_t> absent, over;
  std::vector<NodeService::CopiedPage> done, kept;
  for (size_t i = 0; i < pages.size(); ++i) {
    if (!there[i]) {
      absent.push_back(i);
    } else if (const auto h = handed_.find(pages[i].key); h != handed_.end() && h->second != pages[i].generation) {
      over.push_back(i);
    } else {
      done.push_back(pages[i]);
      ++moved->present;
    }
  }
  for (const auto& [kind, which] : {std::pair{PutRequest::HandOver::kIfAbsent, &absent},
                                    std::pair{PutRequest::HandOver::kOver, &over}}) {
    if (which->empty()) continue;
    std::vector<std::string> put_keys;
    std::vector<std::vector<StoreBuffer>> buffers;
    for (size_t i : *which) {
      put_keys.push_back(pages[i].key);
      buffers.push_back({StoreBuffer{scratch_.get() + pages[i].at, pages[i].length}});
    }
    std::vector<Status> put;
    client_->HandOverPut(put_keys, buffers, node_->address(), kind, &put);
    for (size_t j = 0; j < which->size(); ++j) {
      const NodeService::CopiedPage& page = pages[(*which)[j]];
      if (put[j].ok()) {
        done.push_back(page);
        handed_[page.key] = page.generation;
        ++moved->handed;
        continue;
      }
      if (first_refusal->ok()) *first_refusal = put[j];
      kept.push_back(page);
    }
  }
  node_->RemoveCopied(done);
  return kept;
}

}  // namespace kvfabric::store
