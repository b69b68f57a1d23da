// KVF_AUTH_TOKEN: peers without the shared secret are refused; no listener
// is bound to all interfaces.
#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
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

// The inodes of this process's sockets.
std::set<std::string> OwnSocketInodes() {
  std::set<std::string> inodes;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (!ec && target.rfind("socket:[", 0) == 0) inodes.insert(target.substr(8, target.size() - 9));
  }
  return inodes;
}

// Where the provider allows it, every listener of an engine (handshake
// server, tcp rails) is bound to the address it serves, never to all
// interfaces (docs/security.md, "Ports").
TEST(AuthTest, NoListenerIsBoundToAllInterfaces) {
  EngineConfig cfg;
  cfg.protocol = "tcp";
  cfg.apply_environment = false;
  std::unique_ptr<Engine> e;
  ASSERT_TRUE(Engine::Create(cfg, &e).ok());
  std::vector<uint8_t> buf(1 << 16);
  ASSERT_TRUE(e->RegisterMemory(buf.data(), buf.size()).ok());
  const auto mine = OwnSocketInodes();
  int listeners = 0;
  for (const char* table : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::ifstream in(table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream row(line);
      std::string slot, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      row >> slot >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode;
      if (state != "0A" || mine.count(inode) == 0) continue;  // 0A: LISTEN
      ++listeners;
      const std::string addr = local.substr(0, local.find(':'));
      EXPECT_NE(addr.find_first_not_of('0'), std::string::npos) << table << ": " << local << " listens on all interfaces";
    }
  }
  EXPECT_GE(listeners, 2) << "the handshake server and at least one rail";
}

}  // namespace
}  // namespace kvfabric::test
