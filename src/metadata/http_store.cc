// The http:// metadata store: GET/PUT/DELETE <path>?key=<name>.
#include <httplib.h>

#include "common/log.h"
#include "metadata/store_impl.h"

namespace kvfabric::metadata {
namespace {

class HttpStore final : public MetadataStore {
 public:
  HttpStore(std::string uri, std::string base, std::string path, const Settings& s)
      : uri_(std::move(uri)), path_(std::move(path)), prefix_(s.metadata_prefix), client_(base) {
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
      return Status::ProtocolError(std::string(method) + " " + uri_ + " for " + name + ": HTTP " +
                                   std::to_string(res->status) + " " + res->body.substr(0, 200));
    return Status::OK();
  }

  std::string uri_, path_, prefix_;
  std::mutex mu_;  // httplib::Client is not safe for concurrent requests
  httplib::Client client_;
};

}  // namespace

Status OpenHttpStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out) {
  // http://host:port/path
  const std::string rest = uri.substr(7);
  const size_t slash = rest.find('/');
  const std::string hostport = rest.substr(0, slash);
  const std::string path = slash == std::string::npos ? "/" : rest.substr(slash);
  if (hostport.empty()) return Status::InvalidArgument("metadata '" + uri + "': expected http://host:port/path");
  *out = std::make_unique<HttpStore>(uri, "http://" + hostport, path, settings);
  return Status::OK();
}

}  // namespace kvfabric::metadata
