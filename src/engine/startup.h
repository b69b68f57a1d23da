// Engine start-up: the steps Engine::Create runs, in order, each a function
// that decides one thing from the configuration.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvfabric/engine.h"
#include "metadata/handshake.h"
#include "metadata/store.h"
#include "topology/topology.h"

namespace kvfabric::engine {

// 1. The settings in force: the configuration's, overlaid with KVF_*
// variables when it asks for that, each within its declared range (fields
// set in code are checked too); the log level takes effect.
Status ResolveSettings(const EngineConfig& config, Settings* out);

// 2. Where descriptors live: null for p2p ("p2p", "P2PHANDSHAKE", any
// case), else the etcd:// or http:// store, connected.
Status OpenMetadata(const std::string& metadata, const Settings& settings,
                    std::unique_ptr<metadata::MetadataStore>* out);

// 3. Where the handshake server listens, and which address the fabric's
// tcp rails bind to. Only the handshake and the metadata go over IPv6: the
// fabric's data path stays IPv4, so an IPv6 host asks for loopback
// (127.0.0.1 for ::1) or else the first non-loopback interface ("").
struct ListenAddress {
  std::string host;     // as the application wrote it: the segment name's host
  std::string ip;       // numeric address the handshake server binds
  uint16_t port = 0;    // 0: any free port
  std::string bind_ip;  // for fabric::SelectDomains
};
Status ResolveListenAddress(const std::string& local_server_name, ListenAddress* out);

// 3b. Whether peers can reach the host this engine advertises: a loopback
// host (net::IsLoopbackName) published to a metadata store that another
// host reads (one of its hosts is not loopback) would send every peer
// there to itself. InvalidArgument saying what to set; OK otherwise (p2p:
// a peer names this engine itself, so it knows what it can reach).
Status CheckAdvertisedHost(const std::string& host, const std::string& metadata);

// 4. (RailSet::Open opens the rails.)

// 5. Which rails are near which memory: sysfs, the CUDA driver's device
// numbering when `cuda_usable`, then KVF_TOPOLOGY_FILE's corrections.
Status DiscoverTopology(const std::vector<fabric::RailInfo>& rails, bool cuda_usable, const Settings& settings,
                        topology::Topology* out);

// 6. The handshake server's limits, from the settings.
metadata::HandshakeServer::Options HandshakeOptions(const Settings& settings, const ListenAddress& address);
metadata::CallOptions HandshakeCallOptions(const Settings& settings);

}  // namespace kvfabric::engine
