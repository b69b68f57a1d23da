#include "metrics/families.h"

#include <initializer_list>
#include <limits>
#include <string>
#include <utility>

#include "metrics/endpoint.h"

namespace kvfabric::metrics {
namespace {

using prometheus::MetricFamily;
using prometheus::MetricType;
using Labels = std::vector<prometheus::ClientMetric::Label>;

// The histogram sample of `h` (cumulative buckets, +Inf last).
void AddHistogram(MetricFamily* f, Labels labels, const LatencyHistogram& h) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  uint64_t cumulative = 0;
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    const double bound = i < h.upper_seconds.size() ? h.upper_seconds[i] : std::numeric_limits<double>::infinity();
    m.histogram.bucket.push_back({cumulative, bound});
  }
  m.histogram.sample_count = cumulative;
  m.histogram.sample_sum = h.sum_seconds;
  f->metric.push_back(std::move(m));
}

// Families in the order they are first asked for.
class Builder {
 public:
  explicit Builder(std::string engine) : engine_(std::move(engine)) {}
  MetricFamily* Get(const std::string& name, const std::string& help, MetricType type) {
    for (auto& f : families_)
      if (f.name == name) return &f;
    families_.push_back(Family(name, help, type));
    return &families_.back();
  }
  void Add(const std::string& name, const std::string& help, MetricType type, Labels labels, double value) {
    labels.insert(labels.begin(), {"engine", engine_});
    AddSample(Get(name, help, type), std::move(labels), value);
  }
  void Counter(const std::string& name, const std::string& help, Labels labels, uint64_t value) {
    Add(name, help, MetricType::Counter, std::move(labels), static_cast<double>(value));
  }
  // One counter per value of the label `key`: {label value, count} pairs.
  void CountersBy(const std::string& name, const std::string& help, const std::string& key,
                  std::initializer_list<std::pair<const char*, uint64_t>> counts) {
    for (const auto& [label, count] : counts) Counter(name, help, {{key, label}}, count);
  }
  void Gauge(const std::string& name, const std::string& help, Labels labels, double value) {
    Add(name, help, MetricType::Gauge, std::move(labels), value);
  }
  void Histogram(const std::string& name, const std::string& help, Labels labels, const LatencyHistogram& h) {
    labels.insert(labels.begin(), {"engine", engine_});
    AddHistogram(Get(name, help, MetricType::Histogram), std::move(labels), h);
  }
  std::vector<MetricFamily> Take() { return std::move(families_); }

 private:
  const std::string engine_;
  std::vector<MetricFamily> families_;
};

}  // namespace

