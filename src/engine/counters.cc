#include "engine/counters.h"

#include <algorithm>

namespace kvfabric::engine {

size_t SizeClassOf(uint64_t length) {
  return static_cast<size_t>(std::lower_bound(kSizeClassBytes.begin(), kSizeClassBytes.end(), length) -
                             kSizeClassBytes.begin());
}

PeerCounters* Counters::ForPeer(const std::string& name) {
  std::lock_guard<std::mutex> g(mu_);
  if (auto it = by_name_.find(name); it != by_name_.end()) return it->second;
  if (peers_.size() >= peer_labels_) return &other_;
  PeerCounters* p = &peers_.emplace_back(name);
  by_name_.emplace(name, p);
  return p;
}

void Counters::RequestEnded(PeerCounters* peer, bool write, uint64_t length, uint64_t bytes, Status::Code code,
                            int64_t latency_ns) {
  if (peer != nullptr) {
    Add(peer->requests[write]);
    if (bytes > 0) Add(peer->bytes[write], bytes);
    if (code != Status::Code::kOk) Add(peer->failures);
  }
  if (code != Status::Code::kOk) {
    const auto c = static_cast<size_t>(code);
    Add(failures_[write][c < kCodes ? c : static_cast<size_t>(Status::Code::kInternal)]);
    return;  // latency is of completed requests
  }
  latency_[write][SizeClassOf(length)].Add(latency_ns);
}

void Counters::Fill(EngineStats* out) const {
  auto peer = [](const PeerCounters& p) {
    PeerStats s;
    s.peer = p.name;
    s.write_requests = p.requests[1].load(std::memory_order_relaxed);
    s.read_requests = p.requests[0].load(std::memory_order_relaxed);
    s.write_bytes = p.bytes[1].load(std::memory_order_relaxed);
    s.read_bytes = p.bytes[0].load(std::memory_order_relaxed);
    s.failures = p.failures.load(std::memory_order_relaxed);
    return s;
  };
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const PeerCounters& p : peers_) out->peers.push_back(peer(p));
  }
  for (const PeerCounters* p : {&other_, &self_}) {
    PeerStats s = peer(*p);
    if (s.write_requests + s.read_requests > 0) out->peers.push_back(std::move(s));
  }
  for (int w = 1; w >= 0; --w) {
    const char* op = w ? "write" : "read";
    for (size_t c = 0; c < kCodes; ++c)
      if (const uint64_t n = failures_[w][c].load(std::memory_order_relaxed); n > 0)
        out->failures.push_back({op, std::string(Status::CodeName(static_cast<Status::Code>(c))), n});
    for (size_t k = 0; k < kSizeClassNames.size(); ++k)
      if (latency_[w][k].count() > 0) out->latency.push_back({op, kSizeClassNames[k], latency_[w][k].Read()});
  }
  out->reroutes_failed = reroutes_failed_.load(std::memory_order_relaxed);
  out->reroutes_stalled = reroutes_stalled_.load(std::memory_order_relaxed);
  out->reroutes_refused = reroutes_refused_.load(std::memory_order_relaxed);
  out->registrations_total = registrations_.load(std::memory_order_relaxed);
  out->registration_failures = registration_failures_.load(std::memory_order_relaxed);
  out->handshake_errors = handshake_errors_.load(std::memory_order_relaxed);
  out->metadata_errors = metadata_errors_.load(std::memory_order_relaxed);
}

}  // namespace kvfabric::engine
