// The http:// metadata store: GET/PUT/DELETE <path>?key=<name>.
#include <httplib.h>

#include "common/log.h"
#include "common/text.h"
#include "metadata/frame.h"
#include "metadata/store_impl.h"
#include "net/address.h"

namespace kvfabric::metadata {
namespace {

class HttpStore final : public MetadataStore {
 public:
  // From host and port, not a URL: httplib 0.11 parses "http://[v6]" only for
  // addresses of digits and colons ([::1] but not [fe80::1]).
  HttpStore(std::string uri, const std::string& host, uint16_t port, std::string path, const Settings& s)
      : uri_(std::move(uri)), path_(std::move(path)), prefix_(s.metadata_prefix), client_(host, port) {
    const int ms = static_cast<int>(s.handshake_timeout_ms);
    client_.set_connection_timeout(ms / 1000, (ms % 1000) * 1000);
    client_.set_read_timeout(ms / 1000, (ms % 1000) * 1000);
    client_.set_write_timeout(ms / 1000, (ms % 1000) * 1000);
  }

  Status Publish(const std::string& name, const std::string& descriptor) override {
    std::lock_guard<std::mutex> g(mu_);
    auto res = client_.Put(Target(name), descriptor, "application/json");
    return Check(res, "PUT", name);
  }

  Status Fetch(const std::string& name, std::string* descriptor) override {
    std::lock_guard<std::mutex> g(mu_);
    auto res = client_.Get(Target(name));
    KVF_RETURN_IF_ERROR(Check(res, "GET", name));
    *descriptor = res->body;
    return Status::OK();
  }

  Status Remove(const std::string& name) override {
    std::lock_guard<std::mutex> g(mu_);
    auto res = client_.Delete(Target(name));
    Status s = Check(res, "DELETE", name);
    return s.code() == Status::Code::kNotFound ? Status::OK() : s;
  }

  const std::string& uri() const override { return uri_; }

 private:
  std::string Target(const std::string& name) const {
    return path_ + "?key=" + httplib::detail::encode_query_param(prefix_ + name);
  }

  Status Check(const httplib::Result& res, const char* method, const std::string& name) const {
    if (!res)
      return Status::NetworkError(std::string(method) + " " + uri_ + " for " + name + ": " +
                                  httplib::to_string(res.error()) + "; is the metadata server running?");
    if (res->status == 404) return Status::NotFound("segment " + name + " is not published at " + uri_);
    if (res->status < 200 || res->status >= 300)
      return Status::ProtocolError(
          text::Format("{} {} for {}: HTTP {} {}", method, uri_, name, res->status, res->body.substr(0, 200)));
    return Status::OK();
  }

  std::string uri_, path_, prefix_;
  std::mutex mu_;  // httplib::Client is not safe for concurrent requests
  httplib::Client client_;
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