std::vector<MetricFamily> EngineFamilies(const EngineStats& s) {
  Builder b(s.engine);
  for (const RailStats& r : s.rails) {
    const Labels rail = {{"rail", std::to_string(r.index)}, {"provider", r.provider}, {"domain", r.domain}};
    auto with_op = [&rail](const char* op) {
      Labels l = rail;
      l.push_back({"op", op});
      return l;
    };
    const char* bytes = "Bytes of operations that completed on the rail";
    const char* ops = "Operations (slices of requests) that completed on the rail";
    b.Counter("kvfabric_rail_bytes_total", bytes, with_op("write"), r.write_bytes);
    b.Counter("kvfabric_rail_bytes_total", bytes, with_op("read"), r.read_bytes);
    b.Counter("kvfabric_rail_operations_total", ops, with_op("write"), r.writes);
    b.Counter("kvfabric_rail_operations_total", ops, with_op("read"), r.reads);
    b.Counter("kvfabric_rail_errors_total", "Operations that ended with an error on the rail", rail, r.errors);
    b.Counter("kvfabric_rail_stalls_total",
              "Times the rail was taken out of service: work in flight and nothing completing for KVF_RAIL_STALL_MS",
              rail, r.stalls);
    b.Counter("kvfabric_rail_recoveries_total", "Times the rail came back into service", rail, r.recoveries);
    b.Gauge("kvfabric_rail_in_service", "1 while the rail takes new work, 0 while it is out of service", rail,
            r.in_service ? 1 : 0);
    b.Gauge("kvfabric_rail_queued_operations", "Operations waiting for a credit on the rail", rail,
            static_cast<double>(r.queued));
    b.Gauge("kvfabric_rail_credits_in_use", "Operations with the provider (credits in use) on the rail", rail,
            static_cast<double>(r.in_flight));
    b.Gauge("kvfabric_rail_credits", "Credits of the rail (the provider's transmit depth)", rail,
            static_cast<double>(r.credits));
    b.Gauge("kvfabric_rail_peer_slots", "Address-vector slots in use on the rail", rail,
            static_cast<double>(r.peer_slots));
  }
  for (const PeerStats& p : s.peers) {
    const char* requests = "Requests that ended (completed, failed or timed out), by op and peer segment";
    const char* bytes = "Bytes requests moved, by op and peer segment";
    b.Counter("kvfabric_requests_total", requests, {{"op", "write"}, {"peer", p.peer}}, p.write_requests);
    b.Counter("kvfabric_requests_total", requests, {{"op", "read"}, {"peer", p.peer}}, p.read_requests);
    b.Counter("kvfabric_transferred_bytes_total", bytes, {{"op", "write"}, {"peer", p.peer}}, p.write_bytes);
    b.Counter("kvfabric_transferred_bytes_total", bytes, {{"op", "read"}, {"peer", p.peer}}, p.read_bytes);
    b.Counter("kvfabric_peer_failures_total", "Requests to the peer that failed or timed out", {{"peer", p.peer}},
              p.failures);
  }
  for (const FailureStats& f : s.failures)
    b.Counter("kvfabric_request_failures_total", "Requests that failed, by op and status code (TIMEOUT: timed out)",
              {{"op", f.op}, {"code", f.code}}, f.count);
  for (const LatencyStats& l : s.latency)
    b.Histogram("kvfabric_request_latency_seconds",
                "Request latency from submit to completion, by op and size class (the largest size in the class)",
                {{"op", l.op}, {"size", l.size_class}}, l.histogram);
  const char* reroutes = "Operations moved to another rail of the same peer, by why";
  b.CountersBy("kvfabric_reroutes_total", reroutes, "reason",
               {{"failed", s.reroutes_failed}, {"stalled", s.reroutes_stalled}});
  b.Counter("kvfabric_reroute_refusals_total", "Operations that failed or stalled with no other rail to take them",
            {}, s.reroutes_refused);
  for (const RegistrationStats& r : s.registrations) {
    b.Gauge("kvfabric_registered_buffers", "Buffers registered now, by location", {{"location", r.location}},
            static_cast<double>(r.buffers));
    b.Gauge("kvfabric_registered_bytes", "Bytes registered now, by location", {{"location", r.location}},
            static_cast<double>(r.bytes));
  }
  b.Counter("kvfabric_registrations_total", "Buffers registered since the engine started", {},
            s.registrations_total);
  b.Counter("kvfabric_registration_failures_total", "Registrations refused (unmapped memory, provider errors)", {},
            s.registration_failures);
  b.Counter("kvfabric_handshake_errors_total", "Handshakes with peers that failed (unreachable, refused, malformed)",
            {}, s.handshake_errors);
  b.Counter("kvfabric_metadata_errors_total",
            "Peer descriptors that could not be fetched or were refused (metadata store, seal, stale, wrong name)", {},
            s.metadata_errors);
  b.Counter("kvfabric_handshakes_refused_total",
            "Handshakes this engine's server refused (authentication, malformed frames)", {}, s.handshakes_refused);
  b.Gauge("kvfabric_peers", "Peer segments open now", {}, static_cast<double>(s.segments_open));
  b.CountersBy("kvfabric_notice_messages_total",
               "WRITEs' notices sent as handshake messages (KVF_NOTICE_PATH), by whether the target took them",
               "result", {{"sent", s.notice_messages_sent}, {"failed", s.notice_messages_failed}});
  return b.Take();
}

