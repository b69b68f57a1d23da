#include "store/client/store_client.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>

#include "common/cpu_relax.h"
#include "common/log.h"
#include "store/wire/checksum.h"
#include "store/wire/region_versions.h"
#include "store/client/verify_overlap.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

// How a GET waits for its pages to land: it yields the core for `spin`
// after the last page that landed (a lone page lands within it, and the
// next of a batch sooner), then sleeps in short steps.
class LandingPace {
 public:
  explicit LandingPace(std::chrono::microseconds spin) : spin_(spin), until_(Clock::now() + spin) {}
  void Landed() { until_ = Clock::now() + spin_; }
  void Pause() const {
    if (Clock::now() < until_) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }

 private:
  const std::chrono::microseconds spin_;
  Clock::time_point until_;
};

std::vector<std::string_view> KeysOf(const std::vector<std::string>& keys, const std::vector<size_t>& which) {
  std::vector<std::string_view> out;
  out.reserve(which.size());
  for (size_t i : which) out.push_back(keys[i]);
  return out;
}

// Each key's own check (CheckKey) as its first result.
std::vector<Status> CheckKeys(const std::vector<std::string>& keys) {
  std::vector<Status> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(CheckKey(k));
  return out;
}

uint64_t TotalBytes(const std::vector<StoreBuffer>& buffers) {
  uint64_t n = 0;
  for (const StoreBuffer& b : buffers) n += b.length;
  return n;
}

// The checksum of the first `length` bytes of a key's buffers, in order.
Checksum ChecksumOfBuffers(const std::vector<StoreBuffer>& buffers, uint64_t length) {
  std::vector<ByteRange> pieces;
  pieces.reserve(buffers.size());
  for (const StoreBuffer& b : buffers) pieces.push_back({b.addr, b.length});
  return ChecksumOf(pieces, length);
}

// Whether the buffers a page was read into hold what its PUT stored: the
// checksum of its bytes against the one its home keeps with it.
bool LandedAsStored(const std::vector<StoreBuffer>& buffers, const Location& where) {
  return ChecksumOfBuffers(buffers, where.length) == where.checksum;
}

// Whether two answers name the same page: its place, length, generation
// and bytes (not its region's version, which other pages move).
bool SamePage(const Location& a, const Location& b) {
  return a.found == b.found && a.addr == b.addr && a.length == b.length && a.generation == b.generation &&
         a.checksum == b.checksum;
}

}  // namespace

// Shared with the callbacks: a reply that comes after the caller stopped
// waiting is written here, never into the caller's frame.
struct StoreClient::Fanout {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::pair<Status, std::string>> got;
  std::deque<size_t> arrived;  // calls answered and not taken yet
  std::vector<bool> taken;
};

void StoreClient::PageRead::TakeSum(const std::vector<StoreBuffer>& buffers) {
  sum = LandedAsStored(buffers, where) ? Sum::kMatches : Sum::kDiffers;
}

StoreClient::StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
                         const LocalNode* self)
    : engine_(engine),
      settings_(settings),
      control_(control),
      members_(members),
      self_(self != nullptr ? std::optional<LocalNode>(*self) : std::nullopt),
      maps_(settings.store_share_pools),
      runner_(engine, &maps_),
      locations_(static_cast<size_t>(settings.store_location_cache)),
      scratch_(engine, kVersionsReadBytes, kScratchSlots),
      verify_short_as_they_land_(settings.store_verify && VerifyAsPageLands(settings.store_verify_overlap, engine->rails(),
                                                                           kLandingPiece, kLandingPiece)),
      verify_long_as_they_land_(settings.store_verify && VerifyAsPageLands(settings.store_verify_overlap,
                                                                          engine->rails(), kLandingPiece + 1,
                                                                          kLandingPiece)) {}

StoreClient::~StoreClient() {
  // READs that outlived their call may still write the bounce buffer or a
  // scratch slot: both are leaked rather than freed under them. Such READs
  // go to a member that died (the engine ends them only at
  // KVF_TRANSFER_TIMEOUT_MS, 30 s by default): a close waits one store
  // deadline for them, not the transfer timeout, so that a framework
  // detaching its store is not held up by a dead node.
  if (!runner_.Drain(net::DeadlineIn(std::min(settings_.transfer_timeout_ms, settings_.store_deadline_ms) + 100))) {
    KVF_LOG_WARN("store client: transfers still pending at close (to a member that died?); their scratch and "
                 "bounce memory ({} bytes) stays allocated until the process ends",
                 bounce_ ? settings_.store_bounce_bytes : 0);
    scratch_.Leak();
    (void)bounce_.release();
    return;
  }
  if (bounce_) (void)engine_->UnregisterMemory(bounce_.get());
}

std::vector<StoreClient::NodeCall> StoreClient::GroupByHome(const std::vector<std::string>& keys,
                                                            std::vector<Status>* results, Route route) const {
  std::vector<size_t> all(keys.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  return GroupByHome(keys, all, results, route);
}

std::vector<StoreClient::NodeCall> StoreClient::GroupByHome(const std::vector<std::string>& keys,
                                                            const std::vector<size_t>& which,
                                                            std::vector<Status>* results, Route route) const {
  const auto snap = members_->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t i : which) {
    if (!(*results)[i].ok()) continue;
    size_t home = snap->placement.Home(keys[i]);
    if (route.kind == Route::Kind::kRanked && route.rank > 0 && home < snap->nodes.size()) {
      const std::vector<size_t> ranked = snap->placement.Place(keys[i], route.rank + 1);
      if (ranked.size() <= route.rank) {
        (*results)[i] = Status::Unavailable("store: key '" + keys[i] + "' asks for copy " +
                                            std::to_string(route.rank + 1) + " but only " +
                                            std::to_string(ranked.size()) + " member(s) with a pool are reachable");
        continue;
      }
      home = ranked[route.rank];
    }
    if (route.kind == Route::Kind::kNamed) {
      const std::string& name = (*route.named)[i];
      const auto named = std::find_if(snap->nodes.begin(), snap->nodes.end(),
                                      [&](const auto& node) { return node->name == name; });
      if (named == snap->nodes.end()) {
        (*results)[i] = Status::Unavailable("store: member " + name + " of key '" + keys[i] + "' is not reachable");
        continue;
      }
      home = static_cast<size_t>(named - snap->nodes.begin());
    }
    if (route == Route::PreviousHome() && home < snap->nodes.size()) {
      home = snap->PreviousHome(keys[i], home);
      if (home >= snap->nodes.size()) {  // the members changed since the home was asked
        (*results)[i] = Absent(keys[i]);
        continue;
      }
    }
    if (home >= snap->nodes.size()) {
      (*results)[i] = Status::Unavailable("store: no member with a pool is reachable: " + snap->why_none);
      continue;
    }
    calls[home].keys.push_back(i);
  }
  if (maps_for_.exchange(snap.get(), std::memory_order_relaxed) != snap.get()) {
    std::vector<SegmentHandle> live;
    for (const auto& node : snap->nodes) live.push_back(node->segment);
    maps_.Keep(live);
  }
  std::vector<NodeCall> used;
  for (size_t n = 0; n < calls.size(); ++n) {
    if (calls[n].keys.empty()) continue;
    calls[n].node = snap->nodes[n];
    maps_.Attach(calls[n].node->name, calls[n].node->info, calls[n].node->segment);
    used.push_back(std::move(calls[n]));
  }
  return used;
}

std::vector<size_t> StoreClient::TakeCallTo(std::vector<NodeCall>* calls, const std::string* member) {
  std::vector<size_t> keys;
  if (member == nullptr) return keys;
  std::erase_if(*calls, [&](NodeCall& call) {
    if (call.node->name != *member) return false;
    keys = std::move(call.keys);
    return true;
  });
  return keys;
}

std::shared_ptr<StoreClient::Fanout> StoreClient::Send(std::vector<NodeCall>* calls, net::Deadline deadline) {
  auto fanout = std::make_shared<Fanout>();
  fanout->got.resize(calls->size());
  fanout->taken.resize(calls->size(), false);
  std::vector<ControlClient::Request> remote;
  remote.reserve(calls->size());
  for (size_t c = 0; c < calls->size(); ++c) {
    NodeCall& call = (*calls)[c];
    auto done = [fanout, c](Status s, std::string reply) {
      std::lock_guard<std::mutex> g(fanout->mu);
      fanout->got[c] = {std::move(s), std::move(reply)};
      fanout->arrived.push_back(c);
      fanout->cv.notify_all();
    };
    Add(counters_.control_calls, 1);
    if (self_ && call.node->name == self_->address)
      self_->handle(std::move(call.request), std::move(done));
    else
      remote.push_back({call.node->name, std::move(call.request), std::move(done)});
  }
  control_->CallAll(std::move(remote), deadline);
  return fanout;
}

