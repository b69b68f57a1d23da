#include "engine/peer.h"

#include <gtest/gtest.h>

namespace kvfabric::engine {
namespace {

RailInfo R(const char* prov, const char* fabric) {
  RailInfo r;
  r.provider = prov;
  r.fabric = fabric;
  return r;
}

TEST(PairRailsTest, SameFabricFirstThenSpread) {
  metadata::SegmentDesc remote;
  remote.rails = {{"tcp;ofi_rxm", "10.77.1.0/24", "b1", "x", false},
                  {"tcp;ofi_rxm", "10.77.2.0/24", "b2", "y", false},
                  {"shm", "shm", "shm", "z", true}};
  // Subnets pair with their twin whatever the order.
  auto p = PairRails({R("tcp;ofi_rxm", "10.77.2.0/24"), R("tcp;ofi_rxm", "10.77.1.0/24"), R("shm", "shm")}, remote);
  EXPECT_EQ(p, (std::vector<int>{1, 0, 2}));
  // EFA-like: one fabric name for all; rail k meets peer rail k mod n.
  metadata::SegmentDesc efa;
  for (int i = 0; i < 2; ++i) efa.rails.push_back({"efa", "efa", "d", "a", true});
  p = PairRails({R("efa", "efa"), R("efa", "efa"), R("efa", "efa"), R("verbs;ofi_rxm", "v")}, efa);
  EXPECT_EQ(p, (std::vector<int>{0, 1, 0, -1}));
}

}  // namespace
}  // namespace kvfabric::engine
