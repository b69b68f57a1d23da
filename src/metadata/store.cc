#include "metadata/store.h"

#include <algorithm>

#include "metadata/store_impl.h"

namespace kvfabric::metadata {

bool IsStoreUri(const std::string& m) { return m.rfind("etcd://", 0) == 0 || m.rfind("http://", 0) == 0; }

bool IsP2pUri(const std::string& m) {
  std::string l = m;
  std::transform(l.begin(), l.end(), l.begin(), ::tolower);
  return l == "p2p" || l == "p2phandshake";
}

Status OpenMetadataStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out) {
  if (uri.rfind("etcd://", 0) == 0) return OpenEtcdStore(uri, settings, out);
  if (uri.rfind("http://", 0) == 0) return OpenHttpStore(uri, settings, out);
  return Status::Unavailable("metadata '" + uri + "': use p2p, etcd://host:port[,host:port] or http://host:port/path");
}

}  // namespace kvfabric::metadata