bool StoreClient::Next(Fanout* fanout, std::vector<NodeCall>* calls, net::Deadline until, Wait wait, size_t* which,
                       std::vector<size_t>* unanswered) {
  std::unique_lock<std::mutex> g(fanout->mu);
  if (fanout->arrived.empty()) {
    const auto stop = std::min(until, Clock::now() + PollTime(wait));
    while (fanout->arrived.empty() && Clock::now() < stop) {
      g.unlock();
      for (int i = 0; i < 64; ++i) CpuRelax();
      g.lock();
    }
  }
  if (fanout->cv.wait_until(g, until, [&] { return !fanout->arrived.empty(); })) {
    *which = fanout->arrived.front();
    fanout->arrived.pop_front();
    fanout->taken[*which] = true;
    auto& [status, reply] = fanout->got[*which];
    Status s = std::move(status);
    std::string r = std::move(reply);
    g.unlock();
    Settle(&(*calls)[*which], std::move(s), std::move(r));
    return true;
  }
  for (size_t c = 0; c < calls->size(); ++c) {
    if (fanout->taken[c]) continue;
    fanout->taken[c] = true;  // a reply coming later is dropped with the fanout
    unanswered->push_back(c);
  }
  g.unlock();
  for (size_t c : *unanswered) Settle(&(*calls)[c], Status::Timeout("no answer in time"), {});
  return false;
}

bool StoreClient::Answered(Fanout* fanout) {
  std::lock_guard<std::mutex> g(fanout->mu);
  return !fanout->arrived.empty();
}

void StoreClient::Settle(NodeCall* call, Status status, std::string reply) {
  call->status = std::move(status);
  call->reply = std::move(reply);
  if (call->status.ok()) return;
  Add(counters_.control_failures, 1);
  call->status = call->status.Annotate("store member " + call->node->name);
  MarkDownIfUnreachable(call->node->name, call->status);
}

std::chrono::microseconds StoreClient::PollTime(Wait wait) const {
  // Polling pays only when no other call of this process needs the core.
  if (wait == Wait::kSleep || active_calls_.load(std::memory_order_relaxed) != 1) return std::chrono::microseconds(0);
  return std::chrono::microseconds(settings_.store_spin_us);
}

void StoreClient::MarkDownIfUnreachable(const std::string& member, const Status& failure) {
  const auto code = failure.code();
  if (code == Status::Code::kNetworkError || code == Status::Code::kTimeout || code == Status::Code::kFabricError)
    members_->MarkDown(member, failure);
}

void StoreClient::CallNodes(std::vector<NodeCall>* calls, net::Deadline deadline, Wait wait) {
  auto fanout = Send(calls, deadline);
  // The control client ends every call by its deadline; this node's own
  // puts may run a little past it.
  const auto until = deadline + std::chrono::seconds(1);
  size_t which = 0;
  std::vector<size_t> unanswered;
  for (size_t n = 0; n < calls->size(); ++n)
    if (!Next(fanout.get(), calls, until, wait, &which, &unanswered)) break;
}

void StoreClient::CheckBuffers(const std::vector<std::string>& keys,
                               const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                               std::vector<Memory>* memory) const {
  *results = CheckKeys(keys);
  memory->assign(keys.size(), Memory::kHost);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status& r = (*results)[i];
    if (r.ok() && buffers[i].empty()) r = Status::InvalidArgument("store: key '" + keys[i] + "' has no buffers");
    for (const StoreBuffer& b : buffers[i]) {
      if (!r.ok()) break;
      if (b.addr == nullptr || b.length == 0) {
        r = Status::InvalidArgument("store: key '" + keys[i] + "' has a null or empty buffer");
        break;
      }
      MemoryFacts facts;
      if (Status s = engine_->DescribeMemory(b.addr, b.length, &facts); !s.ok()) {
        r = s.code() == Status::Code::kNotFound
                ? Status::InvalidArgument("store: a buffer of key '" + keys[i] + "': " + s.message())
                : s;
        break;
      }
      if (facts.device)
        (*memory)[i] = std::max((*memory)[i], facts.remote_access ? Memory::kDevice : Memory::kDeviceLocal);
    }
  }
}

void StoreClient::Put(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results, uint32_t copies) {
  const CallScope scope(&active_calls_);
  SweepCredits();
  const std::shared_ptr<const MemberSnapshot> routed = members_->Current();  // see RemoveFromPreviousHomes
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  std::vector<size_t> direct, bounced;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*results)[i].ok()) continue;
    if (TotalBytes(buffers[i]) > static_cast<uint64_t>(settings_.store_max_page_bytes))
      (*results)[i] = Status::InvalidArgument("store: the page of key '" + keys[i] +
                                              "' is larger than KVF_STORE_MAX_PAGE_BYTES");
    else if (memory[i] == Memory::kDeviceLocal && copies > 1)
      (*results)[i] = Status::InvalidArgument("store: key '" + keys[i] + "' asks for " + std::to_string(copies) +
                                              " copies of GPU memory no rail exposes to peers; put it from host "
                                              "memory, or with 1 copy");
    else (memory[i] == Memory::kDeviceLocal ? bounced : direct).push_back(i);
  }
  if (!direct.empty()) PutCopies(keys, buffers, memory, direct, copies, results);
  if (!bounced.empty()) PutBounced(keys, buffers, bounced, results);
  RemoveFromPreviousHomes(keys, *results, routed, copies);
  if (copies < settings_.store_max_copies) RemoveCopiesPast(keys, *results, copies);
  Add(counters_.put_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) Add(counters_.put_bytes, TotalBytes(buffers[i]));
    else Add(counters_.put_failures, 1);
  }
}

