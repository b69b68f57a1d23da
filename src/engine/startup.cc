#include "engine/startup.h"

#include "common/log.h"
#include "common/text.h"
#include "memory/cuda.h"
#include "metadata/frame.h"
#include "net/address.h"

namespace kvfabric::engine {

Status ResolveSettings(const EngineConfig& config, Settings* out) {
  Settings s = config.settings;
  if (config.apply_environment) KVF_RETURN_IF_ERROR(s.ApplyEnvironment());
  // Fields the application assigned skipped Set's checks.
  KVF_RETURN_IF_ERROR(s.Validate());
  if (!log::SetLevel(s.log_level)) return Status::Internal("KVF_LOG_LEVEL='" + s.log_level + "' passed its check");
  *out = std::move(s);
  return Status::OK();
}

Status OpenMetadata(const std::string& metadata, const Settings& settings,
                    std::unique_ptr<metadata::MetadataStore>* out) {
  if (metadata::IsStoreUri(metadata)) return metadata::OpenMetadataStore(metadata, settings, out);
  if (metadata::IsP2pUri(metadata)) {
    out->reset();
    return Status::OK();
  }
  return Status::InvalidArgument("metadata '" + metadata +
                                 "': use p2p (or P2PHANDSHAKE), etcd://host:port[,host:port] or http://host:port/path");
}

Status ResolveListenAddress(const std::string& local_server_name, ListenAddress* out) {
  ListenAddress a;
  KVF_RETURN_IF_ERROR(net::ParseHostPort(local_server_name, &a.host, &a.port).Annotate("local_server_name"));
  net::SocketAddress resolved;
  KVF_RETURN_IF_ERROR(net::ResolveHost(a.host, &resolved).Annotate("local_server_name"));
  a.ip = resolved.ip();
  const bool v6 = resolved.family() == AF_INET6;
  a.bind_ip = !v6 ? resolved.ip() : resolved.loopback() ? "127.0.0.1" : "";
  *out = std::move(a);
  return Status::OK();
}

Status CheckAdvertisedHost(const std::string& host, const std::string& metadata) {
  if (!net::IsLoopbackName(host)) return Status::OK();
  for (const std::string& h : metadata::StoreHosts(metadata))
    if (!net::IsLoopbackName(h))
      return Status::InvalidArgument(text::Format(
          "local_server_name: this engine would advertise {}, a loopback address, in metadata {} that other hosts "
          "read: peers there would connect to themselves. Set local_server_name to this host's address on the "
          "network its peers share (HOST:0; kvfabric store-node: --listen HOST:PORT or --local_server_name HOST:0)",
          host, metadata));
  return Status::OK();
}

Status DiscoverTopology(const std::vector<fabric::RailInfo>& rails, bool cuda_usable, const Settings& settings,
                        topology::Topology* out) {
  topology::Topology t = topology::Topology::Discover(rails);
  // cuda:N as the driver numbers it, for each GPU's nearest rails
  if (cuda_usable) t.SetCudaOrdinals(memory::cuda::PciBusIds());
  if (!settings.topology_file.empty())
    KVF_RETURN_IF_ERROR(t.ApplyFile(settings.topology_file).Annotate("KVF_TOPOLOGY_FILE"));
  *out = std::move(t);
  return Status::OK();
}

metadata::HandshakeServer::Options HandshakeOptions(const Settings& settings, const ListenAddress& address) {
  metadata::HandshakeServer::Options o;
  o.host = address.ip;
  o.port = address.port;
  o.timeout_ms = settings.handshake_timeout_ms;
  o.max_frame = static_cast<size_t>(settings.handshake_max_frame);
  o.max_connections = static_cast<size_t>(settings.handshake_max_connections);
  o.auth_timeout_ms = settings.handshake_auth_timeout_ms;
  o.lifetime_ms = settings.handshake_connection_lifetime_ms;
  o.max_requests = static_cast<size_t>(settings.handshake_connection_requests);
  o.auth_token = settings.auth_token;
  return o;
}

metadata::CallOptions HandshakeCallOptions(const Settings& settings) {
  return {settings.handshake_timeout_ms, static_cast<size_t>(settings.handshake_max_frame), settings.auth_token};
}

}  // namespace kvfabric::engine
