#include "store/mover/copier.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace kvfabric::store {
namespace {

TEST(CopierTest, CopiesInOrderAndHoldsThePiecesFromItsGateUntilOpened) {
  std::vector<char> from(3 * 64, 'x'), to(3 * 64, '.');
  for (size_t i = 0; i < from.size(); ++i) from[i] = static_cast<char>('a' + i / 64);
  Copier copier;
  std::vector<Copier::Piece> pieces;
  for (size_t p = 0; p < 3; ++p) pieces.push_back({to.data() + 64 * p, from.data() + 64 * p, 64});
  EXPECT_FALSE(copier.Busy());
  auto job = copier.Start(pieces, {}, /*gate=*/2);
  EXPECT_TRUE(copier.Busy()) << "a job queued or being copied";
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (job->done() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  ASSERT_EQ(job->done(), 2u) << "the pieces before the gate";
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(job->done(), 2u) << "the gate holds until Open";
  EXPECT_EQ(to[128], '.');
  EXPECT_FALSE(job->WaitUntil(std::chrono::steady_clock::now() + std::chrono::milliseconds(5)));
  EXPECT_TRUE(copier.Busy()) << "held at its gate";
  job->Open();
  job->Wait();
  const auto idle_by = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (copier.Busy() && std::chrono::steady_clock::now() < idle_by) std::this_thread::yield();
  EXPECT_FALSE(copier.Busy()) << "every job copied";
  EXPECT_EQ(std::memcmp(to.data(), from.data(), to.size()), 0);
  auto ungated = copier.Start({{to.data(), "zz", 2}}, {});
  ungated->Wait();
  EXPECT_EQ(to[0], 'z') << "no gate: copied at once";
}

}  // namespace
}  // namespace kvfabric::store
