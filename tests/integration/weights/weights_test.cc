// Weight sync across processes (kvfabric-test-weights-member): a sender
// and 1, 2 or 4 receivers over each provider found, every tensor checked
// byte for byte by its receiver; two versions in a row; a bucket damaged
// in flight; a sender that dies mid-sync; receivers that die mid-chain.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/process.h"
#include "tests/support/providers.h"

#ifndef KVF_WEIGHTS_MEMBER_PATH
#error "KVF_WEIGHTS_MEMBER_PATH must name the kvfabric-test-weights-member binary"
#endif

namespace kvfabric::test {
namespace {

using Clock = std::chrono::steady_clock;

class WeightsTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/kvf-weights-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    members_.clear();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  // Starts a sender and `receivers` receivers for `versions` versions;
  // member i takes the argument args[i], if any.
  void StartSync(int receivers, int versions, const std::map<int, std::string>& args = {}) {
    for (int i = 0; i <= receivers; ++i) {
      std::vector<std::string> argv = {
          KVF_WEIGHTS_MEMBER_PATH, GetParam(), dir_, std::to_string(i), std::to_string(receivers + 1),
          std::to_string(versions)};
      if (args.contains(i)) argv.push_back(args.at(i));
      members_.push_back(std::make_unique<Child>());
      ASSERT_TRUE(members_.back()->Start(argv));
    }
  }
  std::string Line(int member, int timeout_ms = 60000) { return members_[member]->FirstLine(timeout_ms); }

  std::string dir_;
  std::vector<std::unique_ptr<Child>> members_;
};

TEST_P(WeightsTest, EveryReceiverGetsEveryTensorOfEachVersionByteExact) {
  for (int receivers : {1, 2, 4}) {
    SCOPED_TRACE(std::to_string(receivers) + " receiver(s)");
    members_.clear();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directory(dir_);
    ASSERT_NO_FATAL_FAILURE(StartSync(receivers, 2));
    // 75 tensors, 5,234,024 bytes: buckets of 1 MiB, tensors spanning them.
    for (int v = 1; v <= 2; ++v) {
      EXPECT_EQ(Line(0), "SENT " + std::to_string(v) + " 75 5234024");
      for (int r = 1; r <= receivers; ++r) EXPECT_EQ(Line(r), "GOT " + std::to_string(v) + " 75 5234024") << r;
    }
  }
}

TEST_P(WeightsTest, NoticesSentAsMessagesCarryTheSyncToo) {
  // KVF_NOTICE_PATH=message in every member, as on a provider without
  // remote CQ data: each WRITE's notice follows it as a message. A chain of
  // two receivers gets both versions byte exact, and the sender sent its
  // notices that way (one per bucket to the first receiver: five buckets
  // of 1 MiB and more per version).
  ASSERT_NO_FATAL_FAILURE(StartSync(2, 2, {{0, "notice_path=message"}, {1, "notice_path=message"},
                                          {2, "notice_path=message"}}));
  for (int v = 1; v <= 2; ++v) {
    EXPECT_EQ(Line(0), "SENT " + std::to_string(v) + " 75 5234024");
    for (int r = 1; r <= 2; ++r) EXPECT_EQ(Line(r), "GOT " + std::to_string(v) + " 75 5234024") << r;
  }
  unsigned long long sent = 0, failed = 1;
  const std::string line = Line(0);
  ASSERT_EQ(std::sscanf(line.c_str(), "NOTICES %llu %llu", &sent, &failed), 2) << line;
  EXPECT_GE(sent, 2u * 5u) << "at least each bucket of both versions";
  EXPECT_EQ(failed, 0u);
}

TEST_P(WeightsTest, ABucketDamagedOnTheWayIsAnErrorNamingItsTensors) {
  // On one host the receivers form a chain: the first finds the damage and
  // hands nothing of that bucket out or on, and stops, telling the sender
  // and the second receiver, which stop at once (their deadline is 4 s),
  // each naming the member it waited for and the bucket.
  const auto start = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartSync(2, 1, {{0, "damage=1"}}));
  const std::string first = Line(1);
  EXPECT_NE(first.find("ERROR ProtocolError"), std::string::npos) << first;
  EXPECT_NE(first.find("bucket 1 of version 1"), std::string::npos) << first;
  EXPECT_NE(first.find("layers."), std::string::npos) << "names its tensors: " << first;
  for (int member : {0, 2}) {
    const std::string line = Line(member);
    EXPECT_EQ(line.rfind("ERROR ProtocolError", 0), 0u) << member << ": " << line;
    EXPECT_NE(line.find("member 1 ("), std::string::npos) << member << ": " << line;
    EXPECT_NE(line.find("failed on bucket 1 of version 1"), std::string::npos) << member << ": " << line;
  }
  EXPECT_LT(Clock::now() - start, std::chrono::milliseconds(3500)) << "they waited for their deadline";
}

TEST_P(WeightsTest, ASenderThatDiesEndsEveryReceiversWaitWithinTheDeadline) {
  // It dies in the middle of the second version, once every receiver has
  // the first.
  ASSERT_NO_FATAL_FAILURE(StartSync(3, 2, {{0, "die_in=2,60"}}));
  for (int r = 1; r <= 3; ++r) EXPECT_EQ(Line(r), "GOT 1 75 5234024") << r;
  const auto start = Clock::now();
  for (int r = 1; r <= 3; ++r) {
    // Waiting for a bucket from the member before it, or giving that member
    // a slot back: either way the error names the member it lost.
    const std::string line = Line(r, 30000);
    EXPECT_EQ(line.rfind("ERROR ", 0), 0u) << line;
    EXPECT_TRUE(line.find("from member " + std::to_string(r - 1) + " (") != std::string::npos ||
                line.find("giving member " + std::to_string(r - 1) + " (") != std::string::npos)
        << line;
  }
  // The members' deadline is 4 s, the engine's for a peer that cannot be
  // reached 5 s: each receiver's error comes within one of them.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(15));
}

TEST_P(WeightsTest, AReceiverThatDiesMidChainStopsNoOneElse) {
  // On one host the receivers form a chain behind the sender. The first
  // dies in the middle of the first version: the second finds its parent
  // gone and the sender adopts it, writing again what it lacks; the third
  // stays behind the second. In the second version the last one dies: the
  // second leaves it out. Every survivor gets both versions, byte exact.
  const auto start = Clock::now();
  ASSERT_NO_FATAL_FAILURE(StartSync(3, 2, {{1, "die_in=1,30"}, {3, "die_in=2,40"}}));
  for (int v = 1; v <= 2; ++v) {
    const std::string tail = std::to_string(v) + " 75 5234024";
    EXPECT_EQ(Line(0), "SENT " + tail);
    EXPECT_EQ(Line(2), "GOT " + tail);
    if (v == 1) {
      EXPECT_EQ(Line(3), "GOT " + tail);
    }
  }
  for (int dead : {1, 3}) {
    int status = 0;
    ASSERT_EQ(waitpid(members_[dead]->pid(), &status, 0), members_[dead]->pid());
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 9) << "member " << dead << " was to die: " << status;
  }
  // Found out by probes within a fraction of the members' 4 s deadline.
  EXPECT_LT(Clock::now() - start, std::chrono::seconds(8));
}

INSTANTIATE_TEST_SUITE_P(Transports, WeightsTest, ::testing::ValuesIn(FabricProtocols()),
                         [](const ::testing::TestParamInfo<std::string>& info) { return info.param; });

}  // namespace
}  // namespace kvfabric::test
