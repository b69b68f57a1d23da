// The target fails: killed, stopped, unregistered or restarted under the
// same name while work is in flight. Each request ends within its deadline
// and the engine keeps serving.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "kvfabric/stats.h"
#include "tests/integration/transport/fixture.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::FillPattern;

// Needs a target that can die: instantiated for the process cases only.
class PeerFailureTest : public TransportFixture {};

// How many of this process's open files are shm regions (kvfabric's) that
// were unlinked: each keeps its 16 MiB of memory until closed.
int OpenUnlinkedShmRegions() {
  int n = 0;
  std::error_code ec;
  for (const auto& fd : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    const std::string target = std::filesystem::read_symlink(fd.path(), ec).string();
    if (target.rfind("/dev/shm/kvf-", 0) == 0 && target.find("(deleted)") != std::string::npos) ++n;
  }
  return n;
}

TEST_P(PeerFailureTest, PeerKilledMidBatch) {
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 256; ++i) reqs.push_back(Req(i % 2 ? OpCode::kRead : OpCode::kWrite, (i % 64) * MiB, (i % 64) * MiB, MiB));
  // Frozen first, so the batch is surely in flight (not finished) at the kill.
  ASSERT_TRUE(target_->Freeze());
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_TRUE(target_->Kill());
  auto t0 = std::chrono::steady_clock::now();
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 15000, &agg).ok());
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_NE(agg.state, TaskState::kPending) << "requests hang after the peer died";
  EXPECT_LT(took, std::chrono::seconds(6)) << "requests outlived their deadline";
  size_t ended_badly = 0;
  for (size_t i = 0; i < 256; ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_->GetTaskStatus(b, i, &st).ok());
    EXPECT_NE(st.state, TaskState::kPending);
    if (st.state != TaskState::kCompleted) {
      ++ended_badly;
      EXPECT_FALSE(st.error.ok());
    }
  }
  EXPECT_GT(ended_badly, 0u);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  // The engine keeps serving other peers.
  std::string err;
  auto other = StartProcessTarget(GetParam().protocol, 4 * MiB, "", &err);
  ASSERT_NE(other, nullptr) << err;
  SegmentHandle h;
  ASSERT_TRUE(engine_->OpenSegment(other->name, &h).ok());
  FillPattern(local(0), MiB, 0, 111);
  Status s = engine_->Transfer({{OpCode::kWrite, local(0), h, other->addr, MiB}});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(other->Check(0, MiB, 111), MiB);
}

// A peer killed with operations posted to it (its connection up, the
// provider holding them, unlike the batch above that waits for a frozen
// peer's connection): over tcp the provider flushes them when the
// connection closes, over shm the liveness check ends them. Either way they
// end at once, not at their deadline, and as NetworkError: the path to the
// peer is gone. As FabricError a store GET that met this would be -800
// through the Mooncake compat layer, on which vLLM stops its worker.
TEST_P(PeerFailureTest, PeerKilledWithOperationsPostedEndsThemAsNetworkErrors) {
  cfg_.settings.transfer_timeout_ms = 10000;
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, MiB, 7).ok());  // the connection is up
  ASSERT_TRUE(target_->Freeze());
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 256; ++i)
    reqs.push_back(Req(i % 2 ? OpCode::kRead : OpCode::kWrite, (i % 64) * MiB, (i % 64) * MiB, MiB));
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  auto in_flight = [&] {
    EngineStats es;
    EXPECT_TRUE(engine_->Stats(&es).ok());
    uint64_t n = 0;
    for (const RailStats& r : es.rails) n += r.in_flight;
    return n;
  };
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  ASSERT_GT(in_flight(), 0u) << "the operations were posted before the kill";
  ASSERT_TRUE(target_->Kill());
  const auto t0 = std::chrono::steady_clock::now();
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 15000, &agg).ok());
  EXPECT_NE(agg.state, TaskState::kPending);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3)) << "they waited for their deadline";
  size_t lost = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    TransferStatus st;
    ASSERT_TRUE(engine_->GetTaskStatus(b, i, &st).ok());
    if (st.state == TaskState::kCompleted) continue;
    ++lost;
    EXPECT_EQ(st.error.code(), Status::Code::kNetworkError) << st.error.ToString();
  }
  EXPECT_GT(lost, 0u);
  EXPECT_EQ(in_flight(), 0u) << "every credit came back";
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
}

