#include "store/client/node_calls.h"

#include <gtest/gtest.h>

#include <mutex>

namespace kvfabric::store {
namespace {

using Clock = std::chrono::steady_clock;

std::shared_ptr<NodeView> Member(const std::string& name) {
  auto node = std::make_shared<NodeView>();
  node->name = name;
  return node;
}

// A caller whose own node keeps every request's Done, to answer when the
// test says, and which records each member reported unreachable.
struct Harness {
  Settings settings;
  ClientCounters counters;
  ControlClient control{settings};
  std::mutex mu;
  std::vector<ControlClient::Done> pending;
  std::vector<std::string> requests;
  std::vector<std::pair<std::string, Status::Code>> down;
  NodeCaller caller{settings, &control,
                    LocalNode{"self:1",
                              [this](std::string request, ControlClient::Done done) {
                                std::lock_guard<std::mutex> g(mu);
                                requests.push_back(std::move(request));
                                pending.push_back(std::move(done));
                              }},
                    [this](const std::string& member, const Status& why) {
                      std::lock_guard<std::mutex> g(mu);
                      down.push_back({member, why.code()});
                    },
                    &counters};
};

TEST(NodeCaller, RepliesAreTakenAsTheyArriveAndTheSilentTimeOut) {
  Harness h;
  std::vector<NodeCall> calls;
  for (const char* r : {"zero", "one", "two"}) calls.push_back(NodeCall{Member("self:1"), {}, r, {}, {}});
  Replies replies = h.caller.Send(&calls, Clock::now() + std::chrono::seconds(5));
  ASSERT_EQ(h.pending.size(), 3u);
  EXPECT_EQ(h.requests, (std::vector<std::string>{"zero", "one", "two"}));
  EXPECT_FALSE(replies.Answered());
  h.pending[2](Status::OK(), "re-two");
  h.pending[0](Status::NotFound("no such thing"), "");
  EXPECT_TRUE(replies.Answered());
  size_t which = 99;
  ASSERT_TRUE(replies.Next(Clock::now() + std::chrono::seconds(1), Wait::kSleep, &which));
  EXPECT_EQ(which, 2u);
  EXPECT_TRUE(calls[2].status.ok());
  EXPECT_EQ(calls[2].reply, "re-two");
  ASSERT_TRUE(replies.Next(Clock::now() + std::chrono::seconds(1), Wait::kPollFirst, &which));
  EXPECT_EQ(which, 0u);
  EXPECT_EQ(calls[0].status.code(), Status::Code::kNotFound);
  EXPECT_NE(calls[0].status.message().find("self:1"), std::string::npos) << calls[0].status.ToString();
  EXPECT_FALSE(replies.Next(Clock::now() + std::chrono::milliseconds(30), Wait::kSleep, &which));
  EXPECT_EQ(replies.unanswered(), (std::vector<size_t>{1}));
  EXPECT_EQ(calls[1].status.code(), Status::Code::kTimeout);
  // A miss is the member's answer; a call that got none marks it down.
  ASSERT_EQ(h.down.size(), 1u);
  EXPECT_EQ(h.down[0], (std::pair<std::string, Status::Code>{"self:1", Status::Code::kTimeout}));
  EXPECT_EQ(h.counters.control_calls.load(), 3u);
  EXPECT_EQ(h.counters.control_failures.load(), 2u);
  h.pending[1](Status::OK(), "too late");  // dropped, never written into calls
  EXPECT_EQ(calls[1].status.code(), Status::Code::kTimeout);
}

TEST(NodeCaller, AReplyAfterTheCallerLeftIsDropped) {
  Harness h;
  {
    std::vector<NodeCall> calls{NodeCall{Member("self:1"), {}, "x", {}, {}}};
    h.caller.CallAll(&calls, Clock::now() + std::chrono::milliseconds(20), Wait::kSleep);
    EXPECT_EQ(calls[0].status.code(), Status::Code::kTimeout);
  }  // calls and replies are gone
  h.pending[0](Status::OK(), "late");
}

TEST(NodeCaller, AMemberThatRefusesTheConnectionIsReportedDown) {
  Harness h;
  std::vector<NodeCall> calls{NodeCall{Member("127.0.0.1:1"), {0, 1}, "x", {}, {}},
                              NodeCall{Member("self:1"), {2}, "y", {}, {}}};
  Replies replies = h.caller.Send(&calls, Clock::now() + std::chrono::seconds(5));
  h.pending[0](Status::OK(), "mine");
  size_t which = 0;
  std::vector<size_t> order;
  while (order.size() < 2 && replies.Next(Clock::now() + std::chrono::seconds(6), Wait::kSleep, &which))
    order.push_back(which);
  ASSERT_EQ(order.size(), 2u);
  EXPECT_TRUE(calls[1].status.ok());
  EXPECT_EQ(calls[0].status.code(), Status::Code::kNetworkError) << calls[0].status.ToString();
  ASSERT_EQ(h.down.size(), 1u);
  EXPECT_EQ(h.down[0].first, "127.0.0.1:1");
  EXPECT_TRUE(h.caller.IsSelf("self:1"));
  EXPECT_FALSE(h.caller.IsSelf("127.0.0.1:1"));
}

TEST(NodeCaller, OnlyUnreachableMembersAreReported) {
  Harness h;
  h.caller.MarkDownIfUnreachable("m:1", Status::NotFound("a miss"));
  h.caller.MarkDownIfUnreachable("m:1", Status::InvalidArgument("bad"));
  h.caller.MarkDownIfUnreachable("m:2", Status::FabricError("its engine did not serve a READ"));
  h.caller.MarkDownIfUnreachable("m:3", Status::NetworkError("reset"));
  ASSERT_EQ(h.down.size(), 2u);
  EXPECT_EQ(h.down[0].first, "m:2");
  EXPECT_EQ(h.down[1].first, "m:3");
}

}  // namespace
}  // namespace kvfabric::store
