#include "metrics/endpoint.h"

#include <httplib.h>
#include <prometheus/text_serializer.h>

#include <charconv>
#include <chrono>
#include <map>
#include <sstream>

#include "common/log.h"
#include "common/text.h"

namespace kvfabric::metrics {
namespace {

// Threads serving scrapes: a scrape is rare and short.
// Threads serving connections, and how long one waits for a request's
// bytes: clients that send half a request and stop hold a thread each for
// that long at most, so scrapes wait at most that long behind as many of
// them as there are threads.
constexpr size_t kServerThreads = 4;
constexpr auto kReadTimeout = std::chrono::seconds(1);

bool ParsePort(std::string_view s, int* out) {
  int v = -1;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || s.empty() || v < 0 || v > 65535) return false;
  *out = v;
  return true;
}

// The endpoints of this process, by listen spec.
// Both leaked: an engine may be destroyed after static destructors ran
// (a Python interpreter exiting).
std::mutex& RegistryMutex() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::map<std::string, std::weak_ptr<Endpoint>>& Registry() {
  static auto* endpoints = new std::map<std::string, std::weak_ptr<Endpoint>>();
  return *endpoints;
}

}  // namespace

Status ParseListen(const std::string& spec, std::string* host, int* first_port, int* last_port) {
  const Status bad = Status::InvalidArgument(text::Format(
      "KVF_METRICS_LISTEN='{}': expected host:port or host:first-last (e.g. 0.0.0.0:9400 or 0.0.0.0:9400-9415; "
      "port 0 takes any free port)",
      spec));
  const auto colon = spec.rfind(':');
  if (colon == std::string::npos || colon == 0) return bad;
  std::string h = spec.substr(0, colon);
  if (h.size() > 1 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  const std::string_view ports = std::string_view(spec).substr(colon + 1);
  const auto dash = ports.find('-');
  int first = -1, last = -1;
  if (!ParsePort(ports.substr(0, dash), &first)) return bad;
  last = first;
  if (dash != std::string_view::npos && (!ParsePort(ports.substr(dash + 1), &last) || last < first || first == 0))
    return bad;
  if (h.empty()) return bad;
  *host = std::move(h);
  *first_port = first;
  *last_port = last;
  return Status::OK();
}

Status Endpoint::Start(const std::string& listen, std::shared_ptr<Endpoint>* out) {
  std::string host;
  int first = 0, last = 0;
  KVF_RETURN_IF_ERROR(ParseListen(listen, &host, &first, &last));
  std::shared_ptr<Endpoint> e(new Endpoint());
  e->server_ = std::make_unique<httplib::Server>();
  e->server_->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  e->server_->set_read_timeout(kReadTimeout);
  e->server_->set_keep_alive_timeout(std::chrono::duration_cast<std::chrono::seconds>(kReadTimeout).count());
  // httplib sets SO_REUSEPORT, with which a second process binds the same
  // port and scrapes land on either at random: a port in use must be refused.
  e->server_->set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  Endpoint* self = e.get();
  e->server_->Get("/metrics", [self](const httplib::Request&, httplib::Response& res) {
    res.set_content(self->Render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  e->server_->Get("/healthz", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("ok\n", "text/plain");
  });
  e->server_->set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.status == 404 || res.status == 405 || res.status == 400) {
      res.status = 404;
      res.set_content(text::Format("no {} {} here: GET /metrics (Prometheus text format) or GET /healthz\n",
                                   req.method, req.path),
                      "text/plain");
    }
  });
  int bound = -1;
  if (first == 0) {
    bound = e->server_->bind_to_any_port(host);
  } else {
    for (int p = first; p <= last && bound < 0; ++p)
      if (e->server_->bind_to_port(host, p)) bound = p;
  }
  if (bound <= 0)
    return Status::Unavailable(text::Format(
        "metrics endpoint: cannot listen on {} (every port in use, or not an address of this host); set "
        "KVF_METRICS_LISTEN to a free host:port, or a range each process takes one of",
        listen));
  e->address_ = (host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" + std::to_string(bound);
  e->thread_ = std::thread([self] { self->server_->listen_after_bind(); });
  // stop() does nothing to a server not yet running, whose thread would
  // then listen for ever: return only once it runs.
  while (!e->server_->is_running()) std::this_thread::sleep_for(std::chrono::microseconds(100));
  KVF_LOG_INFO("metrics: serving http://{}/metrics and /healthz", e->address_);
  *out = std::move(e);
  return Status::OK();
}

Status Endpoint::Join(const std::string& listen, Source source, std::unique_ptr<Membership>* out) {
  std::lock_guard<std::mutex> g(RegistryMutex());
  std::shared_ptr<Endpoint> e = Registry()[listen].lock();
  if (!e) {
    KVF_RETURN_IF_ERROR(Start(listen, &e));
    Registry()[listen] = e;
  }
  std::lock_guard<std::mutex> s(e->mu_);
  const size_t id = e->next_id_++;
  e->sources_.emplace_back(id, std::move(source));
  out->reset(new Membership(std::move(e), id));
  return Status::OK();
}

Status Endpoint::JoinIfSet(const std::string& listen, const std::string& who, Source source,
                           std::unique_ptr<Membership>* out) {
  if (listen.empty()) return Status::OK();
  const Status s = Join(listen, std::move(source), out);
  if (s.code() == Status::Code::kInvalidArgument) return s;
  if (!s.ok()) KVF_LOG_WARN("{}: no metrics endpoint: {}", who, s.message());
  return Status::OK();
}

Endpoint::~Endpoint() {
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
  KVF_LOG_DEBUG("metrics: endpoint {} stopped", address_);
}

void Endpoint::Leave(size_t id) {
  std::lock_guard<std::mutex> g(mu_);
  for (auto it = sources_.begin(); it != sources_.end(); ++it)
    if (it->first == id) {
      sources_.erase(it);
      return;
    }
}

Endpoint::Membership::~Membership() {
  endpoint_->Leave(id_);
  // The registry's lock orders the last release against a Join of the
  // same spec: the endpoint stops (and frees its port) before a new one starts.
  std::lock_guard<std::mutex> g(RegistryMutex());
  endpoint_.reset();
}

const std::string& Endpoint::Membership::address() const { return endpoint_->address(); }

std::string Endpoint::Render() {
  std::vector<prometheus::MetricFamily> all;
  {
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [id, source] : sources_)
      for (auto& f : source()) all.push_back(std::move(f));
  }
  // Families of the same name from several sources (two engines) are one
  // family in the text format: merge them, keeping the first's help.
  std::vector<prometheus::MetricFamily> merged;
  std::map<std::string, size_t> at;
  for (auto& f : all) {
    auto [it, fresh] = at.emplace(f.name, merged.size());
    if (fresh) {
      merged.push_back(std::move(f));
      continue;
    }
    auto& into = merged[it->second].metric;
    into.insert(into.end(), std::make_move_iterator(f.metric.begin()), std::make_move_iterator(f.metric.end()));
  }
  std::ostringstream text;
  prometheus::TextSerializer().Serialize(text, merged);
  return text.str();
}

prometheus::MetricFamily Family(const std::string& name, const std::string& help, prometheus::MetricType type) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = type;
  return f;
}

void AddSample(prometheus::MetricFamily* family, std::vector<prometheus::ClientMetric::Label> labels, double value) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  if (family->type == prometheus::MetricType::Counter)
    m.counter.value = value;
  else
    m.gauge.value = value;
  family->metric.push_back(std::move(m));
}

}  // namespace kvfabric::metrics