// A READ from a peer that hangs (stopped, or cut off) outlives its
// deadline: the task says Timeout, and the caller gives the buffer to other
// data. When the peer goes on, the READ must not land in the buffer then.
// Over shm the initiator does a READ's copy itself (CMA), so a stopped peer
// does not hold it up: it completes, and nothing is left to land later.
// Over tcp it would land later, so the task's deadline closes the
// connection that carries it first (Rail::CutPeer; docs/design/engine-failures.md,
// "A request past its deadline").
TEST_P(PeerFailureTest, AReadThatTimedOutNeverLandsLater) {
  cfg_.settings.transfer_timeout_ms = 1000;
  ASSERT_NO_FATAL_FAILURE(Start(8 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, 4 * MiB, 31).ok());  // the connection is up; the target holds pattern 31
  FillPattern(local(0), 4 * MiB, 0, 32);
  ASSERT_TRUE(target_->Freeze());
  Status s = engine_->Transfer({Req(OpCode::kRead, 0, 0, 4 * MiB)});
  if (s.ok()) {
    EXPECT_EQ(GetParam().protocol, "shm") << "only shm's READ goes on without the peer";
    EXPECT_EQ(tools::CheckPattern(local(0), 4 * MiB, 0, 31), 4 * MiB);
  } else {
    ASSERT_EQ(s.code(), Status::Code::kTimeout) << s.ToString();
    // The message says where the READ was when its deadline passed.
    EXPECT_NE(s.message().find("slice(s) posted"), std::string::npos) << s.ToString();
  }
  FillPattern(local(0), 4 * MiB, 0, 33);  // the caller's next use of the buffer
  ASSERT_TRUE(target_->Thaw());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(tools::CheckPattern(local(0), 4 * MiB, 0, 33), 4 * MiB) << "the timed-out READ landed later";
  // The peer is served again afterwards.
  ASSERT_TRUE(WritePattern(0, 0, MiB, 34).ok());
  EXPECT_EQ(target_->Check(0, MiB, 34), MiB);
}

// A rail that stalls with nowhere to move its operations (one rail to the
// peer) leaves them posted: the request waits for the peer, within its
// deadline, and completes when the peer goes on. A stalled rail closes a
// connection (failing its operations so that they move) only when every
// operation on it would move; here none can, so the READ is not failed at
// the stall.
TEST_P(PeerFailureTest, AStalledRailWithNowhereToMoveWaitsForThePeer) {
  cfg_.settings.transfer_timeout_ms = 20000;
  cfg_.settings.rail_stall_ms = 300;
  ASSERT_NO_FATAL_FAILURE(Start(8 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, 4 * MiB, 61).ok());  // the target holds pattern 61
  FillPattern(local(0), 4 * MiB, 0, 62);
  ASSERT_TRUE(target_->Freeze());
  std::thread thaw([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // four stall periods
    EXPECT_TRUE(target_->Thaw());
  });
  Status s = engine_->Transfer({Req(OpCode::kRead, 0, 0, 4 * MiB)});
  thaw.join();
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(tools::CheckPattern(local(0), 4 * MiB, 0, 61), 4 * MiB);
  EngineStats stats;
  ASSERT_TRUE(engine_->Stats(&stats).ok());
  uint64_t stalls = 0;
  for (const RailStats& r : stats.rails) stalls += r.stalls;
  // shm copies a READ within its post: nothing was in flight to stall.
  if (GetParam().protocol != "shm") {
    EXPECT_GE(stalls, 1u) << "the rail did not stall while the peer was stopped";
  }
}

