// kvfabric-topo: the rails libfabric offers here, where each NIC sits (NUMA
// node, PCI address) and the GPUs with their nearest rails, as JSON; what an
// engine on this host uses to prefer rails near a buffer.
//   kvfabric-topo [--protocol=efa|tcp|verbs|sockets|auto] [--nic_filter=a,b] [--topology_file=F]
#include <CLI/CLI.hpp>

#include <cstdio>

#include "kvfabric/diagnostics.h"
#include "tools/common/flag_names.h"

using namespace kvfabric;

int main(int argc, char** argv) {
  std::string protocol = "auto", devices, file, sysfs = "/sys";
  CLI::App app{"kvfabric-topo: rails, their NUMA node and PCI address, and the GPUs' nearest rails, as JSON"};
  app.add_option("--protocol", protocol, "efa, tcp, verbs, sockets, shm or auto (efa when present, else tcp)");
  app.add_option("--nic_filter", devices, "comma-separated libfabric domains to keep (default: every one)");
  app.add_option("--topology_file", file, "a topology file to apply on top of sysfs (default: KVF_TOPOLOGY_FILE)");
  app.add_option("--sysfs", sysfs, "sysfs root (for tests)");
  tools::UseCurrentFlagNames(argc, argv, "kvfabric-topo");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const Status& s) {
    std::fprintf(stderr, "kvfabric-topo: %s\n", s.ToString().c_str());
    return 1;
  };
  Settings settings;
  Status s = settings.ApplyEnvironment();
  if (!s.ok()) return fail(s);
  if (!file.empty()) settings.topology_file = file;
  std::string json;
  s = DescribeTopology(settings, protocol, devices, TopologyFormat::kFull, &json, sysfs);
  if (!s.ok()) return fail(s);
  std::printf("%s\n", json.c_str());
  return 0;
}
