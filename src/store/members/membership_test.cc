// The static member list (metadata p2p): parsing KVF_STORE_MEMBERS and the
// joined node's place in it. The etcd and http backends are tested against
// real servers (tests/integration/store/membership_test.cc).
#include "store/members/membership.h"

#include <gtest/gtest.h>

namespace kvfabric::store {
namespace {

std::unique_ptr<Membership> OpenStatic(const std::string& members, Status* status = nullptr) {
  Settings s;
  s.store_members = members;
  std::unique_ptr<Membership> m;
  Status st = OpenMembership("p2p", s, &m);
  if (status != nullptr) *status = st;
  else EXPECT_TRUE(st.ok()) << st.ToString();
  return m;
}

std::vector<std::string> Names(Membership& m) {
  std::vector<MemberRecord> list;
  EXPECT_TRUE(m.List(&list).ok());
  std::vector<std::string> names;
  for (const auto& r : list) names.push_back(r.name);
  return names;
}

TEST(StaticMembershipTest, ListsTheEntriesSortedOnceEach) {
  auto m = OpenStatic(" 10.0.0.2:5000,[::1]:5000 , localhost:7,10.0.0.2:5000");
  EXPECT_EQ(Names(*m), (std::vector<std::string>{"10.0.0.2:5000", "[::1]:5000", "localhost:7"}));
  EXPECT_EQ(m->Describe(), "static 3 members");
  std::vector<MemberRecord> list;
  ASSERT_TRUE(m->List(&list).ok());
  EXPECT_EQ(list[0], (MemberRecord{"10.0.0.2:5000", "", 0}));  // a static list knows names only

  for (const char* blank : {"", "  "}) EXPECT_TRUE(Names(*OpenStatic(blank)).empty()) << "'" << blank << "'";
  Settings s;
  std::unique_ptr<Membership> p;
  EXPECT_TRUE(OpenMembership("P2PHANDSHAKE", s, &p).ok());
}

TEST(StaticMembershipTest, MalformedEntriesAreRefusedByPosition) {
  struct Case {
    const char* list;
    const char* says;
  };
  for (const Case& c : {Case{"a:1,b", "entry 2 of 2"}, Case{"a:1,,b:2", "entry 2 of 3 is empty"},
                        Case{"a:1,", "entry 2 of 2 is empty"}, Case{"a:0", "port must be 1-65535"},
                        Case{"a:65536", "entry 1 of 1"}, Case{"::1:5000", "entry 1 of 1"},
                        Case{"a:1,b:x", "entry 2 of 2"}, Case{":5000", "entry 1 of 1"}}) {
    Status s;
    auto m = OpenStatic(c.list, &s);
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << c.list;
    EXPECT_NE(s.message().find(c.says), std::string::npos) << c.list << ": " << s.ToString();
    EXPECT_NE(s.message().find("KVF_STORE_MEMBERS"), std::string::npos) << s.ToString();
    EXPECT_EQ(m, nullptr);
  }
}

TEST(StaticMembershipTest, TheJoinedNodeIsListedOnceWithItsRecord) {
  auto m = OpenStatic("127.0.0.1:2,127.0.0.1:1");
  ASSERT_TRUE(m->Join({"127.0.0.1:2", "seg-2", 1 << 20}).ok());
  std::vector<MemberRecord> list;
  ASSERT_TRUE(m->List(&list).ok());
  EXPECT_EQ(list, (std::vector<MemberRecord>{{"127.0.0.1:1", "", 0}, {"127.0.0.1:2", "seg-2", 1 << 20}}));
  EXPECT_EQ(m->Describe(), "static 2 members");
  EXPECT_EQ(m->Join({"127.0.0.1:3", "", 0}).code(), Status::Code::kInvalidArgument);  // joined already

  // A node missing from the list is added to it, in order; Leave takes it out.
  ASSERT_TRUE(m->Leave().ok());
  EXPECT_EQ(Names(*m), (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:2"}));
  ASSERT_TRUE(m->Join({"127.0.0.1:15", "seg-15", 0}).ok());
  EXPECT_EQ(Names(*m), (std::vector<std::string>{"127.0.0.1:1", "127.0.0.1:15", "127.0.0.1:2"}));
  EXPECT_EQ(m->Describe(), "static 3 members");
  ASSERT_TRUE(m->Leave().ok());
  EXPECT_TRUE(m->Leave().ok());

  for (const char* bad : {"", "host", "h:0", "::1:5"}) {
    Status s = m->Join({bad, "", 0});
    EXPECT_EQ(s.code(), Status::Code::kInvalidArgument) << bad;
    EXPECT_NE(s.message().find("control address"), std::string::npos) << s.ToString();
  }
}

TEST(StaticMembershipTest, OtherUrisAreRefused) {
  Settings s;
  std::unique_ptr<Membership> m;
  Status st = OpenMembership("zookeeper://127.0.0.1:2181", s, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(m, nullptr);
  s.store_member_ttl_s = 1;  // assigned without the setting's check
  EXPECT_EQ(OpenMembership("etcd://127.0.0.1:1", s, &m).code(), Status::Code::kInvalidArgument);
  s.store_cluster = "c1";
  EXPECT_EQ(MembersPrefix(s), "kvfabric/store/c1/members/");
}

}  // namespace
}  // namespace kvfabric::store