void StoreClient::PutFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                          const std::vector<Memory>& memory, const std::vector<size_t>& which,
                          std::vector<Status>* results, bool grants, Route route) {
  if (settings_.store_put_mode == "pull") return PullFrom(keys, sources, which, results, false, nullptr, route);
  grants = grants && settings_.store_put_grants;
  std::vector<NodeCall> calls = GroupByHome(keys, which, results, route);
  if (calls.empty()) return;
  const int64_t deadline_ms = settings_.store_deadline_ms;
  const net::Deadline deadline = net::DeadlineIn(deadline_ms);
  // The WRITEs end early enough to leave the commits their time.
  const net::Deadline writes_by = deadline - std::chrono::milliseconds(std::min<int64_t>(deadline_ms / 5, 500));
  // A home that granted slots ahead which fit its pages is written at once;
  // the others are asked for slots first.
  std::vector<Push> pushes(calls.size());
  std::vector<size_t> asking;  // the calls that reserve, by their index in `reserving`
  std::vector<NodeCall> reserving;
  for (size_t c = 0; c < calls.size(); ++c) {
    if (grants && TakeCredit(calls[c], sources, &pushes[c])) continue;
    ReserveRequest reserve;
    reserve.budget_ms = static_cast<uint32_t>(deadline_ms);
    for (size_t i : calls[c].keys) reserve.items.push_back({keys[i], TotalBytes(sources[i])});
    reserving.push_back(NodeCall{calls[c].node, calls[c].keys, EncodeReserve(reserve), {}, {}});
    asking.push_back(c);
  }
  // Each home's WRITEs start as soon as its slots come, and each home's
  // commit goes as soon as its WRITEs end: one home's round trips overlap
  // the others' bytes.
  std::shared_ptr<Fanout> reserves = reserving.empty() ? nullptr : Send(&reserving, writes_by);
  // The writer checksums its pages in host memory (the home then commits
  // them at once; it checksums GPU pages from its slots itself), first
  // while it waits for the reservations, then while the WRITEs move: on
  // few cores the hashing then takes the idle round trip instead of the
  // copies' CPU (measured, shm on 2 vCPUs: see docs/store.md).
  std::vector<std::optional<Checksum>> sums(keys.size());
  std::vector<size_t> to_sum;
  for (const NodeCall& call : calls)
    for (size_t i : call.keys)
      if (memory[i] == Memory::kHost) to_sum.push_back(i);
  size_t summed = 0;
  const auto sum_next = [&] {
    const size_t i = to_sum[summed++];
    sums[i] = ChecksumOfBuffers(sources[i], TotalBytes(sources[i]));
  };
  std::vector<size_t> started;  // the calls whose reservations need a commit, in the order they started
  for (size_t c = 0; c < calls.size(); ++c) {
    if (!pushes[c].granted) continue;
    StartWrites(keys, sources, memory, calls[c], &pushes[c], results);
    started.push_back(c);
  }
  size_t r = 0;
  std::vector<size_t> unanswered;
  for (size_t n = 0; n < reserving.size(); ++n) {
    while (summed < to_sum.size() && !Answered(reserves.get())) sum_next();
    if (!Next(reserves.get(), &reserving, writes_by + std::chrono::seconds(1), Wait::kSleep, &r, &unanswered)) break;
    NodeCall& call = calls[asking[r]];
    call.status = std::move(reserving[r].status);
    call.reply = std::move(reserving[r].reply);
    if (StartPush(keys, sources, memory, writes_by, &call, &pushes[asking[r]], results))
      started.push_back(asking[r]);
  }
  while (summed < to_sum.size()) sum_next();
  for (size_t u : unanswered) {
    for (size_t i : reserving[u].keys) (*results)[i] = reserving[u].status;
  }
  std::vector<std::vector<NodeCall>> commits(started.size());
  std::vector<std::shared_ptr<Fanout>> replies(started.size());
  for (size_t k = 0; k < started.size(); ++k) {
    NodeCall& call = calls[started[k]];
    Push& push = pushes[started[k]];
    runner_.Finish(&push.flight, writes_by, &push.wrote);
    // The commit says which slots were written: the home frees the slots
    // no WRITE went to and holds back those whose WRITE failed.
    push.commit = CommitRequest{push.slots.ticket, std::vector<CommitItem>(push.slots.statuses.size()), {}};
    for (CommitItem& item : push.commit.items)
      item.state = push.granted ? CommitState::kUnused : CommitState::kNotWritten;
    for (size_t j = 0; j < call.keys.size(); ++j) {
      const size_t i = call.keys[j];
      if (push.group_of[j] == SIZE_MAX) continue;
      const Status& w = push.wrote[push.group_of[j]];
      CommitItem& item = push.commit.items[push.slot_of[j]];
      item.state = w.ok() ? CommitState::kWritten : CommitState::kNotWritten;
      if (push.granted) item.key = keys[i];
      if (sums[i]) {
        item.has_checksum = true;
        item.checksum = *sums[i];
      }
      if (!w.ok()) {
        (*results)[i] = w.Annotate("store: writing the page of '" + keys[i] + "' to " + call.node->name);
        // A granted slot of a home that restarted since is in its old
        // engine: its commit says so (below), and the key is put again.
        if (!push.granted) MarkDownIfUnreachable(call.node->name, w);
      }
    }
    if (grants) {
      push.commit.grant = GrantFor(call, sources);
      push.losses = control_->Losses(call.node->name);  // before the commit goes: see Credit::losses
    }
    commits[k].push_back(NodeCall{call.node, call.keys, EncodeCommit(push.commit), {}, {}});
    replies[k] = Send(&commits[k], deadline);
  }
  std::vector<size_t> again;       // keys whose granted slots their home no longer knew
  std::vector<std::string> gone_from;  // and those homes
  for (size_t k = 0; k < started.size(); ++k) {
    std::vector<size_t> late;
    size_t one = 0;
    Next(replies[k].get(), &commits[k], deadline + std::chrono::seconds(1), Wait::kSleep, &one, &late);
    const NodeCall& call = commits[k][0];
    const Push& push = pushes[started[k]];
    CommitReply reply;
    Status s = call.status;
    if (s.ok()) s = DecodeCommitReply(call.reply, push.commit.items.size(), &reply);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      if (push.group_of[j] == SIZE_MAX) continue;
      const size_t i = call.keys[j];
      if (push.granted && s.code() == Status::Code::kNotFound) {
        again.push_back(i);
        gone_from.push_back(call.node->name);
        continue;
      }
      if (push.commit.items[push.slot_of[j]].written()) (*results)[i] = s.ok() ? reply.statuses[push.slot_of[j]] : s;
      // Where the page lies now, as a lookup would say: this process's
      // GETs of it read at once (a writer that reads its pages back, as
      // HiCache does, asks its home nothing).
      if ((*results)[i].ok() && !reply.pages.empty() && reply.pages[push.slot_of[j]].found)
        locations_.Put(keys[i], CachedLocation{call.node->name, call.node->info.epoch, reply.pages[push.slot_of[j]]});
      if (push.granted && (*results)[i].ok()) Add(counters_.put_granted, 1);
    }
    if (s.ok() && reply.granted.ticket != 0) {
      Credit credit{call.node, reply.granted.ticket, reply.granted.epoch, push.losses,
                    std::move(reply.granted.addrs),
                    std::vector<uint64_t>(push.commit.grant.begin(),
                                          push.commit.grant.begin() + reply.granted.statuses.size()),
                    Clock::now() + std::chrono::milliseconds(std::min(kGrantUsableMs, deadline_ms))};
      // A grant short of this call's own pages (the home's pool is small
      // for such batches) would fit no PUT like it: back at once.
      if (credit.addrs.size() < call.keys.size()) ReleaseCredits({std::move(credit)}, Clock::now());
      else KeepCredit(std::move(credit));
    }
  }
  // Granted slots a home no longer holds (it restarted, or they outlived
  // their time): those keys go the usual way, reserved first.
  if (again.empty()) return;
  const bool in_time = Clock::now() + LateMargin() < writes_by;
  for (size_t a = 0; a < again.size(); ++a) {
    const size_t i = again[a];
    (*results)[i] = in_time ? Status::OK()  // GroupByHome takes the keys whose results are OK
                            : Status::Unavailable("store: the slots that store member " + gone_from[a] +
                                                  " granted for '" + keys[i] +
                                                  "' were gone (it restarted, or they outlived their time), and no "
                                                  "time was left to put it again");
  }
  if (in_time) PutFrom(keys, sources, memory, again, results, false, route);
}

void StoreClient::TakeStaleLocked(const std::string& home, std::vector<Credit>* held,
                                  const std::function<bool(const Credit&)>& stale, std::vector<Credit>* back) {
  const uint64_t losses = control_->Losses(home);
  for (Credit& c : *held)
    if (stale(c) && c.losses == losses) back->push_back(c);
  std::erase_if(*held, stale);
}

bool StoreClient::TakeCredit(const NodeCall& call, const std::vector<std::vector<StoreBuffer>>& sources, Push* push) {
  std::vector<Credit> back;
  bool taken = false;
  {
    std::lock_guard<std::mutex> g(credits_mu_);
    auto it = credits_.find(call.node->name);
    if (it == credits_.end()) return false;
    std::vector<Credit>& held = it->second;
    const auto now = Clock::now();
    // Past use, or of an earlier life of the home, or granted over a
    // connection that has ended since (the home may have restarted: its
    // grant would be in the old engine, where WRITEs hang until the
    // deadline).
    const uint64_t losses = control_->Losses(call.node->name);
    TakeStaleLocked(
        call.node->name, &held,
        [&](const Credit& c) {
          return now >= c.usable_until || c.epoch != call.node->info.epoch || c.losses != losses;
        },
        &back);
    for (size_t h = 0; h < held.size() && !taken; ++h) {
      Credit& credit = held[h];
      if (credit.lengths.size() < call.keys.size()) continue;
      // Each page takes the lowest free slot of its length.
      std::unordered_map<uint64_t, std::vector<size_t>> free;  // by length, lowest slot last
      for (size_t s = credit.lengths.size(); s-- > 0;) free[credit.lengths[s]].push_back(s);
      std::vector<size_t> slot_of(call.keys.size());
      bool fits = true;
      for (size_t j = 0; j < call.keys.size() && fits; ++j) {
        auto f = free.find(TotalBytes(sources[call.keys[j]]));
        fits = f != free.end() && !f->second.empty();
        if (!fits) break;
        slot_of[j] = f->second.back();
        f->second.pop_back();
      }
      if (!fits) continue;
      push->granted = true;
      push->slot_of = std::move(slot_of);
      push->slots = Slots{credit.ticket, credit.epoch, std::vector<Status>(credit.addrs.size(), Status::OK()),
                          std::move(credit.addrs)};
      held.erase(held.begin() + static_cast<std::ptrdiff_t>(h));
      taken = true;
    }
  }
  ReleaseCredits(std::move(back), Clock::now());
  return taken;
}

void StoreClient::SweepCredits() {
  const auto now = Clock::now();
  const int64_t now_ns = now.time_since_epoch().count();
  int64_t due = next_sweep_ns_.load(std::memory_order_relaxed);
  if (now_ns < due || !next_sweep_ns_.compare_exchange_strong(
                          due, now_ns + std::chrono::nanoseconds(kCreditSweep).count()))
    return;
  std::vector<Credit> back;
  {
    std::lock_guard<std::mutex> g(credits_mu_);
    for (auto& [home, held] : credits_)
      TakeStaleLocked(home, &held, [&](const Credit& c) { return now >= c.usable_until; }, &back);
  }
  ReleaseCredits(std::move(back), now);
}

void StoreClient::KeepCredit(Credit credit) {
  std::vector<Credit> back;
  {
    std::lock_guard<std::mutex> g(credits_mu_);
    std::vector<Credit>& held = credits_[credit.node->name];
    held.push_back(std::move(credit));
    if (held.size() > kCreditsPerHome) {
      back.push_back(std::move(held.front()));
      held.erase(held.begin());
    }
  }
  if (!back.empty()) ReleaseCredits(std::move(back), Clock::now());
}

void StoreClient::ReleaseCredits(std::vector<Credit> credits, net::Deadline by) {
  std::vector<NodeCall> calls;
  for (const Credit& c : credits) {
    CommitRequest nothing{c.ticket, std::vector<CommitItem>(c.addrs.size()), {}};
    for (CommitItem& item : nothing.items) item.state = CommitState::kUnused;
    calls.push_back(NodeCall{c.node, {}, EncodeCommit(nothing), {}, {}});
  }
  if (calls.empty()) return;
  // Answered or not, the slots are the home's again: only a close waits.
  auto fanout = Send(&calls, net::DeadlineIn(settings_.store_deadline_ms));
  size_t which = 0;
  std::vector<size_t> unanswered;
  for (size_t n = 0; n < calls.size() && Clock::now() < by; ++n)
    if (!Next(fanout.get(), &calls, by, Wait::kSleep, &which, &unanswered)) break;
}

