#include "metadata/store.h"

#include <algorithm>

#include "metadata/store_impl.h"
#include "net/address.h"

namespace kvfabric::metadata {

bool IsStoreUri(const std::string& m) { return m.rfind("etcd://", 0) == 0 || m.rfind("http://", 0) == 0; }

bool IsP2pUri(const std::string& m) {
  std::string l = m;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  return l == "p2p" || l == "p2phandshake";
}

std::vector<std::string> StoreHosts(const std::string& uri) {
  std::vector<std::string> hosts;
  std::string rest;
  if (uri.rfind("etcd://", 0) == 0) rest = uri.substr(7);
  else if (uri.rfind("http://", 0) == 0) rest = uri.substr(7, uri.find('/', 7) - 7);
  else return hosts;
  for (size_t at = 0; at <= rest.size();) {
    const size_t comma = std::min(rest.find(',', at), rest.size());
    std::string host;
    uint16_t port = 0;
    if (net::ParseHostPort(rest.substr(at, comma - at), &host, &port).ok()) hosts.push_back(host);
    at = comma + 1;
  }
  return hosts;
}

Status OpenMetadataStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out) {
  if (uri.rfind("etcd://", 0) == 0) return OpenEtcdStore(uri, settings, out);
  if (uri.rfind("http://", 0) == 0) return OpenHttpStore(uri, settings, out);
  return Status::Unavailable("metadata '" + uri + "': use p2p, etcd://host:port[,host:port] or http://host:port/path");
}

}  // namespace kvfabric::metadata
