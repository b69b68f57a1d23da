// Notifications: a full queue refuses new messages instead of dropping them.
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

}  // namespace
}  // namespace kvfabric::test
