// The store's membership over real metadata servers, etcd and
// kvfabric-metadata-server: nodes that join list each other, one that leaves
// is gone at once, one that stops renewing (stopped or killed, in a process
// of its own) is gone within the ttl, and one cut off that long comes back
// when it can renew again.
#include "store/members/membership.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "metadata/auth.h"
#include "metadata/store.h"
#include "tests/support/process.h"
#include "tests/support/servers.h"

namespace kvfabric::test {
namespace {

using namespace std::chrono;
using store::MemberRecord;
using store::Membership;
using Names = std::vector<std::string>;

constexpr int kTtlS = 2;

class MembershipTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    std::string why;
    uri_ = SharedMetadataUri(GetParam(), &why);
    if (uri_.empty()) GTEST_SKIP() << why;
    // A cluster of its own per test: the servers are shared by the binary.
    static int tests = 0;
    settings_.store_cluster = "test" + std::to_string(++tests) + "-" + std::to_string(getpid());
    settings_.store_member_ttl_s = kTtlS;
  }

  std::unique_ptr<Membership> Open() {
    std::unique_ptr<Membership> m;
    Status s = store::OpenMembership(uri_, settings_, &m);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return m;
  }

  static Names NamesOf(Membership& m) {
    std::vector<MemberRecord> list;
    Status s = m.List(&list);
    EXPECT_TRUE(s.ok()) << s.ToString();
    Names names;
    for (const auto& r : list) names.push_back(r.name);
    return names;
  }

  // How long until `m` lists exactly `want`, polled every 50 ms; `limit`
  // (and a failure) when it never does.
  static milliseconds Until(Membership& m, const Names& want, milliseconds limit) {
    const auto t0 = steady_clock::now();
    Names got;
    while (steady_clock::now() - t0 < limit) {
      if ((got = NamesOf(m)) == want) return duration_cast<milliseconds>(steady_clock::now() - t0);
      std::this_thread::sleep_for(milliseconds(50));
    }
    ADD_FAILURE() << "still listed: " << ::testing::PrintToString(got) << ", wanted "
                  << ::testing::PrintToString(want);
    return limit;
  }

  std::string uri_;
  Settings settings_;
};

TEST_P(MembershipTest, NodesListEachOtherAndLeaveAtOnce) {
  auto a = Open(), b = Open();
  ASSERT_TRUE(a && b);
  EXPECT_EQ(a->Describe(), uri_ + " cluster " + settings_.store_cluster);
  ASSERT_TRUE(a->Join({"127.0.0.1:101", "segment-a", 1 << 20}).ok());
  ASSERT_TRUE(b->Join({"[::1]:102", "segment-b", 0}).ok());
  EXPECT_EQ(a->Join({"127.0.0.1:103", "", 0}).code(), Status::Code::kInvalidArgument);  // joined already
  EXPECT_EQ(b->Join({"no-port", "", 0}).code(), Status::Code::kInvalidArgument);
  for (Membership* m : {a.get(), b.get()}) {
    std::vector<MemberRecord> list;
    ASSERT_TRUE(m->List(&list).ok());
    EXPECT_EQ(list,
              (std::vector<MemberRecord>{{"127.0.0.1:101", "segment-a", 1 << 20}, {"[::1]:102", "segment-b", 0}}));
  }

  // A record that is not a member's is left out; the others still list.
  std::unique_ptr<metadata::MetadataStore> raw;
  ASSERT_TRUE(metadata::OpenMetadataStore(uri_, settings_, &raw).ok());
  const std::string prefix = store::MembersPrefix(settings_);
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.1:1", "not json", kTtlS).ok());
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.1:2", R"({"name":"10.0.0.1:3"})", kTtlS).ok());
  EXPECT_EQ(NamesOf(*a), (Names{"127.0.0.1:101", "[::1]:102"}));
  ASSERT_TRUE(raw->Delete(prefix + "10.0.0.1:1").ok());
  ASSERT_TRUE(raw->Delete(prefix + "10.0.0.1:2").ok());

  // A record deleted behind its node's back is put again by its next renewal.
  ASSERT_TRUE(raw->Delete(prefix + "127.0.0.1:101").ok());
  EXPECT_EQ(NamesOf(*b), (Names{"[::1]:102"}));
  EXPECT_LT(Until(*b, {"127.0.0.1:101", "[::1]:102"}, seconds(3)), milliseconds(kTtlS * 1000 / 3 + 700));

  // Leave, and a destructor's leave, take effect at once.
  ASSERT_TRUE(a->Leave().ok());
  EXPECT_EQ(NamesOf(*b), (Names{"[::1]:102"}));
  ASSERT_TRUE(a->Join({"127.0.0.1:101", "segment-a", 1 << 20}).ok());
  EXPECT_EQ(NamesOf(*b), (Names{"127.0.0.1:101", "[::1]:102"}));
  b.reset();
  EXPECT_EQ(NamesOf(*a), (Names{"127.0.0.1:101"}));
  // Renewals keep a record past its ttl.
  std::this_thread::sleep_for(milliseconds(kTtlS * 1000 + 500));
  EXPECT_EQ(NamesOf(*a), (Names{"127.0.0.1:101"}));
}

