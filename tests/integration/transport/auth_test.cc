// KVF_AUTH_TOKEN: peers without the shared secret are refused.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "kvfabric/engine.h"
#include "tests/support/targets.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::FillPattern;

TEST(AuthTest, PeersWithoutTheSecretAreRefused) {
  std::string err;
  auto t = StartProcessTarget("tcp", 1 << 20, "KVF_AUTH_TOKEN=team-secret", &err);
  ASSERT_NE(t, nullptr) << err;
  for (const char* token : {"", "wrong"}) {
    EngineConfig cfg;
    cfg.protocol = "tcp";
    cfg.apply_environment = false;
    cfg.settings.auth_token = token;
    std::unique_ptr<Engine> e;
    ASSERT_TRUE(Engine::Create(cfg, &e).ok());
    SegmentHandle h;
    Status s = e->OpenSegment(t->name, &h);
    EXPECT_EQ(s.code(), Status::Code::kPermissionDenied) << "token '" << token << "': " << s.ToString();
    EXPECT_EQ(e->Probe(t->name).code(), Status::Code::kPermissionDenied);
  }
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  cfg.settings.auth_token = "team-secret";
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  EXPECT_EQ(e->settings().Get("KVF_AUTH_TOKEN"), "(set)");
  std::vector<uint8_t> buf(1 << 20);
  ASSERT_TRUE(e->RegisterMemory(buf.data(), buf.size()).ok());
  SegmentHandle h;
  ASSERT_TRUE(e->OpenSegment(t->name, &h).ok());
  FillPattern(buf.data(), buf.size(), 0, 131);
  ASSERT_TRUE(e->Transfer({{OpCode::kWrite, buf.data(), h, t->addr, buf.size()}}).ok());
  EXPECT_EQ(t->Check(0, buf.size(), 131), buf.size());
  ASSERT_TRUE(e->UnregisterMemory(buf.data()).ok());
}

}  // namespace
}  // namespace kvfabric::test
