// kvfabric-topo: the rails libfabric offers here, where each NIC sits (NUMA
// node, PCI address) and the GPUs with their nearest rails, as JSON; what an
// engine on this host uses to prefer rails near a buffer.
//   kvfabric-topo [--protocol=efa|tcp|verbs|sockets|auto] [--device_name=a,b] [--topology_file=F]
#include <CLI/CLI.hpp>

#include <cstdio>

#include "fabric/fabric_info.h"
#include "kvfabric/engine.h"
#include "topology/topology.h"

using namespace kvfabric;

int main(int argc, char** argv) {
  std::string protocol = "auto", devices, file, sysfs = "/sys";
  CLI::App app{"kvfabric-topo: rails, their NUMA node and PCI address, and the GPUs' nearest rails, as JSON"};
  app.add_option("--protocol", protocol, "efa, tcp, verbs, sockets, shm or auto (efa when present, else tcp)");
  app.add_option("--device_name", devices, "comma-separated libfabric domains to keep (default: every one)");
  app.add_option("--topology_file", file, "a KVF_TOPOLOGY_FILE to apply on top of sysfs");
  app.add_option("--sysfs", sysfs, "sysfs root (for tests)");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const Status& s) {
    std::fprintf(stderr, "kvfabric-topo: %s\n", s.ToString().c_str());
    return 1;
  };
  Settings settings;
  Status prep = settings.ApplyEnvironment();
  if (!prep.ok()) return fail(prep);
  (void)PrepareLibfabric(settings);  // before the first fi_getinfo, as an engine would
  std::string provider;
  if (protocol == "auto") {
    provider = fabric::ProviderAvailable("efa") ? "efa" : "tcp;ofi_rxm";
  } else {
    Status s = fabric::ProviderForProtocol(protocol, &provider);
    if (!s.ok()) return fail(s);
  }
  fabric::InfoList infos;
  Status s = fabric::InfoList::Query(provider, &infos);
  if (!s.ok()) return fail(s);
  std::vector<fi_info*> chosen = infos.entries();
  if (!devices.empty()) {
    s = fabric::SelectDomains(infos, devices, "", &chosen);
    if (!s.ok()) return fail(s);
  }
  std::vector<fabric::RailInfo> rails;
  for (const fi_info* i : chosen) {
    fabric::RailInfo r;
    r.provider = i->fabric_attr->prov_name;
    r.domain = i->domain_attr->name;
    r.fabric = i->fabric_attr->name;
    rails.push_back(r);
  }
  topology::Topology t = topology::Topology::Discover(rails, sysfs);
  if (!file.empty()) {
    s = t.ApplyFile(file);
    if (!s.ok()) return fail(s);
  }
  std::printf("%s\n", t.ToJson().c_str());
  return 0;
}
