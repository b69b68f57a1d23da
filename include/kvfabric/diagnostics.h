// kvfabric diagnostics: what an engine would find on this host, asked
// without starting one. Serves `kvfabric doctor`, `kvfabric-topo`, the
// Python binding and Mooncake's get_local_topology. Each call prepares
// libfabric with `settings` first (PrepareLibfabric), as an engine would.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/settings.h"
#include "kvfabric/status.h"

namespace kvfabric {

// The libfabric provider a protocol name means on this host: "auto" is efa
// where the efa provider finds a device, else tcp;ofi_rxm; "tcp" is
// tcp;ofi_rxm, "verbs" verbs;ofi_rxm, "rdma" efa else verbs. Unknown names
// are an InvalidArgument listing the accepted ones.
Status ResolveProvider(const std::string& protocol, std::string* provider);

// One libfabric domain (a rail an engine could open).
struct FabricDomain {
  std::string provider;  // e.g. "tcp;ofi_rxm", "efa"
  std::string domain;    // e.g. "lo", "rdmap79s0-rdm"
  std::string fabric;    // e.g. "127.0.0.1/32"
  std::string ip;        // IPv4 source address for socket providers, else ""
  bool hmem = false;     // the provider offers FI_HMEM (device memory)
  // efa: how the provider carries READ and WRITE on an enabled endpoint
  // ("READ and WRITE by device RDMA", "READ by device RDMA, WRITE emulated",
  // "not reported by this libfabric"); empty for other providers.
  std::string rma;
};

// The usable domains of `protocol`; empty (and OK) when its provider is
// absent here. `devices` (comma-separated, as EngineConfig::nic_filter)
// keeps only those and fails listing the existing ones for an unknown name.
Status ListFabricDomains(const Settings& settings, const std::string& protocol, const std::string& devices,
                         std::vector<FabricDomain>* out);

struct LibfabricVersions {
  std::string library;    // the loaded libfabric, "1.17"
  std::string headers;    // the one kvfabric was built against
  std::string requested;  // the API version kvfabric asks for
};
LibfabricVersions GetLibfabricVersions();

// The topology an engine of `protocol` (rails restricted to `devices`,
// empty: all) would see: NICs with their NUMA node and PCI address, GPUs
// (numbered as the CUDA driver numbers them when it loads) with their
// nearest rails, after KVF_TOPOLOGY_FILE. `sysfs_root` is for tests.
enum class TopologyFormat {
  kFull,            // kvfabric-topo's JSON: nics, gpus, nearest rails
  kLocationMatrix,  // Mooncake's get_local_topology(): {location: [[near], [other]]}
};
Status DescribeTopology(const Settings& settings, const std::string& protocol, const std::string& devices,
                        TopologyFormat format, std::string* json, const std::string& sysfs_root = "/sys");

// The CUDA device ordinal of device memory at `addr`, or -1 (host memory,
// or no CUDA driver loaded).
int CudaDeviceOf(const void* addr);
// Waits for the work queued on CUstream `stream` (0: the legacy default
// stream) of `device`.
Status CudaStreamSynchronize(uintptr_t stream, int device);

// Writes one line to the engine's log at `level` (error, warn or warning, info or
// debug; anything else is info), under KVF_LOG_LEVEL.
void WriteLog(const std::string& level, const std::string& message);

}  // namespace kvfabric