// With a token, member records are sealed with it, and only records sealed
// with it are listed: an unsealed record (a node without the token, or a
// forgery by anyone who can write the backend), one sealed with another
// token, and one whose fields were changed are left out. A process without
// the token reads sealed records as any others.
TEST_P(MembershipTest, WithATokenOnlyRecordsSealedWithItAreListed) {
  settings_.auth_token = "s3cret";
  auto a = Open();
  ASSERT_TRUE(a);
  ASSERT_TRUE(a->Join({"127.0.0.1:201", "segment-a", 1 << 20}).ok());
  std::unique_ptr<metadata::MetadataStore> raw;
  ASSERT_TRUE(metadata::OpenMetadataStore(uri_, settings_, &raw).ok());
  const std::string prefix = store::MembersPrefix(settings_);
  auto record = [](const std::string& name, const std::string& mac) {
    return R"({"name":")" + name + R"(","segment":"forged","pool_bytes":1048576)" +
           (mac.empty() ? "" : R"(,"mac":")" + mac + "\"") + "}";
  };
  using metadata::auth::MemberRecordMac;
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.9:1", record("10.0.0.9:1", ""), kTtlS).ok());
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.9:2",
                               record("10.0.0.9:2", MemberRecordMac("other", "10.0.0.9:2", "forged", 1 << 20)),
                               kTtlS)
                  .ok());
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.9:3",
                               record("10.0.0.9:3", MemberRecordMac("s3cret", "10.0.0.9:3", "forged", 1 << 30)),
                               kTtlS)
                  .ok());  // sealed for another pool size
  ASSERT_TRUE(raw->PutExpiring(prefix + "10.0.0.9:4",
                               record("10.0.0.9:4", MemberRecordMac("s3cret", "10.0.0.9:4", "forged", 1 << 20)),
                               kTtlS)
                  .ok());  // sealed with the token: a member
  EXPECT_EQ(NamesOf(*a), (Names{"10.0.0.9:4", "127.0.0.1:201"}));

  Settings plain = settings_;
  plain.auth_token.clear();
  std::unique_ptr<Membership> b;
  ASSERT_TRUE(store::OpenMembership(uri_, plain, &b).ok());
  EXPECT_EQ(NamesOf(*b), (Names{"10.0.0.9:1", "10.0.0.9:2", "10.0.0.9:3", "10.0.0.9:4", "127.0.0.1:201"}));
  for (int i = 1; i <= 4; ++i) ASSERT_TRUE(raw->Delete(prefix + "10.0.0.9:" + std::to_string(i)).ok());
}

// kvfabric-test-member, joined as `name`.
std::unique_ptr<Child> StartMember(const std::string& uri, const Settings& s, const std::string& name) {
  auto child = std::make_unique<Child>();
  if (!child->Start({KVF_TEST_MEMBER_PATH, uri, name, s.store_cluster, std::to_string(s.store_member_ttl_s)}))
    return nullptr;
  const std::string line = child->FirstLine(10000);
  EXPECT_EQ(line, "JOINED");
  return line == "JOINED" ? std::move(child) : nullptr;
}

TEST_P(MembershipTest, AStoppedOrKilledNodeLeavesWithinTheTtlAndComesBackWhenItRenews) {
  auto observer = Open();
  ASSERT_TRUE(observer);
  const std::string name = "127.0.0.1:201";
  auto child = StartMember(uri_, settings_, name);
  ASSERT_TRUE(child);
  EXPECT_EQ(NamesOf(*observer), (Names{name}));

  // Cut off (stopped) for longer than its ttl: gone, then back once it runs.
  ASSERT_EQ(kill(child->pid(), SIGSTOP), 0);
  const milliseconds ttl(kTtlS * 1000), slack(1500);
  milliseconds took = Until(*observer, {}, ttl + seconds(3));
  EXPECT_LT(took, ttl + slack) << "a stopped node outlived its ttl";
  EXPECT_GE(took, ttl / 3) << "gone before its ttl could have run out";
  ASSERT_EQ(kill(child->pid(), SIGCONT), 0);
  took = Until(*observer, {name}, seconds(3));
  EXPECT_LT(took, ttl / 3 + milliseconds(700)) << "its first renewal should have put it back";

  // Killed: gone within the ttl; its name can join again.
  ASSERT_EQ(kill(child->pid(), SIGKILL), 0);
  took = Until(*observer, {}, ttl + seconds(3));
  EXPECT_LT(took, ttl + slack);
  auto again = Open();
  ASSERT_TRUE(again->Join({name, "segment-again", 0}).ok());
  std::vector<MemberRecord> list;
  ASSERT_TRUE(observer->List(&list).ok());
  EXPECT_EQ(list, (std::vector<MemberRecord>{{name, "segment-again", 0}}));
}

INSTANTIATE_TEST_SUITE_P(Backends, MembershipTest, ::testing::Values("etcd", "http"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace kvfabric::test