// ExpireBatch ends a hung READ now, long before its own deadline, and
// nothing of it lands later (over tcp its connection was closed first).
TEST_P(PeerFailureTest, ExpireBatchEndsAHungReadNowAndNothingLandsLater) {
  cfg_.settings.transfer_timeout_ms = 30000;
  ASSERT_NO_FATAL_FAILURE(Start(8 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, 4 * MiB, 51).ok());
  FillPattern(local(0), 4 * MiB, 0, 52);
  ASSERT_TRUE(target_->Freeze());
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitBatch({Req(OpCode::kRead, 0, 0, 4 * MiB)}, &b));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine_->ExpireBatch(b).ok());
  TransferStatus st;
  ASSERT_TRUE(engine_->GetTaskStatus(b, 0, &st).ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(1));
  if (st.state == TaskState::kCompleted) {
    EXPECT_EQ(GetParam().protocol, "shm") << "only shm's READ goes on without the peer";
  } else {
    EXPECT_EQ(st.state, TaskState::kTimeout);
    EXPECT_NE(st.error.ToString().find("ended by its caller"), std::string::npos) << st.error.ToString();
  }
  FillPattern(local(0), 4 * MiB, 0, 53);
  ASSERT_TRUE(target_->Thaw());
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(tools::CheckPattern(local(0), 4 * MiB, 0, 53), 4 * MiB) << "the expired READ landed later";
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 5000, &agg).ok());
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  ASSERT_TRUE(WritePattern(0, 0, MiB, 54).ok()) << "the peer is served again";
  EXPECT_EQ(target_->Check(0, MiB, 54), MiB);
  EXPECT_EQ(engine_->ExpireBatch(b).code(), Status::Code::kNotFound);
}

TEST_P(PeerFailureTest, UnregisterRevokesRemoteAccess) {
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB));
  ASSERT_TRUE(WritePattern(0, 0, 64 * KiB, 141).ok());
  ASSERT_TRUE(target_->Unregister());
  // The initiator still holds the old descriptor: the request is posted with
  // the revoked key and must fail, leaving the memory as it was.
  FillPattern(local(0), MiB, 0, 142);
  const auto t0 = std::chrono::steady_clock::now();
  Status w = engine_->Transfer({Req(OpCode::kWrite, 0, 0, MiB)});
  EXPECT_FALSE(w.ok());
  Status r = engine_->Transfer({Req(OpCode::kRead, 0, 0, MiB)});
  EXPECT_FALSE(r.ok());
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(8));
  EXPECT_EQ(target_->Check(0, 64 * KiB, 141), 64 * KiB);
  EXPECT_EQ(target_->Check(64 * KiB, MiB - 64 * KiB, 7), MiB - 64 * KiB);
  // After the failure the engine refetches the descriptor: the range is now
  // refused before anything is posted.
  Status again = engine_->Transfer({Req(OpCode::kWrite, 0, 0, MiB)});
  EXPECT_EQ(again.code(), Status::Code::kOutOfRange) << again.ToString();
  RecordProperty("write_after_unregister", w.ToString());
}

TEST_P(PeerFailureTest, SegmentClosedWithWorkInFlight) {
  cfg_.settings.transfer_timeout_ms = 2000;
  ASSERT_NO_FATAL_FAILURE(Start(16 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 16; ++i) reqs.push_back(Req(OpCode::kWrite, i * MiB, i * MiB, MiB));
  ASSERT_TRUE(target_->Freeze());
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  ASSERT_TRUE(engine_->CloseSegment(seg_).ok());
  // The closed handle is refused; the batch still ends within its deadline.
  EXPECT_EQ(engine_->Transfer({Req(OpCode::kWrite, 0, 0, 4096)}).code(), Status::Code::kNotFound);
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 10000, &agg).ok());
  EXPECT_NE(agg.state, TaskState::kPending);
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  target_->Kill();
  // The closed segment's address leaves the AV once its operations end.
  EXPECT_EQ(WaitForPeerSlots(0), 0u);
}

