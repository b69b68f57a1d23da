// The store's fabric way of moving pages (FabricMovement): groups of
// requests as one engine batch against a target in another process, each
// group's end told apart, a refused group failing alone. Bytes are checked
// in the target's memory.
#include <gtest/gtest.h>

#include <vector>

#include "store/mover/fabric_movement.h"
#include "tests/integration/transport/fixture.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using store::BatchKeeper;
using store::FabricMovement;
using tools::FillPattern;

class FabricMovementTest : public TransportFixture {};

TEST_P(FabricMovementTest, GroupsMoveAsOneBatchAndEachGroupEndsOnItsOwn) {
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchKeeper keeper(engine_.get());
  std::vector<TransferRequest> requests;
  std::vector<std::pair<size_t, size_t>> groups;
  for (size_t g = 0; g < 4; ++g) {  // group g: g + 1 WRITEs of 64 KiB
    groups.push_back({requests.size(), 0});
    for (size_t r = 0; r <= g; ++r) {
      const size_t at = (g * 4 + r) * 64 * KiB;
      FillPattern(local(at), 64 * KiB, at, 41);
      requests.push_back(Req(OpCode::kWrite, at, at, 64 * KiB));
    }
    groups.back().second = requests.size();
  }
  std::vector<bool> skip{false, true, false, false};  // group 1 moves some other way
  std::vector<Status> outcomes(groups.size());
  auto m = FabricMovement::Start(&keeper, requests, groups, skip, &outcomes);
  ASSERT_NE(m, nullptr);
  for (const Status& s : outcomes) EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_FALSE(m->LandsMeanwhile(0));
  EXPECT_TRUE(m->WaitUntil(std::chrono::steady_clock::now() + std::chrono::seconds(30)));
  Status failure;
  for (size_t g = 0; g < groups.size(); ++g) {
    EXPECT_TRUE(m->GroupEnded(g, &failure)) << g;
    EXPECT_TRUE(failure.ok()) << failure.ToString();
  }
  EXPECT_TRUE(m->RequestEnded(3, 3, &failure));
  m->Finish(std::chrono::steady_clock::now() + std::chrono::seconds(30), &outcomes);
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t r = 0; r <= g; ++r) {
      const size_t at = (g * 4 + r) * 64 * KiB;
      EXPECT_EQ(target_->Check(at, 64 * KiB, 41), g == 1 ? 0 : 64 * KiB) << "group " << g << " request " << r;
    }
  }
}

TEST_P(FabricMovementTest, AGroupTheEngineRefusesFailsAloneAndTheOthersMove) {
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchKeeper keeper(engine_.get());
  std::vector<uint8_t> unregistered(64 * KiB);
  FillPattern(local(0), 64 * KiB, 0, 43);
  FillPattern(local(128 * KiB), 64 * KiB, 128 * KiB, 43);
  std::vector<TransferRequest> requests{Req(OpCode::kWrite, 0, 0, 64 * KiB),
                                        {OpCode::kWrite, unregistered.data(), seg_, target_->addr + 64 * KiB, 64 * KiB},
                                        Req(OpCode::kWrite, 128 * KiB, 128 * KiB, 64 * KiB)};
  std::vector<std::pair<size_t, size_t>> groups{{0, 1}, {1, 2}, {2, 3}};
  std::vector<Status> outcomes(groups.size());
  auto m = FabricMovement::Start(&keeper, requests, groups, {}, &outcomes);
  ASSERT_NE(m, nullptr);
  EXPECT_TRUE(outcomes[0].ok()) << outcomes[0].ToString();
  EXPECT_FALSE(outcomes[1].ok()) << "unregistered memory is refused";
  EXPECT_TRUE(outcomes[2].ok()) << outcomes[2].ToString();
  Status failure;
  EXPECT_TRUE(m->GroupEnded(1, &failure)) << "a refused group has nothing in flight";
  m->Finish(std::chrono::steady_clock::now() + std::chrono::seconds(30), &outcomes);
  EXPECT_TRUE(outcomes[0].ok());
  EXPECT_TRUE(outcomes[2].ok());
  EXPECT_EQ(target_->Check(0, 64 * KiB, 43), 64 * KiB);
  EXPECT_EQ(target_->Check(128 * KiB, 64 * KiB, 43), 64 * KiB);
  EXPECT_TRUE(keeper.Drain(std::chrono::steady_clock::now() + std::chrono::seconds(5)));
}

INSTANTIATE_TEST_SUITE_P(Transports, FabricMovementTest, ::testing::ValuesIn(ProviderCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
