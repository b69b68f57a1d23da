#include "store/members/membership.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>
#include <utility>

#include "common/crypto.h"
#include "common/log.h"
#include "common/text.h"
#include "metadata/auth.h"
#include "metadata/store.h"
#include "net/address.h"

namespace kvfabric::store {
namespace {

using nlohmann::json;

// `name` as host:port with a port 1-65535, written the one way
// net::FormatHostPort writes it ("[::1]:5000"), so that two spellings of
// one address compare equal.
Status CanonicalName(const std::string& name, std::string* out) {
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(name, &host, &port));
  if (port == 0) return Status::InvalidArgument("'" + name + "': port must be 1-65535");
  *out = net::FormatHostPort(host, port);
  return Status::OK();
}

Status CheckSelf(const MemberRecord& self) {
  std::string canonical;
  return CanonicalName(self.name, &canonical).Annotate("join the store: the node's name (its control address)");
}

// With a token, the record is sealed (auth::MemberRecordMac).
std::string ToJson(const MemberRecord& m, const std::string& token) {
  json j{{"name", m.name}, {"segment", m.segment}, {"pool_bytes", m.pool_bytes}};
  if (!token.empty()) j["mac"] = metadata::auth::MemberRecordMac(token, m.name, m.segment, m.pool_bytes);
  return j.dump();
}

// The record stored under `name`'s key; InvalidArgument saying what is
// wrong, or, with a token, PermissionDenied for a record not sealed with it.
Status FromJson(const std::string& text, const std::string& name, const std::string& token, MemberRecord* out) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return Status::InvalidArgument("not a JSON object");
  if (!j.contains("name") || !j["name"].is_string()) return Status::InvalidArgument("no \"name\" string");
  if (j.contains("segment") && !j["segment"].is_string()) return Status::InvalidArgument("\"segment\" is no string");
  if (j.contains("pool_bytes") && !j["pool_bytes"].is_number_unsigned())
    return Status::InvalidArgument("\"pool_bytes\" is no unsigned integer");
  MemberRecord m;
  m.name = j["name"].get<std::string>();
  if (m.name != name) return Status::InvalidArgument("its name is '" + m.name + "', its key says '" + name + "'");
  m.segment = j.value("segment", std::string());
  m.pool_bytes = j.value("pool_bytes", uint64_t{0});
  if (!token.empty()) {
    const std::string mac = j.contains("mac") && j["mac"].is_string() ? j["mac"].get<std::string>() : "";
    if (!crypto::SameBytes(mac, metadata::auth::MemberRecordMac(token, m.name, m.segment, m.pool_bytes)))
      return Status::PermissionDenied(std::string(mac.empty() ? "not sealed with" : "its seal is not of") +
                                      " this process's KVF_AUTH_TOKEN (a node without the token, or a forged "
                                      "record)");
  }
  *out = std::move(m);
  return Status::OK();
}

// Members in an etcd or http metadata store, with a thread that renews this
// node's record while it is joined.
class BackendMembership final : public Membership {
 public:
  BackendMembership(std::unique_ptr<metadata::MetadataStore> backend, const Settings& s)
      : backend_(std::move(backend)), prefix_(MembersPrefix(s)),
        describe_(backend_->uri() + " cluster " + s.store_cluster), ttl_s_(s.store_member_ttl_s),
        token_(s.auth_token) {}

  ~BackendMembership() override {
    Status s = Leave();
    if (!s.ok())
      KVF_LOG_WARN("store membership: leaving {} failed ({}); this node stays listed until its record expires, "
                   "{} s after its last renewal",
                   describe_, s.ToString(), ttl_s_);
  }

  Status Join(const MemberRecord& self) override {
    KVF_RETURN_IF_ERROR(CheckSelf(self));
    std::lock_guard<std::mutex> j(join_mu_);
    if (renewer_.joinable())
      return Status::InvalidArgument("join the store " + describe_ + " as " + self.name + ": already joined as " +
                                     self_.name + "; Leave first");
    const std::string key = prefix_ + self.name, value = ToJson(self, token_);
    KVF_RETURN_IF_ERROR(backend_->PutExpiring(key, value, ttl_s_).Annotate("join the store " + describe_));
    self_ = self;
    key_ = key;
    value_ = value;
    stop_ = false;
    renewer_ = std::thread([this] { Renew(); });
    return Status::OK();
  }