TEST_P(PeerFailureTest, FreeBatchWhileASubmitIsCheckingIsRefused) {
  // FreeBatch while a Submit on another thread is still checking its
  // requests says Busy: were the batch freed, the Submit would post into it
  // and the completion would crash the process.
  cfg_.settings.handshake_timeout_ms = 1500;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB));
  BatchId b;
  ASSERT_TRUE(engine_->AllocateBatch(1, &b).ok());
  ASSERT_TRUE(target_->Freeze());
  std::atomic<bool> returned{false};
  Status submitted;
  std::thread submitter([&] {
    // Past the end of the buffer the engine knows: it asks the peer for its
    // descriptor again, and the stopped peer does not answer for 1.5 s.
    submitted = engine_->Submit(b, {Req(OpCode::kWrite, 0, 4 * MiB, 4096)});
    returned = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const bool still_checking = !returned.load();
  const Status freed = engine_->FreeBatch(b);
  // ExpireBatch too: the Submit's tasks are being started.
  const Status expired = engine_->ExpireBatch(b);
  const bool checked_throughout = !returned.load();
  submitter.join();
  ASSERT_TRUE(still_checking) << "the Submit returned before FreeBatch was called: " << submitted.ToString();
  EXPECT_EQ(freed.code(), Status::Code::kBusy) << freed.ToString();
  if (checked_throughout) {
    EXPECT_EQ(expired.code(), Status::Code::kBusy) << expired.ToString();
  }
  EXPECT_FALSE(submitted.ok());
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  target_->Kill();
}

TEST_P(PeerFailureTest, EngineDestroyedWithWorkInFlight) {
  ASSERT_NO_FATAL_FAILURE(Start(64 * MiB));
  BatchId b;
  std::vector<TransferRequest> reqs;
  for (size_t i = 0; i < 64; ++i) reqs.push_back(Req(OpCode::kWrite, i * MiB, i * MiB, MiB));
  ASSERT_TRUE(target_->Freeze());  // nothing completes
  ASSERT_NO_FATAL_FAILURE(SubmitBatch(reqs, &b));
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(engine_->UnregisterMemory(local_).ok());
  engine_.reset();  // no crash, no hang
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(10));
  std::free(local_);
  local_ = nullptr;
  target_->Kill();
}

TEST_P(PeerFailureTest, PeerRestartedUnderTheSameName) {
  // A fixed handshake port, so the restarted target has the same name. And a
  // fixed buffer address: the stale descriptor still covers the range the
  // application writes to, so only the failure tells the engine.
  const int port = FreePort();
  ASSERT_GT(port, 0);
  const std::string fixed = "local_server_name=127.0.0.1:" + std::to_string(port) +
                            " buffer_addr=0x7e0000000000";
  cfg_.settings.transfer_timeout_ms = 3000;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB, fixed));
  ASSERT_TRUE(WritePattern(0, 0, MiB, 121).ok());
  const std::string name = target_->name;
  ASSERT_TRUE(target_->Kill());
  std::string err;
  target_ = StartProcessTarget(GetParam().protocol, 4 * MiB, fixed, &err);
  ASSERT_NE(target_, nullptr) << err;
  ASSERT_EQ(target_->name, name);
  ASSERT_EQ(target_->addr, 0x7e0000000000u);
  // The old process's address is gone: the first request may fail (within
  // its deadline), then the engine refetches the descriptor (new epoch) and
  // the next one goes to the new process.
  const auto t0 = std::chrono::steady_clock::now();
  Status first = WritePattern(0, 0, MiB, 122);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << first.ToString();
  Status second = WritePattern(MiB, MiB, MiB, 123);
  ASSERT_TRUE(second.ok()) << second.ToString() << " (first: " << first.ToString() << ")";
  EXPECT_EQ(target_->Check(MiB, MiB, 123), MiB);
  if (first.ok()) {
    EXPECT_EQ(target_->Check(0, MiB, 122), MiB);
  }
  RecordProperty("first_request_after_restart", first.ToString());
  // Only the new process stays in the address vector; a second restart
  // leaves no more behind than the first.
  EXPECT_EQ(WaitForPeerSlots(1), 1u);
  ASSERT_TRUE(target_->Kill());
  target_ = StartProcessTarget(GetParam().protocol, 4 * MiB, fixed, &err);
  ASSERT_NE(target_, nullptr) << err;
  (void)WritePattern(0, 0, MiB, 124);  // may meet the restart
  Status third = WritePattern(MiB, MiB, MiB, 125);
  ASSERT_TRUE(third.ok()) << third.ToString();
  EXPECT_EQ(target_->Check(MiB, MiB, 125), MiB);
  EXPECT_EQ(WaitForPeerSlots(1), 1u);
  // shm: the endpoints this process opened for the two dead targets are
  // closed, and their regions' memory with them.
  EXPECT_EQ(OpenUnlinkedShmRegions(), 0);
}