void StoreClient::GiveBackCredits() {
  std::vector<Credit> all;
  {
    std::lock_guard<std::mutex> g(credits_mu_);
    for (auto& [home, held] : credits_)
      for (Credit& c : held) all.push_back(std::move(c));
    credits_.clear();
  }
  ReleaseCredits(std::move(all), net::DeadlineIn(std::min<int64_t>(settings_.store_deadline_ms, 500)));
}

std::vector<uint64_t> StoreClient::GrantFor(const NodeCall& call,
                                            const std::vector<std::vector<StoreBuffer>>& sources) const {
  std::vector<uint64_t> lengths;
  uint64_t bytes = 0;
  for (size_t i : call.keys) {
    lengths.push_back(TotalBytes(sources[i]));
    bytes += lengths.back();
  }
  // A home grants no more than its share: a batch larger than that would
  // get slots it could never use.
  if (lengths.empty() || lengths.size() > kMaxGrantSlots || bytes > call.node->info.pool_bytes / kGrantPoolShare)
    return {};
  const uint64_t first = lengths.front();
  lengths.insert(lengths.end(), lengths.size() / 2 + 2, first);
  return lengths;
}

bool StoreClient::StartPush(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                            const std::vector<Memory>& memory, net::Deadline writes_by, NodeCall* call, Push* push,
                            std::vector<Status>* results) {
  Status s = call->status;
  if (s.ok()) s = DecodeSlots(call->reply, call->keys.size(), &push->slots);
  if (!s.ok()) {
    for (size_t i : call->keys) (*results)[i] = s;
    return false;
  }
  push->group_of.assign(call->keys.size(), SIZE_MAX);
  push->slot_of.resize(call->keys.size());
  for (size_t j = 0; j < call->keys.size(); ++j) push->slot_of[j] = j;
  if (push->slots.epoch != call->node->info.epoch) {
    // The home restarted since this process greeted it: its slots are in
    // the new engine, whose segment the view does not hold.
    std::shared_ptr<const NodeView> fresh;
    s = members_->Renew(call->node->name, push->slots.epoch, writes_by, &fresh);
    if (s.ok() && fresh->info.epoch != push->slots.epoch) s = Status::Unavailable("it restarted again");
    if (!s.ok()) {
      // Its slots are abandoned by the commit, which says nothing was written.
      s = s.Annotate("store member " + call->node->name + " restarted during the put");
      for (size_t i : call->keys) (*results)[i] = s;
      return push->slots.ticket != 0;
    }
    call->node = std::move(fresh);
  }
  StartWrites(keys, sources, memory, *call, push, results);
  return push->slots.ticket != 0;
}

void StoreClient::StartWrites(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                              const std::vector<Memory>& memory, const NodeCall& call, Push* push,
                              std::vector<Status>* results) {
  push->group_of.assign(call.keys.size(), SIZE_MAX);
  std::vector<TransferRequest> writes;
  std::vector<std::pair<size_t, size_t>> groups;
  std::vector<uint64_t> copyable;
  for (size_t j = 0; j < call.keys.size(); ++j) {
    const size_t i = call.keys[j];
    const size_t slot = push->slot_of[j];
    if (!push->slots.statuses[slot].ok()) {
      (*results)[i] = push->slots.statuses[slot];
      continue;
    }
    push->group_of[j] = groups.size();
    groups.push_back({writes.size(), 0});
    copyable.push_back(memory[i] == Memory::kHost ? call.node->info.epoch : BatchRunner::kNoCopy);
    uint64_t at = push->slots.addrs[slot];
    for (const StoreBuffer& b : sources[i]) {
      writes.push_back({OpCode::kWrite, b.addr, call.node->segment, at, b.length});
      at += b.length;
    }
    groups.back().second = writes.size();
  }
  runner_.Start(writes, groups, &push->flight, &push->wrote, copyable);
  Add(counters_.copied_pages, push->flight.Copied());
}

void StoreClient::PullFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                           const std::vector<size_t>& which, std::vector<Status>* results, bool if_absent,
                           const std::string* except, Route route) {
  std::vector<NodeCall> calls = GroupByHome(keys, which, results, route);
  for (size_t i : TakeCallTo(&calls, except))
    (*results)[i] = Status::Unavailable("store: key '" + keys[i] + "' homes on " + *except);
  const int64_t deadline_ms = settings_.store_deadline_ms;
  for (NodeCall& call : calls) {
    PutRequest put;
    put.writer = engine_->name();
    put.budget_ms = static_cast<uint32_t>(deadline_ms - std::min<int64_t>(deadline_ms / 5, 500));
    put.if_absent = if_absent;
    for (size_t i : call.keys) {
      PutItem item{keys[i], {}};
      for (const StoreBuffer& b : sources[i]) item.sources.push_back({reinterpret_cast<uintptr_t>(b.addr), b.length});
      put.items.push_back(std::move(item));
    }
    call.request = EncodePut(put);
  }
  CallNodes(&calls, net::DeadlineIn(deadline_ms), Wait::kSleep);
  for (NodeCall& call : calls) {
    std::vector<Status> per_key;
    Status s = call.status;
    if (s.ok()) s = DecodeStatuses(call.reply, call.keys.size(), &per_key);
    for (size_t j = 0; j < call.keys.size(); ++j) (*results)[call.keys[j]] = s.ok() ? per_key[j] : s;
  }
}

Status StoreClient::EnsureBounce() {
  if (bounce_) return Status::OK();
  const auto bytes = static_cast<size_t>(settings_.store_bounce_bytes);
  std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[bytes]);
  if (!buffer)
    return Status::Unavailable("store: no memory for the bounce buffer of GPU pages (KVF_STORE_BOUNCE_BYTES=" +
                               std::to_string(bytes) + ")");
  KVF_RETURN_IF_ERROR(engine_->OpenSegment(engine_->name(), &self_segment_));
  Status s = engine_->RegisterMemory(buffer.get(), bytes, "cpu");
  if (!s.ok()) return s.Annotate("store: registering the bounce buffer of GPU pages");
  bounce_ = std::move(buffer);
  return Status::OK();
}

void StoreClient::PutBounced(const std::vector<std::string>& keys,
                             const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<size_t>& which,
                             std::vector<Status>* results) {
  std::lock_guard<std::mutex> g(bounce_mu_);
  if (Status s = EnsureBounce(); !s.ok()) {
    for (size_t i : which) (*results)[i] = s;
    return;
  }
  const auto capacity = static_cast<uint64_t>(settings_.store_bounce_bytes);
  std::vector<std::vector<StoreBuffer>> sources(keys.size());
  size_t next = 0;
  while (next < which.size()) {
    // A round: as many pages as the bounce buffer holds, copied device ->
    // host by the engine (its own segment), then put from there.
    std::vector<TransferRequest> copies;
    std::vector<std::pair<size_t, size_t>> groups;
    std::vector<size_t> round;
    uint64_t used = 0;
    for (; next < which.size(); ++next) {
      const size_t i = which[next];
      const uint64_t n = TotalBytes(buffers[i]);
      if (n > capacity) {
        (*results)[i] = Status::InvalidArgument("store: the page of key '" + keys[i] +
                                                "' is GPU memory no rail can expose and larger than "
                                                "KVF_STORE_BOUNCE_BYTES, the host memory it would be copied through");
        continue;
      }
      if (used + n > capacity) break;
      groups.push_back({copies.size(), 0});
      for (const StoreBuffer& b : buffers[i]) {
        copies.push_back({OpCode::kWrite, b.addr, self_segment_, reinterpret_cast<uint64_t>(bounce_.get() + used),
                          b.length});
        used += b.length;
      }
      groups.back().second = copies.size();
      sources[i] = {{bounce_.get() + used - n, static_cast<size_t>(n)}};
      round.push_back(i);
    }
    std::vector<Status> copied;
    runner_.Run(copies, groups, net::DeadlineIn(settings_.store_deadline_ms), &copied);
    std::vector<size_t> ready;
    for (size_t g = 0; g < round.size(); ++g) {
      if (copied[g].ok()) ready.push_back(round[g]);
      else (*results)[round[g]] = copied[g].Annotate("store: copying the GPU page of '" + keys[round[g]] + "' to host memory");
    }
    if (!ready.empty()) PutFrom(keys, sources, std::vector<Memory>(keys.size(), Memory::kHost), ready, results);
    Add(counters_.put_bounced, ready.size());
  }
}

