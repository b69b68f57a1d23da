#include "store/client/store_client.h"

#include <algorithm>
#include <utility>

#include "common/log.h"
#include "store/client/get_call.h"
#include "store/client/put_call.h"

namespace kvfabric::store {
namespace {

// Each key's own check (CheckKey) as its first result.
std::vector<Status> CheckKeys(const std::vector<std::string>& keys) {
  std::vector<Status> out;
  out.reserve(keys.size());
  for (const std::string& k : keys) out.push_back(CheckKey(k));
  return out;
}

}  // namespace

StoreClient::StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
                         std::optional<LocalNode> self)
    : parts_(engine, settings, control, members, std::move(self)) {}

StoreClient::~StoreClient() {
  // READs that outlived their call may still write the bounce buffer or a
  // scratch slot: both are leaked rather than freed under them. Such READs
  // go to a member that died (the engine ends them only at
  // KVF_TRANSFER_TIMEOUT_MS, 30 s by default): a close waits one store
  // deadline for them, not the transfer timeout, so that a framework
  // detaching its store is not held up by a dead node.
  const Settings& settings = parts_.settings;
  if (!parts_.runner.Drain(
          net::DeadlineIn(std::min(settings.transfer_timeout_ms, settings.store_deadline_ms) + 100))) {
    KVF_LOG_WARN("store client: transfers still pending at close (to a member that died?); their scratch and "
                 "bounce memory ({} bytes) stays allocated until the process ends",
                 bounce_ ? settings.store_bounce_bytes : 0);
    parts_.scratch.Leak();
    (void)bounce_.release();
    return;
  }
  if (bounce_) (void)parts_.engine->UnregisterMemory(bounce_.get());
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
      if (Status s = parts_.engine->DescribeMemory(b.addr, b.length, &facts); !s.ok()) {
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

void StoreClient::SweepCredits() {
  std::vector<Credit> back = parts_.grants.Sweep();
  if (!back.empty()) parts_.GiveBack(std::move(back), std::chrono::steady_clock::now());
}

void StoreClient::GiveBackCredits() {
  parts_.GiveBack(parts_.grants.TakeAll(),
                  net::DeadlineIn(std::min<int64_t>(parts_.settings.store_deadline_ms, 500)));
}

void StoreClient::Put(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results, uint32_t copies) {
  const NodeCaller::Scope scope(&parts_.caller);
  SweepCredits();
  const std::shared_ptr<const MemberSnapshot> routed = parts_.members->Current();  // see RemoveFromPreviousHomes
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  std::vector<size_t> direct, bounced;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*results)[i].ok()) continue;
    if (TotalBytes(buffers[i]) > static_cast<uint64_t>(parts_.settings.store_max_page_bytes))
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
  if (copies < parts_.settings.store_max_copies) RemoveCopiesPast(keys, *results, copies);
  ClientCounters& counters = parts_.counters;
  ClientCounters::Add(counters.put_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) ClientCounters::Add(counters.put_bytes, TotalBytes(buffers[i]));
    else ClientCounters::Add(counters.put_failures, 1);
  }
}

void StoreClient::PutFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                          const std::vector<Memory>& memory, const std::vector<size_t>& which,
                          std::vector<Status>* results, bool grants, Route route) {
  if (parts_.settings.store_put_mode == "pull")
    return PullFrom(keys, sources, which, results, PutRequest::HandOver::kNo, nullptr, route);
  std::vector<NodeCall> calls = parts_.router.Group(keys, which, results, route);
  if (calls.empty()) return;
  PutCall put(&parts_, keys, sources, memory, results, grants && parts_.settings.store_put_grants);
  const std::vector<size_t> again = put.Run(std::move(calls));
  if (!again.empty()) PutFrom(keys, sources, memory, again, results, false, route);
}

void StoreClient::PullFrom(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& sources,
                           const std::vector<size_t>& which, std::vector<Status>* results,
                           PutRequest::HandOver hand_over,
                           const std::string* except, Route route) {
  std::vector<NodeCall> calls = parts_.router.Group(keys, which, results, route);
  for (size_t i : Router::TakeCallTo(&calls, except))
    (*results)[i] = Status::Unavailable("store: key '" + keys[i] + "' homes on " + *except);
  const int64_t deadline_ms = parts_.settings.store_deadline_ms;
  for (NodeCall& call : calls) {
    PutRequest put;
    put.writer = parts_.engine->name();
    put.budget_ms = static_cast<uint32_t>(deadline_ms - std::min<int64_t>(deadline_ms / 5, 500));
    put.hand_over = hand_over;
    for (size_t i : call.keys) {
      PutItem item{keys[i], {}};
      for (const StoreBuffer& b : sources[i]) item.sources.push_back({reinterpret_cast<uintptr_t>(b.addr), b.length});
      put.items.push_back(std::move(item));
    }
    call.request = EncodePut(put);
  }
  parts_.caller.CallAll(&calls, net::DeadlineIn(deadline_ms), Wait::kSleep);
  for (NodeCall& call : calls) {
    std::vector<Status> per_key;
    Status s = call.status;
    if (s.ok()) s = DecodeStatuses(call.reply, call.keys.size(), &per_key);
    for (size_t j = 0; j < call.keys.size(); ++j) (*results)[call.keys[j]] = s.ok() ? per_key[j] : s;
  }
}