std::vector<MetricFamily> StoreFamilies(const std::string& engine, const std::string& node, const StoreStats& s,
                                        const std::vector<LatencyStats>& latency) {
  Builder b(engine);
  if (!node.empty())
    b.Gauge("kvfabric_store_node_info", "A store node served by this engine, by its control address (always 1)",
            {{"node", node}}, 1);
  b.Counter("kvfabric_store_puts_total", "Keys this process asked to put", {}, s.put_keys);
  b.Counter("kvfabric_store_put_bytes_total", "Bytes of the pages it put", {}, s.put_bytes);
  b.Counter("kvfabric_store_put_failures_total", "Keys whose put failed", {}, s.put_failures);
  b.Counter("kvfabric_store_gets_total", "Keys this process asked to get", {}, s.get_keys);
  b.Counter("kvfabric_store_hits_total", "Keys whose page it got", {}, s.get_hits);
  b.Counter("kvfabric_store_get_bytes_total", "Bytes of the pages it got", {}, s.get_bytes);
  const char* misses = "Gets that found no usable page, by reason: absent (no page under the key), checksum (the "
                       "bytes did not verify), late (the READ missed its read window), node_down (member "
                       "unreachable, timeout, transfer error)";
  b.CountersBy("kvfabric_store_misses_total", misses, "reason",
               {{"absent", s.misses_absent}, {"checksum", s.misses_checksum}, {"late", s.misses_late},
                {"node_down", s.get_failures}});
  b.Counter("kvfabric_store_location_cache_hits_total",
            "Pages read at once from a remembered location and confirmed", {}, s.get_cached);
  b.Counter("kvfabric_store_location_cache_stale_total", "Remembered locations their lookup did not confirm", {},
            s.get_cached_stale);
  b.Counter("kvfabric_store_exists_total", "Keys this process asked about", {}, s.exists_keys);
  b.Counter("kvfabric_store_exists_hits_total", "Keys found", {}, s.exists_hits);
  b.Counter("kvfabric_store_exists_local_total",
            "Keys asked about that the table of keys of a member on this host answered, with no message "
            "(KVF_STORE_SHARE_POOLS)",
            {}, s.exists_local);
  b.Counter("kvfabric_store_control_round_trips_total", "Control messages sent to members", {}, s.control_calls);
  b.Counter("kvfabric_store_control_failures_total", "Control messages that failed (unreachable, timeout)", {},
            s.control_failures);
  b.Counter("kvfabric_store_copied_pages_total",
            "Pages got or put by copying them from or into the shared pool of a member on this host, not through "
            "the fabric (KVF_STORE_SHARE_POOLS)",
            {}, s.copied_pages);
  b.Gauge("kvfabric_store_pool_bytes", "Bytes of this node's pool", {}, static_cast<double>(s.pool_bytes));
  b.Gauge("kvfabric_store_pool_used_bytes", "Bytes of the pool holding pages", {}, static_cast<double>(s.used_bytes));
  b.Gauge("kvfabric_store_pool_quarantined_bytes", "Bytes freed but not reusable yet (a GET may still read them)", {},
          static_cast<double>(s.quarantined_bytes));
  b.Gauge("kvfabric_store_pages", "Pages this node holds", {}, static_cast<double>(s.pages));
  b.Gauge("kvfabric_store_pinned_pages", "Pages pinned", {}, static_cast<double>(s.pinned_pages));
  b.Counter("kvfabric_store_evictions_total", "Pages evicted to make room", {}, s.evictions);
  b.Counter("kvfabric_store_removals_total", "Pages removed", {}, s.removals);
  b.Counter("kvfabric_store_overwrites_total", "Pages replaced by a put of the same key", {}, s.overwrites);
  b.Counter("kvfabric_store_refusals_total", "Puts refused: the pool was full of pages in use", {}, s.refusals);
  const char* served = "Bytes of pages this node served, by how: stored (puts it committed), located (lookup hits, "
                       "which clients read next), touched (read from a remembered location and reported by the "
                       "client, a key at most once per client every 200 ms: a lower bound)";
  b.CountersBy("kvfabric_store_served_bytes_total", served, "how",
               {{"stored", s.stored_bytes}, {"located", s.located_bytes}, {"touched", s.touched_bytes}});
  b.Gauge("kvfabric_store_members", "Members in placement now (reachable, with a pool)", {},
          static_cast<double>(s.members));
  for (const LatencyStats& l : latency)
    b.Histogram("kvfabric_store_call_latency_seconds", "Latency of the store's batch calls, by call",
                {{"call", l.op}}, l.histogram);
  return b.Take();
}

}  // namespace kvfabric::metrics