void StoreClient::GetVia(Route route, const std::vector<std::string>& keys,
                         const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                         std::vector<uint64_t>* lengths) {
  const CallScope scope(&active_calls_);
  SweepCredits();
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  lengths->assign(keys.size(), 0);
  std::vector<NodeCall> calls = GroupByHome(keys, results, route);
  const auto asked = Clock::now();
  const auto deadline = asked + std::chrono::milliseconds(settings_.store_deadline_ms);
  // No READ starts after its lookup's read window: the slots may be reused from then on.
  auto read_by = [&](const NodeCall& call) {
    return std::min(deadline, asked + std::chrono::milliseconds(call.node->info.read_window_ms));
  };
  // The pages whose location this process remembers are read at once, in
  // one engine batch with their homes' region versions (a small READ
  // each): a page whose region has not changed since its location was
  // answered is still its key's, and needs no message to its home at all.
  // The keys with no such guess are looked up at once, each home's pages
  // read as soon as it answers; the guesses whose version changed are
  // looked up once the batch is in (or, for a home that hangs, after a
  // quarter of the time left), and their answers confirm them or send
  // them elsewhere.
  Reads reads;
  reads.pages.reserve(keys.size());
  std::vector<size_t> guessed(keys.size(), SIZE_MAX);
  Probe probe;
  StartGuesses(keys, buffers, memory, calls, deadline, read_by, &reads, &guessed, &probe);
  std::vector<NodeCall> later;  // the calls' keys that the versions may confirm
  for (NodeCall& call : calls) {
    NodeCall rest;
    rest.node = call.node;
    std::erase_if(call.keys, [&](size_t i) {
      const bool wait = guessed[i] != SIZE_MAX && reads.pages[guessed[i]].verify && probe.Covers(call.node->name);
      if (wait) rest.keys.push_back(i);
      return wait;
    });
    if (!rest.keys.empty()) later.push_back(std::move(rest));
  }
  Asked first = Ask(keys, &calls, deadline, results);
  std::vector<std::pair<std::string, std::vector<size_t>>> unasked;  // per home: keys confirmed by their versions
  if (!probe.homes.empty()) ConfirmByVersions(buffers, &probe, guessed, deadline, &later, &reads, &unasked);
  Asked second = Ask(keys, &later, deadline, results);
  Collect(keys, buffers, memory, &calls, &first, deadline, read_by, guessed, results, &reads);
  Collect(keys, buffers, memory, &later, &second, deadline, read_by, guessed, results, &reads);
  // Pages are verified as each one's READs land, in whatever order they
  // land: a home that hangs holds up only its own pages. A guess its answer
  // did not confirm is waited out all the same (no READ may write the
  // caller's buffers once the call returns), and read again at once when
  // the answer found the page elsewhere: not after the other pages, where
  // a hung home's pages would have held it up to the call's deadline (the
  // soak saw such keys, on healthy nodes, fail with Timeout while another
  // node was killed). Pages are taken in order while no guess that moved
  // waits (a pass stops at the first page still out, as a wait for it
  // would); with one waiting, each pass looks at every page. Polled,
  // yielding the core, for KVF_STORE_SPIN_US after each page that lands (a
  // lone page lands within it), then in short sleeps; each flight's
  // deadline bounds the wait for its pages.
  Reads again;
  std::vector<bool> handled(reads.pages.size(), false);
  size_t left = reads.pages.size(), first_out = 0;
  size_t moved_left = static_cast<size_t>(std::count_if(
      reads.pages.begin(), reads.pages.end(), [](const PageRead& r) { return r.check == PageRead::Check::kMoved; }));
  LandingPace pace(std::chrono::microseconds(settings_.store_spin_us));
  while (left > 0) {
    std::vector<PageRead> moved;
    net::Deadline moved_by = deadline;
    for (size_t p = first_out; p < reads.pages.size(); ++p) {
      if (handled[p]) continue;
      PageRead& read = reads.pages[p];
      // A confirmed page read in pieces takes each into its checksum as it lands.
      const bool feeds = read.pieces != nullptr && read.check == PageRead::Check::kConfirmed;
      bool failed = false;
      const bool fed = feeds && read.sum == PageRead::Sum::kNotTaken && FeedPieces(reads, &read, &failed);
      const Status* ended = nullptr;
      if (!PageLanded(&reads, read, &ended)) {
        if (fed) pace.Landed();
        if (moved_left == 0) break;
        continue;
      }
      handled[p] = true;
      --left;
      pace.Landed();
      while (first_out < handled.size() && handled[first_out]) ++first_out;
      if (read.check == PageRead::Check::kMoved) --moved_left;
      const size_t i = read.key;
      if (read.check == PageRead::Check::kConfirmed) {
        // Its last pieces may have landed since it was fed.
        if (feeds && read.sum == PageRead::Sum::kNotTaken && ended->ok()) FeedPieces(reads, &read, &failed);
        FinishRead(keys, buffers, read, *ended, results, lengths);
        continue;
      }
      Add(counters_.get_cached_stale, 1);
      if (read.check != PageRead::Check::kMoved) continue;  // results[i] says what the answer was
      if (!ended->ok()) {  // its READs may still be writing the buffers: no second READ into them
        (*results)[i] = ReadFailed(*ended, keys[i], *read.home);
        continue;
      }
      const net::Deadline by = reads.flights[read.flight].by;
      if (Clock::now() + LateMargin() >= by) {  // no READ started that could not end in time
        (*results)[i] = Status::NotFound("store: key '" + keys[i] + "': its lookup is older than the read window");
        Add(counters_.misses_late, 1);
        continue;
      }
      moved.push_back(read);
      moved.back().check = PageRead::Check::kConfirmed;
      moved_by = std::min(moved_by, by);
    }
    if (!moved.empty()) {  // the pages that moved, found in this pass: read again now
      std::vector<std::pair<PageRead, Status>> refused;
      Launch(std::move(moved), moved_by, buffers, memory, &again, &refused);
      for (const auto& [read, why] : refused) (*results)[read.key] = ReadFailed(why, keys[read.key], *read.home);
    }
    if (left == 0) break;
    pace.Pause();
  }
  for (const PageRead& read : again.pages) FinishRead(keys, buffers, read, Land(&again, read), results, lengths);
  // Flights none of whose pages is read (every one refused) end here too.
  for (ReadFlight& f : reads.flights)
    if (!f.landed) {
      runner_.Finish(&f.flight, f.by, &f.outcomes);
      f.landed = true;
    }
  for (const auto& [home, read] : unasked) QueueTouches(home, keys, read);
}

void StoreClient::Launch(std::vector<PageRead> pages, net::Deadline by,
                         const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<Memory>& memory,
                         Reads* reads, std::vector<std::pair<PageRead, Status>>* refused,
                         const std::vector<TransferRequest>& first, const std::vector<uint64_t>& first_epochs) {
  if (pages.empty()) return;
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups(first.size());
  std::vector<uint64_t> copyable = first_epochs;  // `first` READs into scratch slots, host memory
  copyable.resize(first.size(), BatchRunner::kNoCopy);
  for (PageRead& page : pages) {
    const size_t i = page.key;
    copyable.push_back(memory[i] == Memory::kHost ? page.home->info.epoch : BatchRunner::kNoCopy);
    // No checksum on GPU memory: its page is whole by the read window alone.
    page.verify = settings_.store_verify && memory[i] == Memory::kHost;
    page.sum = PageRead::Sum::kNotTaken;
    const bool in_pieces = page.verify && page.where.length > kLandingPiece && verify_long_as_they_land_;
    page.pieces = in_pieces ? std::make_shared<PageRead::Pieces>() : nullptr;
    groups.push_back({requests.size(), 0});
    uint64_t left = page.where.length, remote = page.where.addr;
    for (const StoreBuffer& b : buffers[i]) {
      if (left == 0) break;
      const uint64_t n = std::min<uint64_t>(left, b.length);
      for (uint64_t at = 0; at < n;) {
        const uint64_t piece = in_pieces ? std::min(n - at, kLandingPiece) : n - at;
        uint8_t* local = static_cast<uint8_t*>(b.addr) + at;
        requests.push_back({OpCode::kRead, local, page.home->segment, remote, static_cast<size_t>(piece)});
        if (in_pieces) page.pieces->ranges.push_back({local, static_cast<size_t>(piece)});
        remote += piece;
        at += piece;
      }
      left -= n;
    }
    groups.back().second = requests.size();
  }
  // Posted after the pages (groups 0..k-1 all the same): posted first,
  // they made GETs over tcp a quarter slower on this host (measured).
  for (size_t k = 0; k < first.size(); ++k) {
    groups[k] = {requests.size(), requests.size() + 1};
    requests.push_back(first[k]);
  }
  ReadFlight flight;
  flight.by = by;
  const size_t k = first.size();
  // A page copied from a mapped pool is checksummed right after its copy,
  // while its bytes are in this core's cache.
  // (Measured, shm, 3 nodes, batches of 256 pages of 128 KiB: 0.93-0.97
  // of the bare READ, against 0.75-0.78 with the pages checksummed once
  // the batch was copied; the same at batch 32, whose 4 MiB stay in L3.)
  const auto copied = [&](size_t g) {
    if (g < k) return;
    PageRead& page = pages[g - k];
    if (!page.verify) return;
    page.TakeSum(buffers[page.key]);
  };
  runner_.Start(requests, groups, &flight.flight, &flight.outcomes, copyable, copied, k);
  Add(counters_.copied_pages, flight.flight.Copied(k));  // the pages, not the versions
  bool any = false;
  for (size_t p = 0; p < pages.size(); ++p) any = any || flight.outcomes[k + p].ok();
  if (!any) {  // no page will land: the flight is not kept (the caller did not ask for `first` alone)
    runner_.Finish(&flight.flight, Clock::now(), &flight.outcomes);
    for (size_t p = 0; p < pages.size(); ++p) refused->push_back({std::move(pages[p]), flight.outcomes[k + p]});
    return;
  }
  for (size_t p = 0; p < pages.size(); ++p) {
    if (!flight.outcomes[k + p].ok()) {
      refused->push_back({std::move(pages[p]), flight.outcomes[k + p]});
      continue;
    }
    pages[p].flight = reads->flights.size();
    pages[p].group = k + p;
    reads->pages.push_back(std::move(pages[p]));
  }
  reads->flights.push_back(std::move(flight));
}