// A peer that died between two requests: over tcp the provider refuses
// every post to it for ever (it cannot reconnect), over shm its process is
// gone. The next request fails with NetworkError within the time allowed
// to connect (KVF_HANDSHAKE_TIMEOUT_MS), not at its own far deadline. And
// since the rail took a post to another peer meanwhile, it is not blamed
// for the dead one (no stall, though nothing completes for longer than
// KVF_RAIL_STALL_MS while the dead peer's request waits): it keeps serving
// everyone else.
TEST_P(PeerFailureTest, APeerThatDiedFailsWithinTheConnectTimeAndNoRailIsBlamed) {
  cfg_.settings.transfer_timeout_ms = 60000;
  cfg_.settings.handshake_timeout_ms = 1500;
  cfg_.settings.rail_stall_ms = 500;
  ASSERT_NO_FATAL_FAILURE(Start(4 * MiB));
  std::string err;
  auto other = StartProcessTarget(GetParam().protocol, 4 * MiB, "", &err);
  ASSERT_NE(other, nullptr) << err;
  SegmentHandle h;
  ASSERT_TRUE(engine_->OpenSegment(other->name, &h).ok());
  auto write_other = [&](uint32_t seed) {
    FillPattern(local(MiB), MiB, 0, seed);
    const Status s = engine_->Transfer({{OpCode::kWrite, local(MiB), h, other->addr, MiB}});
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_EQ(other->Check(0, MiB, seed), MiB);
  };
  ASSERT_TRUE(WritePattern(0, 0, MiB, 131).ok());
  ASSERT_NO_FATAL_FAILURE(write_other(132));
  ASSERT_TRUE(target_->Kill());
  // Dead a while: this process has seen its connection close.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const auto t0 = std::chrono::steady_clock::now();
  BatchId b;
  FillPattern(local(0), MiB, 0, 133);
  ASSERT_NO_FATAL_FAILURE(SubmitBatch({Req(OpCode::kWrite, 0, 0, MiB)}, &b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_NO_FATAL_FAILURE(write_other(134));  // the rail takes another peer's post
  TransferStatus agg;
  ASSERT_TRUE(engine_->WaitBatch(b, 15000, &agg).ok());
  const auto took = std::chrono::steady_clock::now() - t0;
  TransferStatus st;
  ASSERT_TRUE(engine_->GetTaskStatus(b, 0, &st).ok());
  EXPECT_EQ(st.state, TaskState::kFailed) << st.error.ToString();
  EXPECT_EQ(st.error.code(), Status::Code::kNetworkError) << st.error.ToString();
  EXPECT_LT(took, std::chrono::milliseconds(1500 + 2000)) << st.error.ToString();
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  EngineStats stats;
  ASSERT_TRUE(engine_->Stats(&stats).ok());
  for (const RailStats& r : stats.rails) EXPECT_EQ(r.stalls, 0u) << r.label << " was blamed for a dead peer";
  ASSERT_NO_FATAL_FAILURE(write_other(135));
}

INSTANTIATE_TEST_SUITE_P(Transports, PeerFailureTest, ::testing::ValuesIn(PeerFailureCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
