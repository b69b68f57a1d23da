// The etcd:// metadata store, over etcd v3's JSON gateway (/v3/...): keys and
// values travel base64-encoded. Each engine's descriptor is put under a
// lease of KVF_METADATA_LEASE_S seconds, renewed every third of it by a
// thread, so the segment of a process that dies disappears on its own.
// Generic expiring keys (PutExpiring) get a lease each, renewed by their
// caller's next PutExpiring.
#include <httplib.h>

#include <atomic>
#include <condition_variable>
#include <map>
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
    Revoke(lease_);
    for (const auto& [key, e] : expiring_) Revoke(e.lease);
  }

  Status Publish(const std::string& name, const std::string& descriptor) override {
    KVF_RETURN_IF_ERROR(EnsureLease());
    return Put(prefix_ + name, descriptor, lease_).Annotate("publish " + name);
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

  Status Remove(const std::string& name) override { return Delete(prefix_ + name); }

  const std::string& uri() const override { return uri_; }

  Status PutExpiring(const std::string& key, const std::string& value, int64_t ttl_s) override {
    std::lock_guard<std::mutex> g(expiring_mu_);
    Expiring& e = expiring_[key];
    if (e.lease != 0 && e.value == value && e.ttl_s == ttl_s) {
      json r;
      KVF_RETURN_IF_ERROR(
          Call("/v3/lease/keepalive", {{"ID", std::to_string(e.lease)}}, &r).Annotate("keep " + key + " alive"));
      if (LeaseAlive(r)) {
        // The key itself may have been deleted (etcdctl del) under its live
        // lease: a count (a read, no new revision) tells.
        KVF_RETURN_IF_ERROR(
            Call("/v3/kv/range", {{"key", base64::Encode(key)}, {"count_only", true}}, &r).Annotate("check " + key));
        if (r.contains("count") && r["count"] != "0") return Status::OK();  // the gateway omits a count of 0
        KVF_LOG_WARN("etcd {}: {} was deleted by another client; putting it again", uri_, key);
        return Put(key, value, e.lease).Annotate("put " + key + " again");
      }
      KVF_LOG_WARN("etcd {}: the lease of {} had expired (not renewed within {} s: this process was stopped or cut "
                   "off from etcd), so the key was gone; granting a new lease and putting it again",
                   uri_, key, ttl_s);
    }
    Expiring next{0, value, ttl_s};
    KVF_RETURN_IF_ERROR(Grant(ttl_s, &next.lease).Annotate("lease for " + key));
    Status s = Put(key, value, next.lease);
    if (!s.ok()) {
      Revoke(next.lease);
      return s;
    }
    Revoke(e.lease);  // the key left it for the new one (a changed value or ttl), or it had expired
    e = std::move(next);
    return Status::OK();
  }

  Status Delete(const std::string& key) override {
    json r;
    KVF_RETURN_IF_ERROR(Call("/v3/kv/deleterange", {{"key", base64::Encode(key)}}, &r).Annotate("delete " + key));
    std::lock_guard<std::mutex> g(expiring_mu_);
    auto it = expiring_.find(key);
    if (it != expiring_.end()) {
      Revoke(it->second.lease);
      expiring_.erase(it);
    }
    return Status::OK();
  }

  Status List(const std::string& prefix, std::map<std::string, std::string>* out) override {
    json r;
    KVF_RETURN_IF_ERROR(
        Call("/v3/kv/range", {{"key", base64::Encode(prefix)}, {"range_end", base64::Encode(PrefixEnd(prefix))}}, &r)
            .Annotate("list " + prefix));
    out->clear();
    if (!r.contains("kvs")) return Status::OK();  // none: the gateway omits empty fields
    if (!r["kvs"].is_array()) return Status::ProtocolError("etcd " + uri_ + " listed " + prefix + " without an array");
    for (const auto& kv : r["kvs"]) {
      std::string key, value;
      if (!kv.is_object() || !DecodeField(kv, "key", &key) || !DecodeField(kv, "value", &value))
        return Status::ProtocolError("etcd " + uri_ + " returned a malformed entry listing " + prefix);
      (*out)[std::move(key)] = std::move(value);
    }
    return Status::OK();
  }

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
  // A key's lease and what was put under it.
  struct Expiring {
    int64_t lease = 0;
    std::string value;
    int64_t ttl_s = 0;
  };

  // The end of the range of keys that start with `prefix`: the prefix with
  // its last byte below 0xff incremented and what follows dropped; "\0"
  // (every key) when there is none.
  static std::string PrefixEnd(std::string prefix) {
    while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
    if (prefix.empty()) return std::string(1, '\0');
    prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
    return prefix;
  }

  // Whether `kv[field]` is a base64 string, decoded into `out`; an absent
  // field is the empty string (the gateway omits empty fields).
  static bool DecodeField(const json& kv, const char* field, std::string* out) {
    if (!kv.contains(field)) return out->clear(), true;
    return kv[field].is_string() && base64::Decode(kv[field].get<std::string>(), out);
  }

  // The gateway answers a keepalive {"result":{"TTL": ...}}; a TTL of 0 or
  // none means the lease is gone.
  static bool LeaseAlive(const json& r) {
    if (!r.contains("result") || !r["result"].is_object() || !r["result"].contains("TTL")) return false;
    const json& ttl = r["result"]["TTL"];
    return ttl.is_string() ? ttl.get<std::string>() != "0" : ttl.is_number() && ttl.get<int64_t>() > 0;
  }

  Status Grant(int64_t ttl_s, int64_t* lease) {
    json r;
    KVF_RETURN_IF_ERROR(Call("/v3/lease/grant", {{"TTL", std::to_string(ttl_s)}}, &r));
    if (!r.contains("ID")) return Status::ProtocolError("etcd " + uri_ + ": lease grant without an ID");
    *lease = std::stoll(r["ID"].is_string() ? r["ID"].get<std::string>() : std::to_string(r["ID"].get<int64_t>()));
    return Status::OK();
  }

  Status Put(const std::string& key, const std::string& value, int64_t lease) {
    json r;
    return Call("/v3/kv/put",
                {{"key", base64::Encode(key)}, {"value", base64::Encode(value)}, {"lease", std::to_string(lease)}},
                &r);
  }

  // Best effort: the lease's keys go now, else when it expires. 0: none.
  void Revoke(int64_t lease) {
    if (lease == 0) return;
    json r;
    Status s = Call("/v3/lease/revoke", {{"ID", std::to_string(lease)}}, &r);
    if (!s.ok()) KVF_LOG_DEBUG("etcd lease {} not revoked ({}); its keys expire with it", lease, s.ToString());
  }

  Status EnsureLease() {
    std::lock_guard<std::mutex> g(lease_mu_);
    if (lease_ != 0) return Status::OK();
    KVF_RETURN_IF_ERROR(Grant(lease_s_, &lease_).Annotate("lease"));
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
      const bool alive = s.ok() && LeaseAlive(r);
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
  std::mutex expiring_mu_;  // held through a PutExpiring or Delete, calls included
  std::map<std::string, Expiring> expiring_;
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
