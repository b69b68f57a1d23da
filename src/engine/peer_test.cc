#include "engine/peer.h"

#include <gtest/gtest.h>

#include "fabric/fabric_info.h"

namespace kvfabric::engine {
namespace {

fabric::RailInfo R(const char* prov, const char* fabric) {
  fabric::RailInfo r;
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

TEST(PairRailsTest, EachRailReachesEveryPeerRailOfItsFabricPreferredFirst) {
  metadata::SegmentDesc efa;
  for (int i = 0; i < 4; ++i) efa.rails.push_back({"efa", "efa", "d", "a", true});
  efa.rails.push_back({"shm", "shm", "shm", "z", true});
  const auto reach = ReachableRails({R("efa", "efa"), R("efa", "efa"), R("shm", "shm")}, efa);
  EXPECT_EQ(reach[0], (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(reach[1], (std::vector<int>{1, 2, 3, 0}));
  EXPECT_EQ(reach[2], (std::vector<int>{4}));
  // tcp subnets: a rail reaches only its twin.
  metadata::SegmentDesc tcp;
  tcp.rails = {{"tcp;ofi_rxm", "10.77.1.0/24", "b1", "x", false}, {"tcp;ofi_rxm", "10.77.2.0/24", "b2", "y", false}};
  const auto t = ReachableRails({R("tcp;ofi_rxm", "10.77.2.0/24"), R("verbs;ofi_rxm", "v")}, tcp);
  EXPECT_EQ(t[0], (std::vector<int>{1}));
  EXPECT_TRUE(t[1].empty());
}

TEST(PairRailsTest, FirstKeyedRailSkipsPeerRailsWithoutTheKey) {
  const std::vector<std::optional<uint64_t>> keys = {std::nullopt, std::nullopt, 7, 9};  // near rails 2, 3
  const std::vector<int> reach = {1, 2, 3, 0};
  EXPECT_EQ(FirstKeyedRail(reach, keys), 2);
  const std::vector<int> reach0 = {0, 1};
  EXPECT_EQ(FirstKeyedRail(reach0, keys), -1);
  const std::vector<int> out_of_range = {9};
  EXPECT_EQ(FirstKeyedRail(out_of_range, keys), -1);
}

TEST(PeerTest, FailedRailIsDownForThePeerUntilItsRetryTime) {
  Peer p(1, "10.0.0.2:15000");
  EXPECT_TRUE(p.RailUp(3, 1000));
  EXPECT_TRUE(p.MarkRailDown(3, 1000, 5000));   // was up: the caller logs it
  EXPECT_FALSE(p.MarkRailDown(3, 2000, 6000));  // already down: no second log
  EXPECT_FALSE(p.RailUp(3, 5999));
  EXPECT_TRUE(p.RailUp(3, 6000));
  EXPECT_TRUE(p.RailUp(2, 2000));  // other rails are not affected
}

TEST(PeerTest, ClosedSegmentResolvesNothing) {
  // A request that validated before CloseSegment and posts after it must
  // not put the peer back into the address vector.
  fabric::InfoList infos;
  ASSERT_TRUE(fabric::InfoList::Query("shm", &infos).ok());
  std::unique_ptr<fabric::Rail> rail;
  ASSERT_TRUE(fabric::Rail::Open(infos.entries().front(), fabric::RailOptions(), 0, &rail).ok());
  Peer p(1, "127.0.0.1:15000");
  EXPECT_TRUE(p.ReleaseSlots().empty());
  fi_addr_t a;
  Status s = p.Resolve(rail.get(), &a);
  EXPECT_EQ(s.code(), Status::Code::kNotFound) << s.ToString();
  EXPECT_EQ(rail->peer_slots(), 0u);
}

}  // namespace
}  // namespace kvfabric::engine
