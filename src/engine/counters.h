// Counters: what the engine counts of requests, beside what each rail
// counts of its operations (fabric::RailCounters). The hot path touches
// relaxed atomics only: a request's end adds to its op's totals, its
// peer's, one latency bucket, and a failure row when it failed. Reading
// them (Fill) takes a lock only over the peer list.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "kvfabric/stats.h"
#include "kvfabric/status.h"
#include "metrics/histogram.h"

namespace kvfabric::engine {

// The size classes of request latency: a request of `length` bytes is in
// the first class whose bound is at least its length, the last ("larger")
// past them all. kSizeClassNames name them (the class's largest size).
inline constexpr std::array<uint64_t, 4> kSizeClassBytes = {4 << 10, 64 << 10, 1 << 20, 16 << 20};
inline constexpr std::array<const char*, 5> kSizeClassNames = {"4KiB", "64KiB", "1MiB", "16MiB", "larger"};
size_t SizeClassOf(uint64_t length);

// The requests to one peer (or to the peers folded into "other").
struct PeerCounters {
  explicit PeerCounters(std::string n) : name(std::move(n)) {}
  const std::string name;
  std::array<std::atomic<uint64_t>, 2> requests{};  // [write?]: ended requests
  std::array<std::atomic<uint64_t>, 2> bytes{};     // [write?]: bytes moved
  std::atomic<uint64_t> failures{0};
};

class Counters {
 public:
  // The name of the counters shared by the peers past `peer_labels`, and
  // of those of the engine's own segment (local copies).
  static constexpr const char* kOther = "other";
  static constexpr const char* kSelf = "self";

  // `peer_labels` (KVF_METRICS_PEER_LABELS) peers get counters of their
  // own, the first that many names seen; later ones share kOther, so a
  // scrape stays bounded however many peers come and go.
  explicit Counters(size_t peer_labels) : peer_labels_(peer_labels) {}

  // The counters of peer segment `name` (stable for the engine's life).
  PeerCounters* ForPeer(const std::string& name);
  PeerCounters* self() { return &self_; }

  // A request to `peer` ended: `bytes` of its `length` moved, `code` kOk
  // when it completed, `latency_ns` from submit to its end.
  void RequestEnded(PeerCounters* peer, bool write, uint64_t length, uint64_t bytes, Status::Code code,
                    int64_t latency_ns);
  void Rerouted(bool failed) { Add(failed ? reroutes_failed_ : reroutes_stalled_); }
  void RerouteRefused() { Add(reroutes_refused_); }
  void Registered(bool ok) { Add(ok ? registrations_ : registration_failures_); }
  void HandshakeFailed() { Add(handshake_errors_); }
  void MetadataFailed() { Add(metadata_errors_); }

  // Fills the request figures of `out`: peers, failures, latency, reroutes,
  // registration and handshake counts (not rails nor gauges).
  void Fill(EngineStats* out) const;

 private:
  static constexpr size_t kCodes = static_cast<size_t>(Status::Code::kClosed) + 1;
  static void Add(std::atomic<uint64_t>& c, uint64_t n = 1) { c.fetch_add(n, std::memory_order_relaxed); }

  const size_t peer_labels_;
  std::array<std::array<metrics::Histogram, kSizeClassNames.size()>, 2> latency_;  // [write?][size class]
  std::array<std::array<std::atomic<uint64_t>, kCodes>, 2> failures_{};            // [write?][code]
  std::atomic<uint64_t> reroutes_failed_{0}, reroutes_stalled_{0}, reroutes_refused_{0};
  std::atomic<uint64_t> registrations_{0}, registration_failures_{0};
  std::atomic<uint64_t> handshake_errors_{0}, metadata_errors_{0};
  PeerCounters self_{kSelf};
  PeerCounters other_{kOther};
  mutable std::mutex mu_;            // guards peers_ and by_name_
  std::deque<PeerCounters> peers_;   // stable addresses
  std::unordered_map<std::string, PeerCounters*> by_name_;
};

}  // namespace kvfabric::engine
