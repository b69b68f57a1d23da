// MetadataStore: where engines publish their segment descriptors when a
// cluster service is used instead of the p2p handshake.
//
//   etcd://host:port[,host:port]  etcd v3 (its JSON gateway). The descriptor is
//                                 put under a lease the engine keeps alive, so
//                                 a dead process's segment disappears.
//   http://host:port/path         GET/PUT/DELETE path?key=NAME, as served by
//                                 kvfabric-metadata-server.
//
// Descriptors' keys are KVF_METADATA_PREFIX + the engine's name
// ("host:port"). Other records (the KV-cache store's members,
// store/members/membership.h) use the generic calls, with keys as given. Every call
// ends within KVF_HANDSHAKE_TIMEOUT_MS, its whole exchange included (per
// endpoint tried, for etcd), or fails with Timeout; calls share no lock, so
// any number run at once. With KVF_AUTH_TOKEN set, http writes carry the
// token's MAC (metadata/auth.h), which kvfabric-metadata-server
// --require_auth demands.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

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

  // Generic keys, used as given (no KVF_METADATA_PREFIX).
  //
  // Puts `value` under `key` until `ttl_s` (>= 1) seconds after the last
  // PutExpiring of that key: a caller that repeats it every third of ttl_s
  // keeps the entry, a process that stops (killed, cut off) loses it.
  //   etcd: a lease of ttl_s for that key, granted by the first call and
  //         kept alive by later ones with the same value and ttl (each also
  //         counts the key, and puts it again if another client deleted
  //         it); a lease found expired (this process could not renew it in
  //         time) is granted anew and the value put again, with a warning.
  //         A changed value or ttl gets a new lease.
  //   http: PUT <path>?key=K&ttl=S, signed with the ttl (auth::SignedMethod).
  virtual Status PutExpiring(const std::string& key, const std::string& value, int64_t ttl_s) = 0;
  // Deletes `key` (etcd: and revokes the lease PutExpiring gave it); OK
  // when it is absent.
  virtual Status Delete(const std::string& key) = 0;
  // Every key that starts with `prefix`, with its value (etcd: a range read;
  // http: GET <path>?prefix=P, bounded by the server's --max_list_bytes).
  virtual Status List(const std::string& prefix, std::map<std::string, std::string>* out) = 0;
};

// Whether `metadata` names a store (etcd:// or http://) rather than p2p.
bool IsStoreUri(const std::string& metadata);
// Whether `metadata` is "p2p" or "P2PHANDSHAKE" (any case): no store.
bool IsP2pUri(const std::string& metadata);

// The hosts an etcd:// or http:// URI names, in order ("etcd://a:2379,b:2379"
// -> a, b); none for anything else.
std::vector<std::string> StoreHosts(const std::string& uri);

// Connects to the store `uri` names; Unavailable for an unknown scheme,
// NetworkError when no endpoint answers.
Status OpenMetadataStore(const std::string& uri, const Settings& settings, std::unique_ptr<MetadataStore>* out);

}  // namespace kvfabric::metadata
