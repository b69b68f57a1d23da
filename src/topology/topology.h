// Topology: where each rail's NIC sits (NUMA node, PCI address and path),
// the GPUs of the host, and which rails are near a buffer's location. Read
// from sysfs; a topology file (KVF_TOPOLOGY_FILE) can state or correct any
// of it, for hosts whose firmware reports no NUMA node or for tests.
#pragma once

#include <string>
#include <vector>

#include "fabric/rail_info.h"
#include "kvfabric/status.h"

namespace kvfabric::topology {

struct Nic {
  std::string domain;    // the rail's libfabric domain (e.g. "rdmap79s0-rdm", "eth0")
  std::string provider;
  std::string device;    // the kernel device it maps to ("rdmap79s0", "eth0"), "" if none
  std::string pci;       // PCI address ("0000:4f:00.0"), "" for virtual devices
  std::string pci_path;  // sysfs path of the PCI device: ancestors are bridges and switches
  int numa = -1;         // -1: unknown (virtual device, or firmware did not say)
};

struct Gpu {
  int index = 0;  // cuda:N, in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID)
  std::string pci;
  std::string pci_path;
  int numa = -1;
  std::vector<size_t> nearest_rails;  // sharing the deepest PCIe switch, else the NUMA node
};

class Topology {
 public:
  // Reads `sysfs_root` ("/sys" on a real host) for every rail.
  static Topology Discover(const std::vector<fabric::RailInfo>& rails, const std::string& sysfs_root = "/sys");

  // Applies a topology file: {"nics": {"<domain>": {"numa": N, "pci": "..."}},
  // "gpus": [{"index": N, "pci": "...", "numa": N, "rails": ["<domain>", ...]}]}.
  // Unknown domains are an error naming the known ones; nothing changes then.
  Status ApplyFile(const std::string& path);
  Status ApplyJson(const std::string& text, const std::string& where);

  // The CUDA driver's numbering: `pci_by_ordinal[N]` is cuda:N's PCI
  // address. GPUs found there take that index (PCI order is only a guess:
  // CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER change it); GPUs the driver
  // does not show are dropped.
  void SetCudaOrdinals(const std::vector<std::string>& pci_by_ordinal);

  const std::vector<Nic>& nics() const { return nics_; }
  const std::vector<Gpu>& gpus() const { return gpus_; }

  // Rails (indexes into nics()) that should carry a buffer at `location`
  // ("cpu:N", "cuda:N"): the same NUMA node or the GPU's nearest rails.
  // `fallback` gets the others. When nothing is known to be near (NUMA not
  // reported, no such GPU), every rail is preferred.
  void RailsFor(const std::string& location, std::vector<size_t>* preferred, std::vector<size_t>* fallback) const;

  std::string ToJson() const;

  // The rail matrix by location, the shape Mooncake's get_local_topology()
  // returns: {"cpu:N": [[near NICs], [other NICs]], "cuda:N": [...]} for
  // every NUMA node that holds a NIC (cpu:0 when none reports one) and every
  // GPU. A NIC is named by its kernel device ("mlx5_0", "rdmap79s0"), or its
  // domain where it has none.
  std::string ToLocationMatrixJson() const;

 private:
  void FindNearestRails();

  std::vector<Nic> nics_;
  std::vector<Gpu> gpus_;
};

}  // namespace kvfabric::topology
