#include "store/store_client.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <utility>

#include "store/checksum.h"

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

void Add(std::atomic<uint64_t>& c, uint64_t n) { c.fetch_add(n, std::memory_order_relaxed); }

// The replies of a fan-out, shared with the callbacks: one that comes after
// the caller stopped waiting writes here, never into the caller's frame.
struct Replies {
  std::mutex mu;
  std::condition_variable cv;
  size_t pending = 0;
  std::vector<std::pair<Status, std::string>> got;
  std::vector<bool> arrived;
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

}  // namespace

StoreClient::StoreClient(Engine* engine, const Settings& settings, ControlClient* control, MemberView* members,
                         NodeService* self)
    : engine_(engine), settings_(settings), control_(control), members_(members), self_(self), runner_(engine) {}

std::vector<StoreClient::NodeCall> StoreClient::GroupByHome(const std::vector<std::string>& keys,
                                                            std::vector<Status>* results) const {
  const auto snap = members_->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!(*results)[i].ok()) continue;
    const size_t home = snap->placement.Home(keys[i]);
    if (home >= snap->nodes.size()) {
      (*results)[i] = Status::Unavailable("store: no member with a pool is reachable (see KVF_STORE_MEMBERS or the metadata backend)");
      continue;
    }
    calls[home].keys.push_back(i);
  }
  std::vector<NodeCall> used;
  for (size_t n = 0; n < calls.size(); ++n) {
    if (calls[n].keys.empty()) continue;
    calls[n].node = snap->nodes[n];
    used.push_back(std::move(calls[n]));
  }
  return used;
}

void StoreClient::CallNodes(std::vector<NodeCall>* calls, net::Deadline deadline) {
  auto replies = std::make_shared<Replies>();
  replies->pending = calls->size();
  replies->got.resize(calls->size());
  replies->arrived.resize(calls->size(), false);
  for (size_t c = 0; c < calls->size(); ++c) {
    NodeCall& call = (*calls)[c];
    auto done = [replies, c](Status s, std::string reply) {
      std::lock_guard<std::mutex> g(replies->mu);
      replies->got[c] = {std::move(s), std::move(reply)};
      replies->arrived[c] = true;
      if (--replies->pending == 0) replies->cv.notify_all();
    };
    Add(counters_.control_calls, 1);
    if (self_ != nullptr && call.node->name == self_->address())
      self_->Handle(std::move(call.request), std::move(done));
    else
      control_->Call(call.node->name, std::move(call.request), deadline, std::move(done));
  }
  std::unique_lock<std::mutex> g(replies->mu);
  // The control client ends every call by its deadline; this node's own
  // puts may run a little past it.
  replies->cv.wait_until(g, deadline + std::chrono::seconds(1), [&] { return replies->pending == 0; });
  for (size_t c = 0; c < calls->size(); ++c) {
    NodeCall& call = (*calls)[c];
    auto& [status, reply] = replies->got[c];
    call.status = replies->arrived[c] ? std::move(status) : Status::Timeout("no answer in time");
    call.reply = std::move(reply);
    if (call.status.ok()) continue;
    Add(counters_.control_failures, 1);
    call.status = call.status.Annotate("store member " + call.node->name);
    const auto code = call.status.code();
    if (code == Status::Code::kNetworkError || code == Status::Code::kTimeout) members_->MarkDown(call.node->name, call.status);
  }
}

void StoreClient::CheckBuffers(const std::vector<std::string>& keys,
                               const std::vector<std::vector<StoreBuffer>>& buffers,
                               std::vector<Status>* results) const {
  *results = CheckKeys(keys);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status& r = (*results)[i];
    if (r.ok() && buffers[i].empty()) r = Status::InvalidArgument("store: key '" + keys[i] + "' has no buffers");
    for (const StoreBuffer& b : buffers[i]) {
      if (!r.ok()) break;
      if (b.addr == nullptr || b.length == 0)
        r = Status::InvalidArgument("store: key '" + keys[i] + "' has a null or empty buffer");
    }
  }
}