Status StoreClient::EnsureBounce() {
  if (bounce_) return Status::OK();
  const auto bytes = static_cast<size_t>(parts_.settings.store_bounce_bytes);
  std::unique_ptr<uint8_t[]> buffer(new (std::nothrow) uint8_t[bytes]);
  if (!buffer)
    return Status::Unavailable("store: no memory for the bounce buffer of GPU pages (KVF_STORE_BOUNCE_BYTES=" +
                               std::to_string(bytes) + ")");
  Engine* engine = parts_.engine;
  KVF_RETURN_IF_ERROR(engine->OpenSegment(engine->name(), &self_segment_));
  Status s = engine->RegisterMemory(buffer.get(), bytes, "cpu");
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
  const auto capacity = static_cast<uint64_t>(parts_.settings.store_bounce_bytes);
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
    parts_.runner.Run(copies, groups, net::DeadlineIn(parts_.settings.store_deadline_ms), &copied);
    std::vector<size_t> ready;
    for (size_t g = 0; g < round.size(); ++g) {
      if (copied[g].ok()) ready.push_back(round[g]);
      else (*results)[round[g]] = copied[g].Annotate("store: copying the GPU page of '" + keys[round[g]] + "' to host memory");
    }
    if (!ready.empty()) PutFrom(keys, sources, std::vector<Memory>(keys.size(), Memory::kHost), ready, results);
    ClientCounters::Add(parts_.counters.put_bounced, ready.size());
  }
}

void StoreClient::GetVia(Route route, const std::vector<std::string>& keys,
                         const std::vector<std::vector<StoreBuffer>>& buffers, std::vector<Status>* results,
                         std::vector<uint64_t>* lengths) {
  const NodeCaller::Scope scope(&parts_.caller);
  SweepCredits();
  std::vector<Memory> memory;
  CheckBuffers(keys, buffers, results, &memory);
  lengths->assign(keys.size(), 0);
  std::vector<NodeCall> calls = parts_.router.Group(keys, results, route);
  GetCall get(&parts_, keys, buffers, memory, results, lengths);
  get.Run(std::move(calls));
}

void StoreClient::LocateVia(Route route, const std::vector<std::string>& keys, std::vector<StorePage>* pages,
                            std::vector<Status>* results) {
  const NodeCaller::Scope scope(&parts_.caller);
  *results = CheckKeys(keys);
  pages->assign(keys.size(), StorePage{});
  std::vector<NodeCall> calls = parts_.router.Group(keys, results, route);
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kLookup, KeysOf(keys, call.keys));
  parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
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
        parts_.locations.Put(keys[i], CachedLocation{call.node->name, call.node->info.epoch, found[j]});
      }
    }
  }
}

uint64_t StoreClient::ExistsFromMappedPools(const std::vector<std::string>& keys, std::vector<NodeCall>* calls,
                                            std::vector<bool>* found) {
  // A home on this host whose pool is mapped answers from its table of
  // keys (SharedKeys): no message. Its hits are touched later, in one
  // message with others (QueueTouches), as the home's own answer would
  // have touched them. A key the table cannot answer goes to the home.
  uint64_t local = 0;
  for (NodeCall& call : *calls) {
    const auto map = parts_.maps.Find(call.node->segment);
    const SharedKeys* table = map == nullptr || map->epoch() != call.node->info.epoch ? nullptr : map->keys();
    if (table == nullptr) continue;
    std::vector<size_t> touched;
    std::erase_if(call.keys, [&](size_t i) {
      const SharedKeys::Answer a = table->Find(keys[i]);
      if (a == SharedKeys::Answer::kUnknown) return false;
      (*found)[i] = a == SharedKeys::Answer::kPresent;
      if ((*found)[i]) touched.push_back(i);
      ++local;
      return true;
    });
    if (!touched.empty()) parts_.QueueTouches(call.node->name, keys, touched);
  }
  std::erase_if(*calls, [](const NodeCall& call) { return call.keys.empty(); });
  return local;
}

