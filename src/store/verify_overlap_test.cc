#include "store/verify_overlap.h"

#include <gtest/gtest.h>

namespace kvfabric::store {
namespace {

RailInfo Rail(const std::string& provider) {
  RailInfo r;
  r.provider = provider;
  return r;
}

TEST(VerifyOverlapTest, OnAndOffAreTakenAsSaid) {
  const std::vector<RailInfo> shm{Rail("shm")}, tcp{Rail("tcp;ofi_rxm")};
  EXPECT_TRUE(VerifyAsPagesLand("on", shm));
  EXPECT_TRUE(VerifyAsPagesLand("on", {}));
  EXPECT_FALSE(VerifyAsPagesLand("off", tcp));
  EXPECT_FALSE(VerifyAsPagesLand("off", {}));
}

TEST(VerifyOverlapTest, AutoOverlapsUnlessEveryRailIsShm) {
  EXPECT_TRUE(VerifyAsPagesLand("auto", {Rail("tcp;ofi_rxm")}));
  EXPECT_TRUE(VerifyAsPagesLand("auto", {Rail("efa"), Rail("efa"), Rail("efa")}));
  EXPECT_TRUE(VerifyAsPagesLand("auto", {Rail("shm"), Rail("efa")})) << "a host with a NIC and shm for its own peers";
  EXPECT_FALSE(VerifyAsPagesLand("auto", {Rail("shm")}));
  EXPECT_FALSE(VerifyAsPagesLand("auto", {Rail("shm"), Rail("shm")}));
  EXPECT_FALSE(VerifyAsPagesLand("auto", {})) << "no rail: nothing lands";
}

}  // namespace
}  // namespace kvfabric::store
