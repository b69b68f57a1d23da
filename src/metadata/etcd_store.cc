// The etcd:// metadata store, over etcd v3's JSON gateway (/v3/...): keys and
// values travel base64-encoded. Each engine's descriptor is put under a
// lease of KVF_METADATA_LEASE_S seconds, renewed every third of it by a
// thread, so the segment of a process that dies disappears on its own.
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>
#include <vector>

#include "common/base64.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/frame.h"
#include "metadata/http_deadline.h"
#include "metadata/store_impl.h"
#include "net/address.h"

namespace kvfabric::metadata {
namespace {

using nlohmann::json;

struct Endpoint {
  std::string name;  // as the URI spells it, for messages
  std::string host;  // without brackets
  uint16_t port = 0;
};

class EtcdStore final : public MetadataStore {
 public:
  EtcdStore(std::string uri, std::vector<Endpoint> endpoints, const Settings& s)
      : uri_(std::move(uri)), endpoints_(std::move(endpoints)), prefix_(s.metadata_prefix),
        lease_s_(s.metadata_lease_s), timeout_ms_(s.handshake_timeout_ms) {}

  ~EtcdStore() override {
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    if (keeper_.joinable()) keeper_.join();
    if (lease_ != 0) {
      json r;
      // Best effort: the keys go now, else when the lease expires.
      Status s = Call("/v3/lease/revoke", {{"ID", std::to_string(lease_)}}, &r);
      if (!s.ok()) KVF_LOG_DEBUG("etcd lease {} not revoked ({}); its keys expire with it", lease_, s.ToString());
    }
  }

  Status Publish(const std::string& name, const std::string& descriptor) override {
    KVF_RETURN_IF_ERROR(EnsureLease());
    json r;
    return Call("/v3/kv/put",
                {{"key", base64::Encode(prefix_ + name)}, {"value", base64::Encode(descriptor)},
                 {"lease", std::to_string(lease_)}},
                &r)
        .Annotate("publish " + name);
  }

  Status Fetch(const std::string& name, std::string* descriptor) override {
    json r;
    KVF_RETURN_IF_ERROR(Call("/v3/kv/range", {{"key", base64::Encode(prefix_ + name)}}, &r).Annotate("fetch " + name));
    if (!r.contains("kvs") || !r["kvs"].is_array() || r["kvs"].empty())
      return Status::NotFound("segment " + name + " is not published in " + uri_ +
                              " (never started, or its lease expired)");
    const auto& v = r["kvs"][0];
    if (!v.contains("value") || !v["value"].is_string() || !base64::Decode(v["value"].get<std::string>(), descriptor))
      return Status::ProtocolError("etcd " + uri_ + " returned a malformed value for " + name);
    return Status::OK();
  }

  Status Remove(const std::string& name) override {
    json r;
    return Call("/v3/kv/deleterange", {{"key", base64::Encode(prefix_ + name)}}, &r).Annotate("remove " + name);
  }

  const std::string& uri() const override { return uri_; }

  // One JSON POST, trying each endpoint in turn from the last that answered;
  // each attempt ends within KVF_HANDSHAKE_TIMEOUT_MS, its whole exchange
  // included, so a call takes at most that times the number of endpoints.
  Status Call(const std::string& path, const json& body, json* reply) {
    std::string errors;  // each endpoint's, "; "-separated
    bool timed_out = false;
    const size_t n = endpoints_.size();
    for (size_t k = 0; k < n; ++k) {
      const size_t i = (current_.load() + k) % n;
      // From host and port, not a URL: httplib 0.11 parses "http://[v6]" only
      // for addresses of digits and colons ([::1] but not [fe80::1]).
      const Endpoint& ep = endpoints_[i];
      httplib::Client c(ep.host, ep.port);
      bool expired = false;
      const std::string text = body.dump();
      auto res = SendWithDeadline(&c, timeout_ms_, [&] { return c.Post(path, text, "application/json"); }, &expired);
      if (!res) {
        errors += (errors.empty() ? "" : "; ") + ep.name + ": " +
                     (expired ? text::Format("no complete answer within {} ms", timeout_ms_)
                              : httplib::to_string(res.error()));
        timed_out = timed_out || expired;
        continue;
      }
      if (res->status != 200)
        return Status::ProtocolError(
            text::Format("etcd {}{}: HTTP {} {}", ep.name, path, res->status, res->body.substr(0, 200)));
      *reply = json::parse(res->body, nullptr, /*allow_exceptions=*/false);
      if (reply->is_discarded())
        return Status::ProtocolError("etcd " + ep.name + path + ": the reply is not JSON");
      current_.store(i);
      return Status::OK();
    }
    if (timed_out)
      return Status::Timeout("no etcd endpoint of " + uri_ + " answered " + path + " in time (" + errors +
                             ", KVF_HANDSHAKE_TIMEOUT_MS); is etcd overloaded, or something slow at that address?");
    return Status::NetworkError("no etcd endpoint of " + uri_ + " answered (" + errors +
                                "); is etcd running there?");
  }