void StoreClient::Put(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results) {
  CheckBuffers(keys, buffers, results);
  for (size_t i = 0; i < keys.size(); ++i)
    if ((*results)[i].ok() && TotalBytes(buffers[i]) > static_cast<uint64_t>(settings_.store_max_page_bytes))
      (*results)[i] = Status::InvalidArgument("store: the page of key '" + keys[i] +
                                              "' is larger than KVF_STORE_MAX_PAGE_BYTES");
  std::vector<NodeCall> calls = GroupByHome(keys, results);
  const int64_t deadline_ms = settings_.store_deadline_ms;
  for (NodeCall& call : calls) {
    PutRequest put;
    put.writer = engine_->name();
    put.budget_ms = static_cast<uint32_t>(deadline_ms - std::min<int64_t>(deadline_ms / 5, 500));
    for (size_t i : call.keys) {
      PutItem item{keys[i], {}};
      for (const StoreBuffer& b : buffers[i]) item.sources.push_back({reinterpret_cast<uintptr_t>(b.addr), b.length});
      put.items.push_back(std::move(item));
    }
    call.request = EncodePut(put);
  }
  CallNodes(&calls, net::DeadlineIn(deadline_ms));
  for (NodeCall& call : calls) {
    std::vector<Status> per_key;
    Status s = call.status;
    if (s.ok()) s = DecodeStatuses(call.reply, call.keys.size(), &per_key);
    for (size_t j = 0; j < call.keys.size(); ++j) (*results)[call.keys[j]] = s.ok() ? per_key[j] : s;
  }
  Add(counters_.put_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) Add(counters_.put_bytes, TotalBytes(buffers[i]));
    else Add(counters_.put_failures, 1);
  }
}

void StoreClient::Get(const std::vector<std::string>& keys, const std::vector<std::vector<StoreBuffer>>& buffers,
                      std::vector<Status>* results, std::vector<uint64_t>* lengths) {
  CheckBuffers(keys, buffers, results);
  lengths->assign(keys.size(), 0);
  std::vector<NodeCall> calls = GroupByHome(keys, results);
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kLookup, KeysOf(keys, call.keys));
  const auto asked = Clock::now();
  const auto deadline = asked + std::chrono::milliseconds(settings_.store_deadline_ms);
  CallNodes(&calls, deadline);

  // The READs: key i's are requests [groups[i].first, groups[i].second).
  std::vector<Location> where(keys.size());
  std::vector<const NodeView*> home(keys.size(), nullptr);
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups(keys.size());
  auto read_by = deadline;  // no READ starts after its lookup's read window
  for (NodeCall& call : calls) {
    std::vector<Location> found;
    Status s = call.status;
    if (s.ok()) s = DecodeLocations(call.reply, call.keys.size(), &found);
    read_by = std::min(read_by, asked + std::chrono::milliseconds(call.node->info.read_window_ms));
    for (size_t j = 0; j < call.keys.size(); ++j) {
      const size_t i = call.keys[j];
      Status& r = (*results)[i];
      if (!s.ok()) {
        r = s;
        continue;
      }
      const Location& loc = found[j];
      if (!loc.found) {
        r = Status::NotFound("store: no page under key '" + keys[i] + "'");
        Add(counters_.misses_absent, 1);
        continue;
      }
      if (TotalBytes(buffers[i]) < loc.length) {
        r = Status::InvalidArgument("store: the page of key '" + keys[i] + "' has " + std::to_string(loc.length) +
                                    " bytes, more than its buffers hold");
        continue;
      }
      where[i] = loc;
      home[i] = call.node.get();
      groups[i].first = requests.size();
      uint64_t left = loc.length, remote = loc.addr;
      for (const StoreBuffer& b : buffers[i]) {
        if (left == 0) break;
        const uint64_t n = std::min<uint64_t>(left, b.length);
        requests.push_back({OpCode::kRead, b.addr, call.node->segment, remote, static_cast<size_t>(n)});
        remote += n;
        left -= n;
      }
      groups[i].second = requests.size();
    }
  }
  if (Clock::now() >= read_by) {  // the slots may be reused from now on: read nothing
    for (size_t i = 0; i < keys.size(); ++i) {
      if (groups[i].first == groups[i].second || !(*results)[i].ok()) continue;
      (*results)[i] = Status::NotFound("store: key '" + keys[i] + "': its lookup is older than the read window");
      Add(counters_.misses_late, 1);
    }
    requests.clear();
    for (auto& g : groups) g = {0, 0};
  }
  std::vector<Status> outcomes;
  runner_.Run(requests, groups, read_by, &outcomes);
  for (size_t i = 0; i < keys.size(); ++i) {
    Status& r = (*results)[i];
    if (!r.ok() || groups[i].first == groups[i].second) continue;
    if (!outcomes[i].ok()) {
      r = outcomes[i].Annotate("store: reading the page of '" + keys[i] + "'");
      // The member's engine did not serve the READ: it died, or restarted (its
      // lookup answered, but this view still holds the old engine's segment).
      // Out of placement like a failed call, and greeted again later.
      const auto code = outcomes[i].code();
      if (code == Status::Code::kNetworkError || code == Status::Code::kTimeout || code == Status::Code::kFabricError)
        members_->MarkDown(home[i]->name, r);
      continue;
    }
    if (settings_.store_verify) {
      std::vector<ByteRange> pieces;
      for (const StoreBuffer& b : buffers[i]) pieces.push_back({b.addr, b.length});
      if (!(ChecksumOf(pieces, where[i].length) == where[i].checksum)) {
        r = Status::NotFound("store: the page of key '" + keys[i] +
                             "' did not verify (replaced or evicted while read, or corrupt): a miss");
        Add(counters_.misses_checksum, 1);
        continue;
      }
    }
    (*lengths)[i] = where[i].length;
  }
  Add(counters_.get_keys, keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    if ((*results)[i].ok()) {
      Add(counters_.get_hits, 1);
      Add(counters_.get_bytes, (*lengths)[i]);
    } else if ((*results)[i].code() != Status::Code::kNotFound) {
      Add(counters_.get_failures, 1);
    }
  }
}

