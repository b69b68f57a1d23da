// MetadataStore: where engines publish their segment descriptors when a
// cluster service is used instead of the p2p handshake.
//
//   etcd://host:port[,host:port]  etcd v3 (its JSON gateway). The descriptor is
//                                 put under a lease the engine keeps alive, so
//                                 a dead process's segment disappears.
//   http://host:port/path         GET/PUT/DELETE path?key=NAME, as served by
//                                 kvfabric-metadata-server.
//
// Keys are KVF_METADATA_PREFIX + the engine's name ("host:port"). Every call
// ends within KVF_HANDSHAKE_TIMEOUT_MS, its whole exchange included (per
// endpoint tried, for etcd), or fails with Timeout; calls share no lock, so
// any number run at once. With KVF_AUTH_TOKEN set, http writes carry the
// token's MAC (metadata/auth.h), which kvfabric-metadata-server
// --require_auth demands.
#pragma once

#include <memory>
#include <string>

#include "kvfabric/settings.h"
#include "kvfabric/status.h"

namespace kvfabric::metadata {

class MetadataStore {
 public:
  virtual ~MetadataStore() = default;
  // Puts (or replaces) the descriptor of `name`.
  virtual Status Publish(const std::string& name, const std::string& descriptor) = 0;
  // NotFound when nobody published `name` (or its lease expired).
  virtual Status Fetch(const std::string& name, std::string* descriptor) = 0;
  virtual Status Remove(const std::string& name) = 0;
  virtual const std::string& uri() const = 0;
};

// Whether `metadata` names a store (etcd:// or http://) rather than p2p.
bool IsStoreUri(const std::string& metadata);

// Connects to the store `uri` names; Unavailable for an unknown scheme,
// NetworkError when no endpoint answers.
Status OpenMetadataStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out);

}  // namespace kvfabric::metadata
