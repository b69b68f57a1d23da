// metrics::Endpoint: the HTTP endpoint operators scrape (KVF_METRICS_LISTEN).
// GET /metrics serves every source joined to it in the Prometheus text
// format (prometheus-cpp's data model and serializer); GET /healthz answers
// "ok"; any other path or method is a 404 naming the two that exist.
//
// One endpoint per listen address per process: every engine and store of a
// process that asks for the same address joins the same endpoint, and each
// labels its own samples (engine="host:port"). Separate processes need
// separate ports: give each its own, or a range ("0.0.0.0:9400-9415") from
// which each takes the first free port. Sources are read at scrape time;
// the hot path only keeps its own lock-free counters.
#pragma once

#include <prometheus/metric_family.h>

#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/status.h"

namespace httplib {
class Server;
}

namespace kvfabric::metrics {

// A part of the process that has figures to show (an engine, a store):
// called at each scrape, from the endpoint's thread.
using Source = std::function<std::vector<prometheus::MetricFamily>()>;

// "host:port" or "host:first-last" (KVF_METRICS_LISTEN): the host (IPv6 in
// brackets, which are removed) and the ports to try in order; port 0 is any
// free one. InvalidArgument saying what is expected otherwise.
Status ParseListen(const std::string& spec, std::string* host, int* first_port, int* last_port);

class Endpoint {
 public:
  // Membership of one source; leaving (destruction) removes the source,
  // waiting for a scrape that is reading it, and stops the endpoint when it
  // was the last.
  class Membership {
   public:
    ~Membership();
    Membership(const Membership&) = delete;
    Membership& operator=(const Membership&) = delete;
    // The address the endpoint listens on ("127.0.0.1:9400").
    const std::string& address() const;

   private:
    friend class Endpoint;
    Membership(std::shared_ptr<Endpoint> e, size_t id) : endpoint_(std::move(e)), id_(id) {}
    std::shared_ptr<Endpoint> endpoint_;
    size_t id_;
  };

  // Adds `source` to this process's endpoint on `listen`, starting it on
  // the first free port of the spec when none runs there yet.
  // InvalidArgument for a malformed spec, Unavailable when no port of it
  // can be bound.
  static Status Join(const std::string& listen, Source source, std::unique_ptr<Membership>* out);
  // What an engine or a store does with KVF_METRICS_LISTEN: nothing when
  // `listen` is empty; Join otherwise. A malformed value is returned (it
  // fails the caller); a port that cannot be bound is a warning naming
  // `who`, and *out stays null: serving goes on without an endpoint.
  static Status JoinIfSet(const std::string& listen, const std::string& who, Source source,
                          std::unique_ptr<Membership>* out);

  ~Endpoint();
  Endpoint(const Endpoint&) = delete;
  Endpoint& operator=(const Endpoint&) = delete;

  const std::string& address() const { return address_; }
  // What GET /metrics returns now.
  std::string Render();

 private:
  Endpoint() = default;
  static Status Start(const std::string& listen, std::shared_ptr<Endpoint>* out);
  void Leave(size_t id);

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  std::string address_;
  std::mutex mu_;  // held while sources are read: a leaving source waits for the scrape
  size_t next_id_ = 0;
  std::vector<std::pair<size_t, Source>> sources_;
};

// A family of `type` named `name` with `help`, for AddSample.
prometheus::MetricFamily Family(const std::string& name, const std::string& help, prometheus::MetricType type);
// Appends a counter or gauge sample (as the family's type) with `labels`.
void AddSample(prometheus::MetricFamily* family, std::vector<prometheus::ClientMetric::Label> labels, double value);

}  // namespace kvfabric::metrics
