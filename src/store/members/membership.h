// Membership: who the store's nodes are, as the metadata backend lists them.
// There is no master: each node lists itself, keeps its record alive, and
// reads the list; a node that stops renewing (killed, cut off) drops out of
// every node's list once its record expires, and a node that joins appears
// in every list at the next read.
//
//   etcd://...   records under a lease of KVF_STORE_MEMBER_TTL_S, kept alive
//                every third of it (metadata::MetadataStore::PutExpiring)
//   http://...   kvfabric-metadata-server entries with a ttl of
//                KVF_STORE_MEMBER_TTL_S, put again every third of it
//   p2p          the static list KVF_STORE_MEMBERS, plus the joined node
//
// Records live under MembersPrefix(settings) + the node's name, as JSON:
// {"name":"host:port","segment":"...","pool_bytes":N}.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/settings.h"
#include "kvfabric/status.h"

namespace kvfabric::store {

// One node of the store as the backend lists it. name: the node's control
// address "host:port" (unique); segment: its engine's segment name;
// pool_bytes: memory it contributes. Static lists know only names (segment ""
// and pool_bytes 0 until the store asks the node itself).
struct MemberRecord {
  std::string name;
  std::string segment;
  uint64_t pool_bytes = 0;
  bool operator==(const MemberRecord&) const = default;
};

class Membership {
 public:
  virtual ~Membership() = default;  // leaves (best effort) if joined
  // Lists this node and keeps it listed until Leave: etcd, under a lease of
  // settings.store_member_ttl_s renewed every third of it; http, a PUT with
  // that ttl repeated every third of it; static, nothing to do. A renewal
  // that fails is logged (what, where, consequence) and retried after a
  // ninth of the ttl; a record found expired, or deleted by another client,
  // is put again (a node that was cut off comes back). InvalidArgument when
  // `self.name` is not host:port (port 1-65535) or this object has joined
  // already; the backend's error when the first put fails (nothing is then
  // listed or renewed).
  virtual Status Join(const MemberRecord& self) = 0;
  // Stops the renewals and removes the record at once; OK when not joined.
  virtual Status Leave() = 0;
  // The members now, sorted by name: a read of the backend each call (the
  // store calls it every store_membership_refresh_ms). A record that is not
  // valid JSON of the form above, or whose name differs from its key, is
  // left out, with a warning the first time it is seen. Static: the names
  // of settings.store_members plus the joined node's own record, once.
  virtual Status List(std::vector<MemberRecord>* out) = 0;
  // For logs: "etcd://127.0.0.1:2379 cluster default", "static 3 members".
  virtual std::string Describe() const = 0;
};

// "kvfabric/store/<settings.store_cluster>/members/": where the etcd and
// http backends keep the records.
std::string MembersPrefix(const Settings& settings);

// Chooses by the engine's metadata URI (EngineConfig::metadata): etcd://...
// and http://... use that backend (metadata::OpenMetadataStore, with its
// errors); "p2p" or "P2PHANDSHAKE" (any case) the static list of
// settings.store_members: comma-separated host:port entries, each with a
// port 1-65535 ("[::1]:5000" for IPv6); InvalidArgument naming the first
// malformed entry. InvalidArgument for any other URI, and for a
// store_member_ttl_s outside 2 s - 24 h (the setting's range).
Status OpenMembership(const std::string& metadata_uri, const Settings& settings, std::unique_ptr<Membership>* out);

}  // namespace kvfabric::store
