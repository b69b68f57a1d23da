// The fabric providers this host has, as the test suites run over them:
// tcp and shm always; efa and verbs when libfabric finds the provider with
// a device here. Probed once per process, after main starts (test
// registration), so `--gtest_list_tests` (ctest's discovery) and each
// later run of one case agree on one host.
#pragma once

#include <string>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric::test {

struct FoundProvider {
  std::string protocol;  // EngineConfig::protocol: "tcp", "shm", "efa", "verbs"
  // Set when libfabric has the provider here but could not list it (an
  // error other than "no such provider or device"): its cases fail with it.
  std::string probe_error{};
};

// The provider behind `protocol` as an engine would look it up: OK when
// libfabric lists a usable domain of it, Unavailable when the provider is
// not built in or has no device here, another error when the lookup failed.
Status ProbeProvider(const std::string& protocol);

const std::vector<FoundProvider>& FabricProviders();
// The protocols of FabricProviders(), for suites parameterized by them.
std::vector<std::string> FabricProtocols();

}  // namespace kvfabric::test