void StoreClient::ExistsVia(Route route, const std::vector<std::string>& keys, std::vector<bool>* found,
                            uint64_t* local, const std::string* except, std::vector<Status>* failed) {
  const NodeCaller::Scope scope(&parts_.caller);
  SweepCredits();
  found->assign(keys.size(), false);
  std::vector<Status> results = CheckKeys(keys);
  std::vector<NodeCall> calls = parts_.router.Group(keys, &results, route);
  (void)Router::TakeCallTo(&calls, except);  // those keys stay false
  *local += ExistsFromMappedPools(keys, &calls, found);
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kExists, KeysOf(keys, call.keys));
  if (!calls.empty())
    parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
  if (failed != nullptr) failed->assign(keys.size(), Status::OK());
  for (NodeCall& call : calls) {
    std::vector<bool> bits;
    Status s = call.status;
    if (s.ok()) s = DecodeBits(call.reply, call.keys.size(), &bits);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      if (s.ok()) (*found)[call.keys[j]] = bits[j];
      else if (failed != nullptr) (*failed)[call.keys[j]] = s;
    }
  }
}

void StoreClient::KeyOpVia(Route route, Op op, const std::vector<std::string>& keys, std::vector<Status>* results) {
  const NodeCaller::Scope scope(&parts_.caller);
  *results = CheckKeys(keys);
  if (op == Op::kRemove)
    for (const std::string& k : keys) parts_.locations.Erase(k);
  std::vector<NodeCall> calls =
      op == Op::kUnpin ? UnpinCalls(keys, results, route) : parts_.router.Group(keys, results, route);
  for (NodeCall& call : calls) call.request = EncodeKeys(op, KeysOf(keys, call.keys));
  parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
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
      // unreachable keeps that page pinned).
      if (op == Op::kUnpin) pins_.Forget(keys[i], call.node->name);
      if (op == Op::kPin && (*results)[i].ok()) pins_.Record(keys[i], call.node->name);
    }
  }
}

std::vector<NodeCall> StoreClient::UnpinCalls(const std::vector<std::string>& keys, std::vector<Status>* results,
                                              Route route) {
  const auto snap = parts_.members->Current();
  std::vector<NodeCall> calls;
  std::vector<size_t> by_route;  // the keys with no pin of this process
  const auto call_to = [&](const std::string& member) {
    auto call = std::find_if(calls.begin(), calls.end(), [&](const NodeCall& c) { return c.node->name == member; });
    return call == calls.end() ? nullptr : &*call;
  };
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*results)[i].ok()) continue;
    const std::optional<std::string> holder = pins_.Holder(keys[i]);
    if (!holder) {
      by_route.push_back(i);
      continue;
    }
    // Sent to the member by name, whatever this process's view of it says:
    // a view can lag a restart, and a pin taken through a lagging view is
    // on the member's new life. (A member that restarted since the pin
    // answers that nothing is pinned.) One marked down here, or gone, is
    // asked all the same: a call that fails says so.
    NodeCall* call = call_to(*holder);
    if (call == nullptr) {
      auto node = std::find_if(snap->nodes.begin(), snap->nodes.end(), [&](const auto& n) { return n->name == *holder; });
      std::shared_ptr<const NodeView> target = node != snap->nodes.end() ? *node : nullptr;
      if (target == nullptr) {
        auto stub = std::make_shared<NodeView>();
        stub->name = *holder;
        target = std::move(stub);
      }
      call = &calls.emplace_back(NodeCall{std::move(target), {}, {}, {}, {}});
    }
    call->keys.push_back(i);
  }
  for (NodeCall& routed : parts_.router.Group(keys, by_route, results, route)) {
    NodeCall* call = call_to(routed.node->name);
    if (call == nullptr) calls.push_back(std::move(routed));
    else call->keys.insert(call->keys.end(), routed.keys.begin(), routed.keys.end());
  }
  return calls;
}

Status StoreClient::RemoveAll(uint64_t* removed) {
  const NodeCaller::Scope scope(&parts_.caller);
  *removed = 0;
  parts_.locations.Clear();
  const auto snap = parts_.members->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t n = 0; n < calls.size(); ++n) {
    calls[n].node = snap->nodes[n];
    calls[n].request = EncodeBare(Op::kRemoveAll);
  }
  parts_.caller.CallAll(&calls, net::DeadlineIn(parts_.settings.store_deadline_ms), Wait::kPollFirst);
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

}  // namespace kvfabric::store
