// Notifications: a full queue (by count or bytes) refuses new messages
// instead of dropping them; an overlong one is refused.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "kvfabric/engine.h"

namespace kvfabric::test {
namespace {

TEST(NotifyTest, FullQueueRefusesInsteadOfDropping) {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  for (int i = 0; i < 4096; ++i) ASSERT_TRUE(e->SendNotify(e->name(), std::to_string(i)).ok()) << i;
  Status s = e->SendNotify(e->name(), "one too many");
  EXPECT_NE(s.message().find("GetNotifies"), std::string::npos) << s.ToString();
  std::vector<std::string> got;
  ASSERT_TRUE(e->GetNotifies(&got).ok());
  ASSERT_EQ(got.size(), 4096u);
  EXPECT_EQ(got.front(), "0");
  EXPECT_EQ(got.back(), "4095");
  EXPECT_TRUE(e->SendNotify(e->name(), "room again").ok());
}

TEST(NotifyTest, QueueAndMessagesAreBoundedInBytes) {
  // A message over 1 MiB is refused, and the queue is bounded in bytes, not
  // by count alone: large notifications must not fill the receiver's memory.
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.log_level = "error";
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  constexpr size_t MiB = 1 << 20;
  Status big = e->SendNotify(e->name(), std::string(MiB + 1, 'x'));
  EXPECT_EQ(big.code(), Status::Code::kInvalidArgument) << big.ToString();
  for (int i = 0; i < 64; ++i) ASSERT_TRUE(e->SendNotify(e->name(), std::string(MiB, 'a' + i % 26)).ok()) << i;
  Status full = e->SendNotify(e->name(), "x");
  EXPECT_EQ(full.code(), Status::Code::kBusy) << full.ToString();
  EXPECT_NE(full.message().find("bytes"), std::string::npos) << full.ToString();
  std::vector<std::string> got;
  ASSERT_TRUE(e->GetNotifies(&got).ok());
  ASSERT_EQ(got.size(), 64u);  // nothing dropped, nothing extra
  EXPECT_EQ(got[3], std::string(MiB, 'd'));
  EXPECT_TRUE(e->SendNotify(e->name(), "room again").ok());
}

}  // namespace
}  // namespace kvfabric::test
