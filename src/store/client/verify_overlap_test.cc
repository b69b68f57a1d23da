#include "store/client/verify_overlap.h"

#include <gtest/gtest.h>

namespace kvfabric::store {
namespace {

RailInfo Rail(const std::string& provider) {
  RailInfo r;
  r.provider = provider;
  return r;
}

constexpr uint64_t kPiece = 512 << 10, kShort = 128 << 10, kLong = 2 << 20;

TEST(VerifyOverlapTest, OnAndOffAreTakenAsSaid) {
  const std::vector<RailInfo> shm{Rail("shm")}, tcp{Rail("tcp;ofi_rxm")};
  for (uint64_t page : {kShort, kPiece, kLong}) {
    EXPECT_TRUE(VerifyAsPageLands("on", shm, page, kPiece)) << page;
    EXPECT_TRUE(VerifyAsPageLands("on", {}, page, kPiece)) << page;
    EXPECT_FALSE(VerifyAsPageLands("off", tcp, page, kPiece)) << page;
    EXPECT_FALSE(VerifyAsPageLands("off", {}, page, kPiece)) << page;
  }
}

TEST(VerifyOverlapTest, AutoOverlapsUnlessEveryRailIsShm) {
  for (uint64_t page : {kShort, kPiece, kLong}) {
    EXPECT_TRUE(VerifyAsPageLands("auto", {Rail("tcp;ofi_rxm")}, page, kPiece)) << page;
    EXPECT_TRUE(VerifyAsPageLands("auto", {Rail("efa"), Rail("efa"), Rail("efa")}, page, kPiece)) << page;
    EXPECT_TRUE(VerifyAsPageLands("auto", {Rail("shm"), Rail("efa")}, page, kPiece))
        << "a host with a NIC and shm for its own peers";
    EXPECT_FALSE(VerifyAsPageLands("auto", {}, page, kPiece)) << "no rail: nothing lands";
  }
}

TEST(VerifyOverlapTest, AutoOnShmAloneOverlapsOnlyPagesLongerThanAPiece) {
  for (const auto& rails : {std::vector<RailInfo>{Rail("shm")}, std::vector<RailInfo>{Rail("shm"), Rail("shm")}}) {
    EXPECT_FALSE(VerifyAsPageLands("auto", rails, kShort, kPiece));
    EXPECT_FALSE(VerifyAsPageLands("auto", rails, kPiece, kPiece)) << "one piece: nothing to hash before it lands whole";
    EXPECT_TRUE(VerifyAsPageLands("auto", rails, kPiece + 1, kPiece));
    EXPECT_TRUE(VerifyAsPageLands("auto", rails, kLong, kPiece));
  }
}

}  // namespace
}  // namespace kvfabric::store