bool StoreClient::PageLanded(Reads* reads, const PageRead& page, const Status** outcome) {
  ReadFlight& f = reads->flights[page.flight];
  if (!f.landed && Clock::now() < f.by) {
    Status failure;
    if (!runner_.GroupEnded(f.flight, page.group, &failure)) return false;
    if (!failure.ok() && f.outcomes[page.group].ok()) f.outcomes[page.group] = failure;
    *outcome = &f.outcomes[page.group];
    return true;
  }
  *outcome = &Land(reads, page);
  return true;
}

bool StoreClient::ChecksumLanded(const std::vector<std::vector<StoreBuffer>>& buffers, Reads* reads, size_t flight,
                                 size_t* next) {
  bool took = false;
  for (; *next < reads->pages.size(); ++*next) {
    PageRead& read = reads->pages[*next];
    if (read.flight != flight || !read.verify || read.sum != PageRead::Sum::kNotTaken) continue;
    if (read.pieces != nullptr) {
      bool failed = false;
      took = FeedPieces(*reads, &read, &failed) || took;
      if (failed) continue;  // a failed READ is not checksummed: FinishRead fails it
      if (read.sum == PageRead::Sum::kNotTaken) break;
      continue;
    }
    const BatchRunner::Flight& f = reads->flights[flight].flight;
    // Pages copied on the Copier's thread are checksummed beside its copies
    // of the next ones, whatever the rails.
    const bool copying = f.copies.job != nullptr && f.copied[read.group];
    // The others as VerifiesAsItLands says; if not, FinishRead checksums them once the flight has landed.
    if (!copying && !VerifiesAsItLands(read.where.length)) continue;
    Status failure;
    if (!runner_.GroupEnded(f, read.group, &failure)) break;
    if (!failure.ok()) continue;  // a failed READ is not checksummed: FinishRead fails it
    read.TakeSum(buffers[read.key]);
    took = true;
  }
  return took;
}

bool StoreClient::FeedPieces(const Reads& reads, PageRead* read, bool* failed) {
  *failed = false;
  const ReadFlight& flight = reads.flights[read->flight];
  if (flight.landed) return false;  // finished and freed: FinishRead checksums the page whole
  PageRead::Pieces& p = *read->pieces;
  const BatchRunner::Flight& f = flight.flight;
  bool fed = false;
  Status failure;
  while (p.fed < p.ranges.size() && runner_.RequestEnded(f, read->group, p.fed, &failure) && failure.ok()) {
    p.sum.Add(p.ranges[p.fed].data, p.ranges[p.fed].length);
    ++p.fed;
    fed = true;
  }
  *failed = !failure.ok();
  if (p.fed == p.ranges.size())
    read->sum = p.sum.Digest() == read->where.checksum ? PageRead::Sum::kMatches : PageRead::Sum::kDiffers;
  return fed;
}

const Status& StoreClient::Land(Reads* reads, const PageRead& page) {
  ReadFlight& f = reads->flights[page.flight];
  if (!f.landed) {
    runner_.Finish(&f.flight, f.by, &f.outcomes);
    f.landed = true;
  }
  return f.outcomes[page.group];
}

bool StoreClient::Probe::Covers(const std::string& home) const {
  for (const Home& h : homes)
    if (h.name == home) return true;
  return false;
}

void StoreClient::StartGuesses(const std::vector<std::string>& keys,
                               const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<Memory>& memory,
                               const std::vector<NodeCall>& calls, net::Deadline deadline,
                               const std::function<net::Deadline(const NodeCall&)>& read_by, Reads* reads,
                               std::vector<size_t>* guessed, Probe* probe) {
  if (locations_.capacity() == 0) return;
  std::vector<PageRead> pages;
  std::vector<TransferRequest> versions;
  std::vector<uint64_t> version_epochs;
  net::Deadline by = deadline;
  CachedLocation cached;
  for (const NodeCall& call : calls) {
    // A node's own pages are answered by a direct call, at once.
    if (self_ && call.node->name == self_->address) continue;
    bool verified = false, any = false;
    for (size_t i : call.keys) {
      if (!locations_.Find(keys[i], &cached) ||
          !CachedLocationUsable(cached, call.node->name, call.node->info.epoch, TotalBytes(buffers[i])))
        continue;
      pages.push_back(PageRead{i, cached.where, call.node, true, PageRead::Check::kUnconfirmed});
      any = true;
      verified = verified || (settings_.store_verify && memory[i] == Memory::kHost);
    }
    if (any) by = std::min(by, read_by(call));
    // The home's region versions (and epoch), into a scratch slot, for its
    // guesses that will be checksummed: a slot reused while its page is
    // read is caught there. Pages not checksummed (GPU memory, or
    // KVF_STORE_VERIFY=0) wait for their lookups, whose read window keeps
    // the page whole.
    const NodeInfo& info = call.node->info;
    if (!verified || info.region_bytes == 0 || info.versions_addr == 0) continue;
    uint8_t* slot = scratch_.Take();
    if (slot == nullptr) continue;  // every slot in use: lookups confirm these guesses
    probe->homes.push_back({call.node->name, slot, versions.size()});
    versions.push_back({OpCode::kRead, slot, call.node->segment, info.versions_addr, kVersionsReadBytes});
    version_epochs.push_back(info.epoch);
  }
  // One engine batch with the pages, waited for once. A guess the engine
  // refuses is no guess: its key is looked up as any.
  std::vector<std::pair<PageRead, Status>> refused;
  const size_t first = reads->pages.size();
  const size_t flights = reads->flights.size();
  Launch(std::move(pages), by, buffers, memory, reads, &refused, versions, version_epochs);
  for (size_t p = first; p < reads->pages.size(); ++p) (*guessed)[reads->pages[p].key] = p;
  if (reads->flights.size() == flights) {  // nothing launched: no versions either
    for (const Probe::Home& h : probe->homes) scratch_.Give(h.slot);
    probe->homes.clear();
    return;
  }
  probe->flight = flights;
}

void StoreClient::ConfirmByVersions(const std::vector<std::vector<StoreBuffer>>& buffers, Probe* probe,
                                    const std::vector<size_t>& guessed, net::Deadline deadline,
                                    std::vector<NodeCall>* later, Reads* reads,
                                    std::vector<std::pair<std::string, std::vector<size_t>>>* unasked) {
  // The versions come within a round trip, or behind pages queued on
  // their rail; a home that has not sent them within a quarter of the time
  // left (hung) has its guesses looked up instead, and the others' lookups
  // still go with most of their time.
  // They share the pages' batch, posted after its pages: normally all of
  // it has landed by then. Meanwhile the pages are checksummed as they land
  // (KVF_STORE_VERIFY_OVERLAP, VerifyAsPageLands), under the transfer of
  // the later ones, paced as the landing loop in Get; one wait takes what
  // is left once every page has landed (the versions, posted last), or
  // what a hung home holds at `until`.
  ReadFlight& f = reads->flights[probe->flight];
  const auto now = Clock::now();
  const net::Deadline until = now + std::max<net::Deadline::duration>(kVersionsWait, (deadline - now) / 4);
  if (verify_short_as_they_land_ || verify_long_as_they_land_ || f.flight.copies.job != nullptr) {
    LandingPace pace(std::chrono::microseconds(settings_.store_spin_us));
    for (size_t next = 0; next < reads->pages.size() && Clock::now() < until;) {
      if (ChecksumLanded(buffers, reads, probe->flight, &next)) pace.Landed();
      else if (next < reads->pages.size()) pace.Pause();
    }
  }
  std::vector<bool> ended;
  runner_.Peek(&f.flight, until, &ended, &f.outcomes);
  std::vector<std::array<uint64_t, RegionVersions::kRegions + 1>> words(probe->homes.size());
  std::vector<bool> have(probe->homes.size(), false);
  for (size_t h = 0; h < probe->homes.size(); ++h) {
    const Status& got = f.outcomes[probe->homes[h].group];
    if (ended[probe->homes[h].group] && got.ok()) {
      std::memcpy(words[h].data(), probe->homes[h].slot, kVersionsReadBytes);
      have[h] = true;
      scratch_.Give(probe->homes[h].slot);
    } else if (ended[probe->homes[h].group]) {
      scratch_.Give(probe->homes[h].slot);
    } else {
      // A READ not ended may still write its slot: it waits out the transfer timeout.
      scratch_.GiveLater(probe->homes[h].slot, Clock::now() + std::chrono::milliseconds(settings_.transfer_timeout_ms) +
                                                   std::chrono::seconds(1));
    }
  }
  for (NodeCall& call : *later) {
    size_t h = 0;
    while (h < probe->homes.size() && probe->homes[h].name != call.node->name) ++h;
    const NodeInfo& info = call.node->info;
    // The page the versions came from must be the node this view knows (a
    // restarted node at the same address starts its versions again at 0).
    if (h == probe->homes.size() || !have[h] || words[h][RegionVersions::kRegions] != info.epoch) continue;
    std::vector<size_t> confirmed;
    std::erase_if(call.keys, [&](size_t i) {
      PageRead& guess = reads->pages[guessed[i]];
      if (!guess.verify) return false;  // not checksummed: its lookup confirms it
      const uint64_t offset = guess.where.addr - info.pool_addr;
      const size_t region =
          static_cast<size_t>(std::min<uint64_t>(offset / info.region_bytes, RegionVersions::kRegions - 1));
      if (words[h][region] != guess.where.version) return false;
      guess.check = PageRead::Check::kConfirmed;
      confirmed.push_back(i);
      return true;
    });
    Add(counters_.get_cached, confirmed.size());
    Add(counters_.get_no_lookup, confirmed.size());
    if (!confirmed.empty()) unasked->push_back({call.node->name, std::move(confirmed)});
  }
  probe->homes.clear();
}

