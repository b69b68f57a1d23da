// kvfabric::EngineStats: what an engine counted since it started, as of one
// call of Engine::Stats. The same figures feed the Prometheus endpoint
// (KVF_METRICS_LISTEN), Python's Engine.stats(), the MC_TE_METRIC line and
// `kvfabric top`. Counters only grow; gauges (marked "now") are as of the call.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace kvfabric {

// A latency histogram: counts[i] requests took at most upper_seconds[i]
// (and more than upper_seconds[i-1]); the last count, one past the bounds,
// took longer than every bound. Not cumulative.
struct LatencyHistogram {
  std::vector<double> upper_seconds;
  std::vector<uint64_t> counts;
  uint64_t count = 0;       // requests
  double sum_seconds = 0;   // their total latency
};

// One rail (a NIC's shared endpoint, or the shm rail). Operations are the
// slices rails post (a request may be cut into several, over several rails).
struct RailStats {
  size_t index = 0;
  std::string label;      // "rail 2 (efa rdmap79s0-rdm)"
  std::string provider;
  std::string domain;
  uint64_t write_bytes = 0;  // bytes of WRITE operations that completed
  uint64_t read_bytes = 0;
  uint64_t writes = 0;       // WRITE operations that completed
  uint64_t reads = 0;
  uint64_t errors = 0;       // operations that completed with an error
  uint64_t stalls = 0;       // times the rail was taken out of service (KVF_RAIL_STALL_MS)
  uint64_t recoveries = 0;   // times it came back (something completed on it again)
  bool in_service = true;    // now
  uint64_t queued = 0;       // now: operations waiting for a credit
  uint64_t in_flight = 0;    // now: credits in use (operations with the provider)
  uint64_t credits = 0;      // the rail's credits (the provider's tx depth)
  uint64_t peer_slots = 0;   // now: address-vector slots in use
};

// Requests to one peer (the segment name), or to the folded rest.
struct PeerStats {
  std::string peer;  // segment name; "other" holds the peers past KVF_METRICS_PEER_LABELS; "self" local copies
  uint64_t write_requests = 0;  // requests ended (completed or not)
  uint64_t write_bytes = 0;     // bytes moved
  uint64_t read_requests = 0;
  uint64_t read_bytes = 0;
  uint64_t failures = 0;        // requests that failed or timed out
};

// Requests of one op that ended without completing, by status code.
struct FailureStats {
  std::string op;    // "write", "read"
  std::string code;  // the status code's name (Status::CodeName): "Timeout", "NetworkError", ...
  uint64_t count = 0;
};

// Submit-to-completion latency of the requests of one op and size class.
struct LatencyStats {
  std::string op;          // "write", "read"
  std::string size_class;  // "4KiB" (at most), "64KiB", "1MiB", "16MiB", "larger"
  LatencyHistogram histogram;
};

// Registered memory of one location ("cpu:0", "cuda:1").
struct RegistrationStats {
  std::string location;
  uint64_t buffers = 0;  // now
  uint64_t bytes = 0;    // now
};

struct EngineStats {
  std::string engine;          // the engine's name (host:port)
  bool counting = true;        // KVF_METRICS: request counters on (rails always count)
  std::vector<RailStats> rails;
  std::vector<PeerStats> peers;
  std::vector<FailureStats> failures;  // nonzero rows only
  std::vector<LatencyStats> latency;   // rows with at least one request
  uint64_t reroutes_failed = 0;    // operations moved to another rail after failing
  uint64_t reroutes_stalled = 0;   // moved off a stalled rail
  uint64_t reroutes_refused = 0;   // failed or stalled with no other rail to take them
  std::vector<RegistrationStats> registrations;
  uint64_t registrations_total = 0;    // RegisterMemory calls that succeeded
  uint64_t registration_failures = 0;  // and that failed
  uint64_t handshake_errors = 0;  // handshakes with peers that failed (unreachable, refused, malformed)
  uint64_t metadata_errors = 0;   // descriptor fetches or checks that failed (metadata store, seal, stale)
  uint64_t handshakes_refused = 0;  // malformed or unauthorized handshakes this engine's server refused
  uint64_t segments_open = 0;     // now: peer segments open
  // WRITEs' notices sent as handshake messages (KVF_NOTICE_PATH), and
  // those that did not reach their target.
  uint64_t notice_messages_sent = 0;
  uint64_t notice_messages_failed = 0;
};

}  // namespace kvfabric
