// The http:// metadata store: GET/PUT/DELETE <path>?key=<name>, PUT with
// &ttl=<seconds> for expiring keys and GET <path>?prefix=<p> for listings.
#include <httplib.h>

#include <chrono>
#include <functional>
#include <nlohmann/json.hpp>

#include "common/log.h"
#include "common/text.h"
#include "metadata/auth.h"
#include "metadata/frame.h"
#include "metadata/http_deadline.h"
#include "metadata/store_impl.h"
#include "net/address.h"

namespace kvfabric::metadata {
namespace {

class HttpStore final : public MetadataStore {
 public:
  // From host and port, not a URL: httplib 0.11 parses "http://[v6]" only for
  // addresses of digits and colons ([::1] but not [fe80::1]).
  HttpStore(std::string uri, std::string host, uint16_t port, std::string path, const Settings& s)
      : uri_(std::move(uri)), host_(std::move(host)), port_(port), path_(std::move(path)),
        prefix_(s.metadata_prefix), token_(s.auth_token), timeout_ms_(s.handshake_timeout_ms) {}

  Status Publish(const std::string& name, const std::string& descriptor) override {
    return PutKey(prefix_ + name, descriptor, 0, "segment " + name);
  }

  Status Fetch(const std::string& name, std::string* descriptor) override {
    const std::string key = prefix_ + name;
    return Send("GET", "segment " + name, [&](httplib::Client& c) { return c.Get(Target("key", key)); }, descriptor);
  }

  Status Remove(const std::string& name) override { return Delete(prefix_ + name); }

  const std::string& uri() const override { return uri_; }

  Status PutExpiring(const std::string& key, const std::string& value, int64_t ttl_s) override {
    return PutKey(key, value, ttl_s, "key " + key);
  }

  Status Delete(const std::string& key) override {
    const httplib::Headers h = Signed("DELETE", key, "");
    Status s = Send("DELETE", "key " + key, [&](httplib::Client& c) { return c.Delete(Target("key", key), h); });
    return s.code() == Status::Code::kNotFound ? Status::OK() : s;
  }

  // The server answers a JSON object, key -> value.
  Status List(const std::string& prefix, std::map<std::string, std::string>* out) override {
    std::string body;
    KVF_RETURN_IF_ERROR(Send("GET", "prefix " + prefix,
                             [&](httplib::Client& c) { return c.Get(Target("prefix", prefix)); }, &body));
    const nlohmann::json j = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object())
      return Status::ProtocolError(text::Format("GET {} for prefix {}: the answer is not a JSON object ({})", uri_,
                                                prefix, body.substr(0, 200)));
    out->clear();
    for (const auto& [key, value] : j.items()) {
      if (!value.is_string())
        return Status::ProtocolError(text::Format("GET {} for prefix {}: the value of {} is not a string", uri_,
                                                  prefix, key));
      (*out)[key] = value.get<std::string>();
    }
    return Status::OK();
  }

 private:
  // <path>?<param>=<value>
  std::string Target(const char* param, const std::string& value) const {
    return path_ + "?" + param + "=" + httplib::detail::encode_query_param(value);
  }

  // PUT <path>?key=K, with &ttl=S when ttl_s > 0.
  Status PutKey(const std::string& key, const std::string& value, int64_t ttl_s, const std::string& what) const {
    const httplib::Headers h = Signed(auth::SignedMethod("PUT", ttl_s), key, value);
    const std::string target = Target("key", key) + (ttl_s > 0 ? "&ttl=" + std::to_string(ttl_s) : "");
    return Send("PUT", what, [&](httplib::Client& c) { return c.Put(target, h, value, "application/json"); });
  }

  // With KVF_AUTH_TOKEN set, writes carry their MAC (metadata/auth.h); a
  // server without --require_auth ignores it.
  httplib::Headers Signed(const std::string& method, const std::string& key, const std::string& body) const {
    if (token_.empty()) return {};
    const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                            std::chrono::system_clock::now().time_since_epoch()).count();
    return {{std::string(auth::kStoreAuthHeader), auth::StoreWriteHeader(token_, method, path_, key, now, body)}};
  }

  // One request on a client of its own, under the whole-request deadline: no
  // lock is shared between calls, so a slow GET (OpenSegment) never holds
  // back a PUT (register()) on another thread. httplib's client closes its
  // connection after each request anyway (no keep-alive).
  // `what` names the record for messages: "segment NAME", "key K".
  Status Send(const char* method, const std::string& what,
              const std::function<httplib::Result(httplib::Client&)>& request, std::string* body = nullptr) const {
    httplib::Client client(host_, port_);
    bool expired = false;
    httplib::Result res = SendWithDeadline(&client, timeout_ms_, [&] { return request(client); }, &expired);
    if (!res) {
      if (expired)
        return Status::Timeout(text::Format(
            "{} {} for {}: no complete answer within {} ms (KVF_HANDSHAKE_TIMEOUT_MS); the metadata server is "
            "overloaded, or something slow answers at that address",
            method, uri_, what, timeout_ms_));
      return Status::NetworkError(std::string(method) + " " + uri_ + " for " + what + ": " +
                                  httplib::to_string(res.error()) + "; is the metadata server running?");
    }
    if (res->status == 404) return Status::NotFound(what + " is not published at " + uri_);
    if (res->status == 401 || res->status == 403)
      return Status::PermissionDenied(text::Format("{} {} for {}: HTTP {} {}", method, uri_, what, res->status,
                                                   res->body.substr(0, 300)));
    if (res->status < 200 || res->status >= 300)
      return Status::ProtocolError(
          text::Format("{} {} for {}: HTTP {} {}", method, uri_, what, res->status, res->body.substr(0, 300)));
    if (body != nullptr) *body = std::move(res->body);
    return Status::OK();
  }

  const std::string uri_, host_;
  const uint16_t port_;
  const std::string path_, prefix_, token_;
  const int64_t timeout_ms_;
};

// The authority of an http:// URI: "host:port" or "[v6addr]:port"; without
// a port, 80.
Status ParseAuthority(const std::string& authority, std::string* host, uint16_t* port) {
  const size_t end = authority.rfind(']');
  const bool has_port = authority.find(':', end == std::string::npos ? 0 : end) != std::string::npos;
  if (has_port || authority.empty()) return net::ParseHostPort(authority, host, port);
  return net::ParseHostPort(authority + ":80", host, port);
}

}  // namespace

Status OpenHttpStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out) {
  // http://host:port/path
  const std::string rest = uri.substr(7);
  const size_t slash = rest.find('/');
  const std::string authority = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (authority.empty()) return Status::InvalidArgument("metadata '" + uri + "': expected http://host:port/path");
  std::string host;
  uint16_t port = 0;
  KVF_RETURN_IF_ERROR(ParseAuthority(authority, &host, &port).Annotate("metadata '" + uri + "'"));
  *out = std::make_unique<HttpStore>(uri, host, port, path, settings);
  return Status::OK();
}

}  // namespace kvfabric::metadata