StoreClient::Asked StoreClient::Ask(const std::vector<std::string>& keys, std::vector<NodeCall>* calls,
                                     net::Deadline deadline, std::vector<Status>* results) {
  std::erase_if(*calls, [](const NodeCall& call) { return call.keys.empty(); });
  if (calls->empty()) return nullptr;
  // Too late for a round trip: the keys are misses, and no home is blamed.
  if (Clock::now() + LateMargin() >= deadline) {
    for (const NodeCall& call : *calls)
      for (size_t i : call.keys) {
        (*results)[i] = Status::NotFound("store: key '" + keys[i] + "': no time was left to look it up");
        Add(counters_.misses_late, 1);
      }
    calls->clear();
    return nullptr;
  }
  for (NodeCall& call : *calls) call.request = EncodeKeys(Op::kLookup, KeysOf(keys, call.keys));
  return Send(calls, deadline);
}

void StoreClient::Collect(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                          const std::vector<Memory>& memory, std::vector<NodeCall>* calls, Asked* asked,
                          net::Deadline deadline, const std::function<net::Deadline(const NodeCall&)>& read_by,
                          const std::vector<size_t>& guessed, std::vector<Status>* results, Reads* reads) {
  if (*asked == nullptr) return;
  size_t c = 0;
  std::vector<size_t> unanswered;
  for (size_t n = 0; n < calls->size(); ++n) {
    const Wait wait = reads->pages.empty() ? Wait::kPollFirst : Wait::kSleep;
    if (!Next(asked->get(), calls, deadline + std::chrono::seconds(1), wait, &c, &unanswered)) break;
    StartReads(keys, buffers, memory, (*calls)[c], read_by((*calls)[c]), guessed, results, reads);
  }
  for (size_t u : unanswered)
    for (size_t i : (*calls)[u].keys) (*results)[i] = (*calls)[u].status;
}

net::Deadline::duration StoreClient::LateMargin() const {
  return std::chrono::milliseconds(std::max<int64_t>(1, settings_.store_deadline_ms / 20));
}

void StoreClient::QueueTouches(const std::string& home, const std::vector<std::string>& keys,
                               const std::vector<size_t>& which) {
  std::vector<std::string> batch;
  {
    std::lock_guard<std::mutex> g(touch_mu_);
    Touches& t = touches_[home];
    for (size_t i : which)
      if (t.keys.size() < kMaxTouches && t.bytes + keys[i].size() <= kMaxTouchBytes && t.keys.insert(keys[i]).second)
        t.bytes += keys[i].size();
    const auto now = Clock::now();
    if (now - t.sent < kTouchEvery) return;
    t.sent = now;
    batch.assign(t.keys.begin(), t.keys.end());
    t.keys.clear();
    t.bytes = 0;
  }
  std::vector<std::string_view> views(batch.begin(), batch.end());
  // Fire and forget: a lost touch only makes its pages look older.
  Add(counters_.control_calls, 1);
  control_->Call(home, EncodeKeys(Op::kTouch, views), net::DeadlineIn(settings_.store_deadline_ms),
                 [](Status, std::string) {});
}

void StoreClient::StartReads(const std::vector<std::string>& keys,
                             const std::vector<std::vector<StoreBuffer>>& buffers, const std::vector<Memory>& memory,
                             const NodeCall& call, net::Deadline by, const std::vector<size_t>& guessed,
                             std::vector<Status>* results, Reads* reads) {
  std::vector<Location> found;
  Status s = call.status;
  if (s.ok()) s = DecodeLocations(call.reply, call.keys.size(), &found);
  const bool late = Clock::now() + LateMargin() >= by;
  std::vector<PageRead> pages;
  for (size_t j = 0; j < call.keys.size(); ++j) {
    const size_t i = call.keys[j];
    Status& r = (*results)[i];
    PageRead* guess = guessed[i] == SIZE_MAX ? nullptr : &reads->pages[guessed[i]];
    if (!s.ok()) {
      r = s;
      continue;
    }
    const Location& loc = found[j];
    if (!loc.found) {
      r = Absent(keys[i]);  // counted by Get, once per key
      locations_.Erase(keys[i]);
      continue;
    }
    locations_.Put(keys[i], CachedLocation{call.node->name, call.node->info.epoch, loc});
    if (guess != nullptr && SamePage(guess->where, loc)) {
      guess->check = PageRead::Check::kConfirmed;
      Add(counters_.get_cached, 1);
      continue;
    }
    if (TotalBytes(buffers[i]) < loc.length) {
      r = Status::InvalidArgument("store: the page of key '" + keys[i] + "' has " + std::to_string(loc.length) +
                                  " bytes, more than its buffers hold");
      continue;
    }
    if (late) {
      r = Status::NotFound("store: key '" + keys[i] + "': its lookup is older than the read window");
      Add(counters_.misses_late, 1);
      continue;
    }
    if (guess != nullptr) {  // read again from `loc` once the guess has ended: now, if it has
      // (not after the other homes' answers, which a hung home holds to
      // the call's deadline)
      const Status* ended = nullptr;
      if (PageLanded(reads, *guess, &ended) && ended->ok()) {
        guess->check = PageRead::Check::kUnconfirmed;  // waited out; its bytes are not the key's
        pages.push_back(PageRead{i, loc, call.node});
        continue;
      }
      guess->where = loc;
      guess->check = PageRead::Check::kMoved;
      continue;
    }
    pages.push_back(PageRead{i, loc, call.node});
  }
  std::vector<std::pair<PageRead, Status>> refused;
  Launch(std::move(pages), by, buffers, memory, reads, &refused);
  for (const auto& [read, why] : refused) (*results)[read.key] = ReadFailed(why, keys[read.key], *call.node);
}

Status StoreClient::ReadFailed(const Status& failure, const std::string& key, const NodeView& home) {
  Status r = failure.Annotate("store: reading the page of '" + key + "'");
  // The member's engine did not serve the READ: it died, or restarted (its
  // lookup answered, but this view still holds the old engine's segment).
  // Out of placement like a failed call, and greeted again later.
  MarkDownIfUnreachable(home.name, r);
  return r;
}

void StoreClient::FinishRead(const std::vector<std::string>& keys,
                             const std::vector<std::vector<StoreBuffer>>& buffers, const PageRead& read,
                             const Status& ended, std::vector<Status>* results, std::vector<uint64_t>* lengths) {
  const size_t i = read.key;
  Status& r = (*results)[i];
  if (!ended.ok()) {
    r = ReadFailed(ended, keys[i], *read.home);
    return;
  }
  if (!read.verify && settings_.store_verify) Add(counters_.get_unverified, 1);
  if (read.verify) {
    const bool matches = read.sum == PageRead::Sum::kNotTaken ? LandedAsStored(buffers[i], read.where)
                                                              : read.sum == PageRead::Sum::kMatches;
    if (!matches) {
      r = Status::NotFound("store: the page of key '" + keys[i] +
                           "' did not verify (replaced or evicted while read, or corrupt): a miss");
      Add(counters_.misses_checksum, 1);
      return;
    }
  }
  (*lengths)[i] = read.where.length;
}

void StoreClient::LocateVia(Route route, const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                            std::vector<Status>* results) {
  const CallScope scope(&active_calls_);
  *results = CheckKeys(keys);
  pages->assign(keys.size(), StorePage{});
  std::vector<NodeCall> calls = GroupByHome(keys, results, route);
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kLookup, KeysOf(keys, call.keys));
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms), Wait::kPollFirst);
  for (NodeCall& call : calls) {
    std::vector<Location> found;
    Status s = call.status;
    if (s.ok()) s = DecodeLocations(call.reply, call.keys.size(), &found);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      const size_t i = call.keys[j];
      if (!s.ok()) {
        (*results)[i] = s;
      } else if (!found[j].found) {
        (*results)[i] = Absent(keys[i]);
      } else {
        (*pages)[i] = StorePage{call.node->info.segment, found[j].addr, found[j].length, call.node->info.read_window_ms};
        locations_.Put(keys[i], CachedLocation{call.node->name, call.node->info.epoch, found[j]});
      }
    }
  }
}

