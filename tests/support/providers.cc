#include "tests/support/providers.h"

#include "fabric/fabric_info.h"
#include "kvfabric/engine.h"
#include "kvfabric/settings.h"

namespace kvfabric::test {

Status ProbeProvider(const std::string& protocol) {
  std::string provider;
  Status s = fabric::ProviderForProtocol(protocol, &provider);
  if (!s.ok()) return s;
  fabric::InfoList infos;
  return fabric::InfoList::Query(provider, &infos);
}

namespace {

std::vector<FoundProvider> FindProviders() {
  // Libfabric reads its environment once, at its first use in the process:
  // set what the engines of the tests would set (FI_HMEM, the rxm
  // settings) before probing, as Engine::Create does.
  (void)PrepareLibfabric(Settings{});
  std::vector<FoundProvider> found = {{"tcp"}, {"shm"}};
  for (const char* protocol : {"efa", "verbs"}) {
    const Status s = ProbeProvider(protocol);
    if (s.code() == Status::Code::kUnavailable) continue;  // not on this host
    found.push_back({protocol, s.ok() ? "" : s.ToString()});
  }
  return found;
}

}  // namespace

const std::vector<FoundProvider>& FabricProviders() {
  static const std::vector<FoundProvider> found = FindProviders();
  return found;
}

std::vector<std::string> FabricProtocols() {
  std::vector<std::string> out;
  for (const FoundProvider& p : FabricProviders()) out.push_back(p.protocol);
  return out;
}

}  // namespace kvfabric::test