 private:
  Status EnsureLease() {
    std::lock_guard<std::mutex> g(lease_mu_);
    if (lease_ != 0) return Status::OK();
    json r;
    KVF_RETURN_IF_ERROR(Call("/v3/lease/grant", {{"TTL", std::to_string(lease_s_)}}, &r).Annotate("lease"));
    if (!r.contains("ID")) return Status::ProtocolError("etcd " + uri_ + ": lease grant without an ID");
    lease_ = std::stoll(r["ID"].is_string() ? r["ID"].get<std::string>() : std::to_string(r["ID"].get<int64_t>()));
    keeper_ = std::thread([this] { KeepAlive(); });
    return Status::OK();
  }

  void KeepAlive() {
    const auto period = std::chrono::milliseconds(lease_s_ * 1000 / 3);
    std::unique_lock<std::mutex> g(mu_);
    while (!cv_.wait_for(g, period, [this] { return stop_; })) {
      g.unlock();
      json r;
      Status s = Call("/v3/lease/keepalive", {{"ID", std::to_string(lease_)}}, &r);
      // The gateway answers {"result":{"TTL": ...}}; a TTL of 0 or none means the lease is gone.
      const bool alive = s.ok() && r.contains("result") && r["result"].contains("TTL");
      if (!alive)
        KVF_LOG_WARN("etcd {}: keeping lease {} alive failed ({}); this engine's segment disappears from the "
                     "cluster when it expires",
                     uri_, lease_, s.ok() ? "lease expired" : s.ToString());
      g.lock();
    }
  }

  std::string uri_;
  std::vector<Endpoint> endpoints_;
  std::string prefix_;
  int64_t lease_s_;
  int64_t timeout_ms_;
  std::atomic<size_t> current_{0};
  std::mutex lease_mu_;
  int64_t lease_ = 0;
  std::thread keeper_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
};

// "host:port,[v6addr]:port,..." -> endpoints.
Status ParseEndpoints(const std::string& uri, std::vector<Endpoint>* out) {
  std::istringstream list(uri.substr(7));
  for (std::string name; std::getline(list, name, ',');) {
    if (name.empty()) continue;
    Endpoint ep{name, "", 0};
    KVF_RETURN_IF_ERROR(net::ParseHostPort(name, &ep.host, &ep.port).Annotate("metadata '" + uri + "'"));
    out->push_back(std::move(ep));
  }
  if (out->empty()) return Status::InvalidArgument("metadata '" + uri + "': expected etcd://host:port[,host:port]");
  return Status::OK();
}

}  // namespace

Status OpenEtcdStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out) {
  std::vector<Endpoint> endpoints;
  KVF_RETURN_IF_ERROR(ParseEndpoints(uri, &endpoints));
  if (settings.metadata_lease_s < 1) return Status::InvalidArgument("KVF_METADATA_LEASE_S must be at least 1");
  auto store = std::make_unique<EtcdStore>(uri, std::move(endpoints), settings);
  json r;
  KVF_RETURN_IF_ERROR(store->Call("/v3/maintenance/status", json::object(), &r).Annotate("open " + uri));
  *out = std::move(store);
  return Status::OK();
}

}  // namespace kvfabric::metadata