void StoreClient::ExistsVia(Route route, const std::vector<std::string>& keys, std::vector<bool>* found,
                            uint64_t* local, const std::string* except) {
  const CallScope scope(&active_calls_);
  SweepCredits();
  found->assign(keys.size(), false);
  std::vector<Status> results = CheckKeys(keys);
  std::vector<NodeCall> calls = GroupByHome(keys, &results, route);
  (void)TakeCallTo(&calls, except);  // those keys stay false
  // A home on this host whose pool is mapped answers from its table of
  // keys (SharedKeys): no message. Its hits are touched later, in one
  // message with others (QueueTouches), as the home's own answer would
  // have touched them. A key the table cannot answer goes to the home.
  for (NodeCall& call : calls) {
    const auto map = maps_.Find(call.node->segment);
    const SharedKeys* table = map == nullptr || map->epoch() != call.node->info.epoch ? nullptr : map->keys();
    if (table == nullptr) continue;
    std::vector<size_t> touched;
    std::erase_if(call.keys, [&](size_t i) {
      const SharedKeys::Answer a = table->Find(keys[i]);
      if (a == SharedKeys::Answer::kUnknown) return false;
      (*found)[i] = a == SharedKeys::Answer::kPresent;
      if ((*found)[i]) touched.push_back(i);
      ++*local;
      return true;
    });
    if (!touched.empty()) QueueTouches(call.node->name, keys, touched);
  }
  std::erase_if(calls, [](const NodeCall& call) { return call.keys.empty(); });
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kExists, KeysOf(keys, call.keys));
  if (!calls.empty()) CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms), Wait::kPollFirst);
  for (NodeCall& call : calls) {
    std::vector<bool> bits;
    if (!call.status.ok() || !DecodeBits(call.reply, call.keys.size(), &bits).ok()) continue;
    for (size_t j = 0; j < call.keys.size(); ++j) (*found)[call.keys[j]] = bits[j];
  }
}

void StoreClient::KeyOpVia(Route route, Op op, const std::vector<std::string>& keys, std::vector<Status>* results) {
  const CallScope scope(&active_calls_);
  *results = CheckKeys(keys);
  if (op == Op::kRemove)
    for (const std::string& k : keys) locations_.Erase(k);
  std::vector<NodeCall> calls = op == Op::kUnpin ? UnpinCalls(keys, results, route) : GroupByHome(keys, results, route);
  for (NodeCall& call : calls) call.request = EncodeKeys(op, KeysOf(keys, call.keys));
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms), Wait::kPollFirst);
  const char* what = op == Op::kUnpin ? "no pinned page" : "no page";
  for (NodeCall& call : calls) {
    std::vector<bool> bits;
    Status s = call.status;
    if (s.ok()) s = DecodeBits(call.reply, call.keys.size(), &bits);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      const size_t i = call.keys[j];
      if (!s.ok()) (*results)[i] = s;
      else if (!bits[j]) (*results)[i] = Status::NotFound(std::string("store: ") + what + " under key '" + keys[i] + "'");
      // An unpin ends the record of the pin it was sent for, answered or
      // not: a member that left would fail every retry (one that was only
      // unreachable keeps that page pinned, as before pins were recorded).
      if (op == Op::kUnpin) ForgetPin(keys[i], call);
    }
  }
  if (op == Op::kPin) RecordPins(keys, calls, *results);
}

void StoreClient::RecordPins(const std::vector<std::string>& keys, const std::vector<NodeCall>& calls,
                             const std::vector<Status>& results) {
  std::lock_guard<std::mutex> g(pins_mu_);
  for (const NodeCall& call : calls) {
    for (size_t i : call.keys) {
      if (!results[i].ok()) continue;
      std::vector<HeldPin>& held = pins_[keys[i]];
      auto it = std::find_if(held.begin(), held.end(), [&](const HeldPin& p) { return p.home == call.node->name; });
      if (it == held.end()) it = held.insert(held.end(), HeldPin{call.node->name, 0});
      ++it->count;
    }
  }
}

void StoreClient::ForgetPin(const std::string& key, const NodeCall& call) {
  std::lock_guard<std::mutex> g(pins_mu_);
  auto found = pins_.find(key);
  if (found == pins_.end()) return;
  std::vector<HeldPin>& held = found->second;
  auto it = std::find_if(held.begin(), held.end(), [&](const HeldPin& p) { return p.home == call.node->name; });
  if (it != held.end() && --it->count == 0) held.erase(it);
  if (held.empty()) pins_.erase(found);
}

std::vector<StoreClient::NodeCall> StoreClient::UnpinCalls(const std::vector<std::string>& keys,
                                                           std::vector<Status>* results, Route route) {
  const auto snap = members_->Current();
  std::vector<NodeCall> calls;
  std::vector<size_t> by_home;  // the keys with no pin of this process: to their homes
  {
    std::lock_guard<std::mutex> g(pins_mu_);
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!(*results)[i].ok()) continue;
      auto found = pins_.find(keys[i]);
      if (found == pins_.end()) {
        by_home.push_back(i);
        continue;
      }
      // Sent to the member by name, whatever this process's view of it
      // says: a view can lag a restart, and a pin taken through a lagging
      // view is on the member's new life. (A member that restarted since
      // the pin answers that nothing is pinned.) One marked down here, or
      // gone, is asked all the same: a call that fails says so.
      const HeldPin pin = found->second.front();
      auto node = std::find_if(snap->nodes.begin(), snap->nodes.end(),
                               [&](const auto& n) { return n->name == pin.home; });
      std::shared_ptr<const NodeView> target;
      if (node != snap->nodes.end()) {
        target = *node;
      } else {
        auto stub = std::make_shared<NodeView>();
        stub->name = pin.home;
        target = std::move(stub);
      }
      auto call = std::find_if(calls.begin(), calls.end(), [&](const NodeCall& c) { return c.node->name == pin.home; });
      if (call == calls.end()) call = calls.insert(calls.end(), NodeCall{target, {}, {}, {}, {}});
      call->keys.push_back(i);
    }
  }
  std::vector<NodeCall> homes = GroupByHome(keys, by_home, results, route);
  for (NodeCall& home : homes) {
    auto call = std::find_if(calls.begin(), calls.end(), [&](const NodeCall& c) { return c.node->name == home.node->name; });
    if (call == calls.end()) calls.push_back(std::move(home));
    else call->keys.insert(call->keys.end(), home.keys.begin(), home.keys.end());
  }
  return calls;
}

Status StoreClient::RemoveAll(uint64_t* removed) {
  const CallScope scope(&active_calls_);
  *removed = 0;
  locations_.Clear();
  const auto snap = members_->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t n = 0; n < calls.size(); ++n) {
    calls[n].node = snap->nodes[n];
    calls[n].request = EncodeBare(Op::kRemoveAll);
  }
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms), Wait::kPollFirst);
  std::string failed;
  for (NodeCall& call : calls) {
    uint64_t n = 0;
    Status s = call.status;
    if (s.ok()) s = DecodeCount(call.reply, &n);
    if (s.ok()) *removed += n;
    else failed += (failed.empty() ? "" : "; ") + s.ToString();
  }
  if (!failed.empty()) return Status::NetworkError("store: remove all: not every member was emptied: " + failed);
  return Status::OK();
}

void StoreClient::AddStats(StoreStats* out) const {
  auto get = [](const std::atomic<uint64_t>& c) { return c.load(std::memory_order_relaxed); };
  out->put_keys = get(counters_.put_keys);
  out->put_bytes = get(counters_.put_bytes);
  out->put_failures = get(counters_.put_failures);
  out->get_keys = get(counters_.get_keys);
  out->get_hits = get(counters_.get_hits);
  out->get_bytes = get(counters_.get_bytes);
  out->misses_absent = get(counters_.misses_absent);
  out->misses_checksum = get(counters_.misses_checksum);
  out->misses_late = get(counters_.misses_late);
  out->get_failures = get(counters_.get_failures);
  out->get_unverified = get(counters_.get_unverified);
  out->get_cached = get(counters_.get_cached);
  out->get_cached_stale = get(counters_.get_cached_stale);
  out->get_no_lookup = get(counters_.get_no_lookup);
  out->put_bounced = get(counters_.put_bounced);
  out->put_granted = get(counters_.put_granted);
  out->exists_keys = get(counters_.exists_keys);
  out->exists_hits = get(counters_.exists_hits);
  out->exists_local = get(counters_.exists_local);
  out->control_calls = get(counters_.control_calls);
  out->control_failures = get(counters_.control_failures);
  out->copied_pages = get(counters_.copied_pages);
}

}  // namespace kvfabric::store