  Status Leave() override {
    std::lock_guard<std::mutex> j(join_mu_);
    if (!renewer_.joinable()) return Status::OK();
    {
      std::lock_guard<std::mutex> g(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    renewer_.join();
    return backend_->Delete(key_).Annotate("leave the store " + describe_);
  }

  Status List(std::vector<MemberRecord>* out) override {
    std::map<std::string, std::string> entries;
    KVF_RETURN_IF_ERROR(backend_->List(prefix_, &entries).Annotate("list the members of " + describe_));
    out->clear();
    std::set<std::string> bad;  // "key\nvalue" of the records left out
    std::lock_guard<std::mutex> g(mu_);
    for (const auto& [key, value] : entries) {
      MemberRecord m;
      Status s = FromJson(value, key.substr(prefix_.size()), token_, &m);
      if (s.ok()) {
        out->push_back(std::move(m));  // in key order, so in name order
        continue;
      }
      std::string id = key + "\n" + value;
      if (!reported_.count(id))
        KVF_LOG_WARN("store membership: the record under {} in {} is refused ({}); that node is left out of the "
                     "store until it writes a valid one",
                     key, backend_->uri(), s.message());
      bad.insert(std::move(id));
    }
    reported_ = std::move(bad);  // only those still there: a record fixed and broken again is reported again
    return Status::OK();
  }

  std::string Describe() const override { return describe_; }

 private:
  // Every third of the ttl; after a failure, every ninth, until one works.
  void Renew() {
    const std::chrono::milliseconds period(ttl_s_ * 1000 / 3), retry(ttl_s_ * 1000 / 9);
    int failures = 0;
    std::unique_lock<std::mutex> g(mu_);
    while (!cv_.wait_for(g, failures == 0 ? period : retry, [this] { return stop_; })) {
      g.unlock();
      Status s = backend_->PutExpiring(key_, value_, ttl_s_);
      g.lock();
      if (s.ok()) {
        if (failures > 0)
          KVF_LOG_INFO("store membership: {} renewed in {} again, after {} failed attempts", self_.name, describe_,
                       failures);
        failures = 0;
        continue;
      }
      ++failures;
      KVF_LOG_WARN("store membership: renewing {} in {} failed ({}); retrying in {} ms. Once {} s have passed since "
                   "the last renewal that worked, the other nodes drop this one and its pages become misses for "
                   "them, until a renewal works again",
                   self_.name, describe_, s.ToString(), retry.count(), ttl_s_);
    }
  }

  const std::unique_ptr<metadata::MetadataStore> backend_;
  const std::string prefix_, describe_;
  const int64_t ttl_s_;
  const std::string token_;  // KVF_AUTH_TOKEN: records written sealed, and read only when sealed with it
  std::mutex join_mu_;  // Join and Leave, one at a time
  MemberRecord self_;   // while joined; also read by the renewer
  std::string key_, value_;
  std::thread renewer_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  std::set<std::string> reported_;  // malformed records already warned about
};

// The static list of a single host: the names of KVF_STORE_MEMBERS and the
// joined node's own record.
class StaticMembership final : public Membership {
 public:
  // `names` canonical, sorted, distinct.
  explicit StaticMembership(std::vector<std::string> names) : names_(std::move(names)) {}

  Status Join(const MemberRecord& self) override {
    KVF_RETURN_IF_ERROR(CheckSelf(self));
    std::lock_guard<std::mutex> g(mu_);
    if (joined_)
      return Status::InvalidArgument("join the store " + DescribeLocked() + " as " + self.name +
                                     ": already joined as " + self_.name + "; Leave first");
    self_ = self;
    (void)CanonicalName(self.name, &self_canonical_);
    joined_ = true;
    return Status::OK();
  }

  Status Leave() override {
    std::lock_guard<std::mutex> g(mu_);
    joined_ = false;
    return Status::OK();
  }

  Status List(std::vector<MemberRecord>* out) override {
    std::lock_guard<std::mutex> g(mu_);
    out->clear();
    bool self_listed = false;
    for (const std::string& name : names_) {
      const bool self = joined_ && name == self_canonical_;
      out->push_back(self ? self_ : MemberRecord{name, "", 0});
      self_listed = self_listed || self;
    }
    if (joined_ && !self_listed) {
      auto at = std::lower_bound(out->begin(), out->end(), self_.name,
                                 [](const MemberRecord& m, const std::string& n) { return m.name < n; });
      out->insert(at, self_);
    }
    return Status::OK();
  }

  std::string Describe() const override {
    std::lock_guard<std::mutex> g(mu_);
    return DescribeLocked();
  }

 private:
  std::string DescribeLocked() const {
    const bool extra = joined_ && !std::binary_search(names_.begin(), names_.end(), self_canonical_);
    return text::Format("static {} members", names_.size() + (extra ? 1 : 0));
  }

  const std::vector<std::string> names_;
  mutable std::mutex mu_;
  bool joined_ = false;
  MemberRecord self_;
  std::string self_canonical_;
};

// KVF_STORE_MEMBERS -> canonical names, sorted, each once.
Status ParseStaticList(const std::string& list, std::vector<std::string>* out) {
  auto trim = [](std::string s) {
    s.erase(0, s.find_first_not_of(" \t"));
    s.erase(s.find_last_not_of(" \t") + 1);
    return s;
  };
  std::vector<std::string> entries;  // trimmed; none for a blank list
  for (size_t start = 0; !trim(list).empty(); start = list.find(',', start) + 1) {
    entries.push_back(trim(list.substr(start, list.find(',', start) - start)));
    if (list.find(',', start) == std::string::npos) break;
  }
  std::set<std::string> names;
  for (size_t i = 0; i < entries.size(); ++i) {
    const std::string where = text::Format("KVF_STORE_MEMBERS entry {} of {}", i + 1, entries.size());
    if (entries[i].empty())
      return Status::InvalidArgument(where + " is empty; expected host:port[,host:port...]");
    std::string name;
    KVF_RETURN_IF_ERROR(CanonicalName(entries[i], &name).Annotate(where));
    names.insert(std::move(name));
  }
  out->assign(names.begin(), names.end());
  return Status::OK();
}

}  // namespace

std::string MembersPrefix(const Settings& settings) { return "kvfabric/store/" + settings.store_cluster + "/members/"; }

Status OpenMembership(const std::string& metadata_uri, const Settings& settings, std::unique_ptr<Membership>* out) {
  if (metadata::IsP2pUri(metadata_uri)) {
    std::vector<std::string> names;
    KVF_RETURN_IF_ERROR(ParseStaticList(settings.store_members, &names));
    *out = std::make_unique<StaticMembership>(std::move(names));
    return Status::OK();
  }
  if (!metadata::IsStoreUri(metadata_uri))
    return Status::InvalidArgument("store membership from metadata '" + metadata_uri +
                                   "': use p2p (or P2PHANDSHAKE) with KVF_STORE_MEMBERS, "
                                   "etcd://host:port[,host:port] or http://host:port/path");
  if (settings.store_member_ttl_s < 2 || settings.store_member_ttl_s > 24 * 3600)
    return Status::InvalidArgument(text::Format("KVF_STORE_MEMBER_TTL_S is {} s; it must be 2 s to 24 h",
                                                settings.store_member_ttl_s));
  std::unique_ptr<metadata::MetadataStore> backend;
  KVF_RETURN_IF_ERROR(metadata::OpenMetadataStore(metadata_uri, settings, &backend));
  *out = std::make_unique<BackendMembership>(std::move(backend), settings);
  return Status::OK();
}

}  // namespace kvfabric::store