void StoreClient::Exists(const std::vector<std::string>& keys, std::vector<bool>* found) {
  found->assign(keys.size(), false);
  std::vector<Status> results = CheckKeys(keys);
  std::vector<NodeCall> calls = GroupByHome(keys, &results);
  for (NodeCall& call : calls) call.request = EncodeKeys(Op::kExists, KeysOf(keys, call.keys));
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms));
  uint64_t hits = 0;
  for (NodeCall& call : calls) {
    std::vector<bool> bits;
    if (!call.status.ok() || !DecodeBits(call.reply, call.keys.size(), &bits).ok()) continue;
    for (size_t j = 0; j < call.keys.size(); ++j) {
      (*found)[call.keys[j]] = bits[j];
      hits += bits[j] ? 1 : 0;
    }
  }
  Add(counters_.exists_keys, keys.size());
  Add(counters_.exists_hits, hits);
}

void StoreClient::KeyOp(Op op, const std::vector<std::string>& keys, std::vector<Status>* results) {
  *results = CheckKeys(keys);
  std::vector<NodeCall> calls = GroupByHome(keys, results);
  for (NodeCall& call : calls) call.request = EncodeKeys(op, KeysOf(keys, call.keys));
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms));
  const char* what = op == Op::kUnpin ? "no pinned page" : "no page";
  for (NodeCall& call : calls) {
    std::vector<bool> bits;
    Status s = call.status;
    if (s.ok()) s = DecodeBits(call.reply, call.keys.size(), &bits);
    for (size_t j = 0; j < call.keys.size(); ++j) {
      const size_t i = call.keys[j];
      if (!s.ok()) (*results)[i] = s;
      else if (!bits[j]) (*results)[i] = Status::NotFound(std::string("store: ") + what + " under key '" + keys[i] + "'");
    }
  }
}

Status StoreClient::RemoveAll(uint64_t* removed) {
  *removed = 0;
  const auto snap = members_->Current();
  std::vector<NodeCall> calls(snap->nodes.size());
  for (size_t n = 0; n < calls.size(); ++n) {
    calls[n].node = snap->nodes[n];
    calls[n].request = EncodeBare(Op::kRemoveAll);
  }
  CallNodes(&calls, net::DeadlineIn(settings_.store_deadline_ms));
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
  out->exists_keys = get(counters_.exists_keys);
  out->exists_hits = get(counters_.exists_hits);
  out->control_calls = get(counters_.control_calls);
  out->control_failures = get(counters_.control_failures);
}

}  // namespace kvfabric::store
