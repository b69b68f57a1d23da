// The engine's life against the threads using it (Close while four writers
// run) and against fork() (a forked child must leave the parent's published
// segment and connections alone).
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tests/integration/transport/fixture.h"
#include "tests/support/servers.h"
#include "tools/common/pattern.h"

namespace kvfabric::test {
namespace {

using tools::CheckPattern;
using tools::FillPattern;

class EngineLifecycleTest : public TransportFixture {
 protected:
  // A new initiator engine in place of the closed one: the same local
  // buffer registered, the target opened again.
  void Restart() {
    engine_.reset();
    ASSERT_TRUE(Engine::Create(cfg_, &engine_).ok());
    ASSERT_TRUE(engine_->RegisterMemory(local_, kLocalSize).ok());
    Status s = engine_->OpenSegment(target_->name, &seg_);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  // Stops the target (SIGSTOP) and submits one 4 KiB write to it: on shm,
  // a fresh endpoint's first post, which sends its name the target cannot
  // read while stopped.
  void SubmitToAStoppedTarget(BatchId* b) {
    ASSERT_TRUE(target_->Freeze());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // SIGSTOP lands asynchronously
    ASSERT_NO_FATAL_FAILURE(SubmitBatch({Req(OpCode::kWrite, 0, 0, 4096)}, b));
  }
  // The target still serves: its segment opens again and a write lands.
  void ExpectTargetServes(uint32_t seed) {
    Status s = engine_->OpenSegment(target_->name, &seg_);
    ASSERT_TRUE(s.ok()) << "the target stopped serving: " << s.ToString();
    EXPECT_TRUE(WritePattern(0, 0, MiB, seed).ok());
    EXPECT_EQ(target_->Check(0, MiB, seed), MiB);
  }
};

constexpr size_t kWriters = 4;
constexpr size_t kSlot = 4 * MiB;  // each writer's part of the local and remote buffers

// One writer: Transfer (write, read back, compare), Submit + status polling +
// FreeBatch, and Submit + WaitBatch + FreeBatch, in turn, until the engine
// refuses with Closed. Any other failure, and any wrong byte, is recorded.
void Writer(Engine* e, uint8_t* local, SegmentHandle seg, uint64_t remote, uint32_t seed,
            std::vector<std::string>* problems, std::mutex* mu) {
  auto note = [&](const std::string& what) {
    std::lock_guard<std::mutex> g(*mu);
    problems->push_back(what);
  };
  const size_t len = 64 * KiB;
  for (uint32_t i = 0;; ++i) {
    Status s;
    const uint64_t at = remote + (i % 16) * len;  // remote offsets within this writer's slot
    if (i % 3 == 0) {
      FillPattern(local, len, at, seed + i);
      s = e->Transfer({{OpCode::kWrite, local, seg, at, len}});
      if (s.ok()) s = e->Transfer({{OpCode::kRead, local + len, seg, at, len}});
      if (s.ok() && CheckPattern(local + len, len, at, seed + i) != len) note("read back other bytes than written");
    } else {
      BatchId b;
      s = e->AllocateBatch(4, &b);
      std::vector<TransferRequest> reqs;
      for (size_t r = 0; r < 4; ++r) reqs.push_back({OpCode::kWrite, local + 2 * len + r * len, seg, at, len});
      if (s.ok()) s = e->Submit(b, reqs);
      TransferStatus st;
      if (s.ok() && i % 3 == 1) {
        do s = e->GetBatchStatus(b, &st);
        while (s.ok() && st.state == TaskState::kPending);
      } else if (s.ok()) {
        s = e->WaitBatch(b, -1, &st);
      }
      if (s.ok() && st.state != TaskState::kCompleted) note("batch ended " + st.error.ToString());
      if (s.ok()) s = e->GetTaskStatus(b, 3, &st);
      if (s.ok()) s = e->FreeBatch(b);
    }
    if (s.code() == Status::Code::kClosed) return;
    if (!s.ok()) {
      note(s.ToString());
      return;
    }
  }
}

// Close while four writers Transfer, Submit, poll and
// FreeBatch: no crash, every call either works or says Closed, calls after
// Close say Closed. Many rounds, Close landing at a random moment.
TEST_P(EngineLifecycleTest, CloseWhileWritersRun) {
  ASSERT_NO_FATAL_FAILURE(Start(kWriters * kSlot));
  std::mt19937 rng(12345);
  const int rounds = 12;
  for (int round = 0; round < rounds; ++round) {
    if (round > 0) {
      ASSERT_NO_FATAL_FAILURE(Restart());
    }
    std::vector<std::string> problems;
    std::mutex mu;
    std::vector<std::thread> writers;
    for (size_t t = 0; t < kWriters; ++t)
      writers.emplace_back(Writer, engine_.get(), local(t * kSlot), seg_, target_->addr + t * kSlot,
                           static_cast<uint32_t>(round * 1000 + t * 100), &problems, &mu);
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 20000));
    const auto t0 = std::chrono::steady_clock::now();
    engine_->Close();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5)) << "round " << round;
    for (auto& w : writers) w.join();
    EXPECT_TRUE(problems.empty()) << "round " << round << ": " << problems.front();

    EXPECT_TRUE(engine_->closed());
    EXPECT_TRUE(engine_->rails().empty());
    EXPECT_FALSE(engine_->name().empty());
    Status s = engine_->Transfer({Req(OpCode::kWrite, 0, 0, 4096)});
    EXPECT_EQ(s.code(), Status::Code::kClosed) << s.ToString();
    EXPECT_NE(s.message().find("is closed; create a new Engine"), std::string::npos) << s.ToString();
    BatchId b;
    EXPECT_EQ(engine_->AllocateBatch(1, &b).code(), Status::Code::kClosed);
    SegmentHandle h;
    EXPECT_EQ(engine_->OpenSegment(target_->name, &h).code(), Status::Code::kClosed);
    EXPECT_EQ(engine_->RegisterMemory(local(), 4096).code(), Status::Code::kClosed);
    engine_->Close();  // again: nothing
  }
  // The target served every round and still does.
  ASSERT_NO_FATAL_FAILURE(Restart());
  EXPECT_TRUE(WritePattern(0, 0, MiB, 77).ok());
  EXPECT_EQ(target_->Check(0, MiB, 77), MiB);
}

// An engine closed right after its first post to a target leaves the target
// serving. On shm that post sends the engine's name, which the target reads
// on its own schedule; libfabric's shm before 2.0 crashes the target when
// it reads the name of an endpoint that closed meanwhile. So the engine
// confirms the name was read before closing the endpoint, waiting up to its
// Close's drain time (Rail::ProbeUnreadNames). Here the target is stopped
// while the name is sent and continues 200 ms into the Close: without the
// confirmation the target crashes in the first round.
TEST_P(EngineLifecycleTest, ClosingRightAfterTheFirstPostLeavesTheTargetServing) {
  ASSERT_NO_FATAL_FAILURE(Start());
  for (int round = 0; round < 3; ++round) {
    if (round > 0) {
      ASSERT_NO_FATAL_FAILURE(Restart()) << "round " << round << ": the target stopped serving";
    }
    BatchId b;
    ASSERT_NO_FATAL_FAILURE(SubmitToAStoppedTarget(&b));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // posted: refused, the name sent
    std::thread thaw([this] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      target_->Thaw();
    });
    const auto t0 = std::chrono::steady_clock::now();
    engine_->Close();
    thaw.join();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3)) << "round " << round;
  }
  ASSERT_NO_FATAL_FAILURE(Restart()) << "the target stopped serving";
  ASSERT_NO_FATAL_FAILURE(ExpectTargetServes(78));
}

// The same when the segment closes instead of the engine: the endpoint
// closes once nothing waits for its slot (Rail::ReapRemovedPeers), here
// after the request timed out with the target stopped.
TEST_P(EngineLifecycleTest, ClosingTheSegmentRightAfterTheFirstPostLeavesTheTargetServing) {
  cfg_.settings.transfer_timeout_ms = 100;
  cfg_.settings.rail_stall_ms = 300;  // shorter than the target's stop after the request ended
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitToAStoppedTarget(&b));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // posted: refused, the name sent
  ASSERT_TRUE(engine_->CloseSegment(seg_).ok());
  TransferStatus st;
  ASSERT_TRUE(engine_->WaitBatch(b, 5000, &st).ok());
  EXPECT_EQ(st.state, TaskState::kTimeout) << st.error.ToString();
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(600));  // the slot is quiet: its endpoint may close
  ASSERT_TRUE(target_->Thaw());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  ASSERT_NO_FATAL_FAILURE(ExpectTargetServes(79));
  // The probe waited 600 ms for the stopped target, twice the stall time,
  // and the rail stayed in service: a waiting probe is no stalled link.
  EngineStats stats;
  ASSERT_TRUE(engine_->Stats(&stats).ok());
  for (const RailStats& r : stats.rails) EXPECT_EQ(r.stalls, 0u) << r.label;
}

// A request to a stopped target that fails for refusals (the connect time
// passes) and whose segment is closed at once: the name probe gets a connect
// time of its own, or it would fail at its first refusal and the endpoint
// close before the target, resumed, reads the name.
TEST_P(EngineLifecycleTest, ClosingTheSegmentOfAPeerThatRefusedTooLongLeavesItServing) {
  cfg_.settings.handshake_timeout_ms = 1000;  // the connect time: refusals for this long fail a request
  cfg_.settings.transfer_timeout_ms = 10000;
  ASSERT_NO_FATAL_FAILURE(Start());
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitToAStoppedTarget(&b));
  TransferStatus st;
  ASSERT_TRUE(engine_->WaitBatch(b, 8000, &st).ok());
  if (GetParam().protocol == "shm") {
    EXPECT_EQ(st.state, TaskState::kFailed) << TaskStateName(st.state);
    EXPECT_EQ(st.error.code(), Status::Code::kNetworkError) << st.error.ToString();
  }
  ASSERT_TRUE(engine_->FreeBatch(b).ok());
  ASSERT_TRUE(engine_->CloseSegment(seg_).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_TRUE(target_->Thaw());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_NO_FATAL_FAILURE(ExpectTargetServes(80));
}

// Close wakes a WaitBatch that would otherwise wait for its deadline (the
// target is stopped: nothing completes), and the waiter gets Closed.
TEST_P(EngineLifecycleTest, CloseWakesWaiters) {
  cfg_.settings.transfer_timeout_ms = 60000;
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(WritePattern(0, 0, 64 * KiB, 3).ok());  // connected
  ASSERT_TRUE(target_->Freeze());
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // SIGSTOP lands asynchronously
  BatchId b;
  ASSERT_NO_FATAL_FAILURE(SubmitBatch({Req(OpCode::kWrite, 0, 0, 4 * MiB)}, &b));
  Status waited, transferred;
  std::thread waiter([&] {
    TransferStatus st;
    waited = engine_->WaitBatch(b, -1, &st);
  });
  std::thread transfer([&] { transferred = engine_->Transfer({Req(OpCode::kWrite, 4 * MiB, 4 * MiB, 4 * MiB)}); });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  TransferStatus before;
  ASSERT_TRUE(engine_->GetBatchStatus(b, &before).ok());
  ASSERT_EQ(before.state, TaskState::kPending) << "the stopped target served the write";
  const auto t0 = std::chrono::steady_clock::now();
  engine_->Close();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3));
  waiter.join();
  transfer.join();
  EXPECT_EQ(waited.code(), Status::Code::kClosed) << waited.ToString();
  EXPECT_NE(waited.message().find("closed while waiting"), std::string::npos) << waited.ToString();
  EXPECT_EQ(transferred.code(), Status::Code::kClosed) << transferred.ToString();
  ASSERT_TRUE(target_->Kill());
}

// A forked child's copy of the engine fails every call
// clearly, and the child's exit (normal: exit(), with atexit handlers and
// static destructors, libfabric's included) leaves the parent's descriptor
// in the metadata store and the parent's connections working.
TEST_P(EngineLifecycleTest, ForkedChildLeavesTheParentAlone) {
  std::string why;
  std::unique_ptr<Server> store = StartHttpMetadataServer(&why);  // this test's own: the child's exit must not stop it
  if (!store) GTEST_SKIP() << why;
  cfg_.metadata = store->uri;
  ASSERT_NO_FATAL_FAILURE(Start());
  ASSERT_TRUE(WritePattern(0, 0, MiB, 41).ok());
  ASSERT_EQ(target_->Check(0, MiB, 41), MiB);

  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The child: report what its copy answers, drop it, exit normally.
    close(report[0]);
    std::string out;
    SegmentHandle h;
    BatchId b;
    TransferStatus st;
    for (const Status& s : {engine_->Transfer({Req(OpCode::kWrite, 0, 0, 4096)}), engine_->OpenSegment("x:1", &h),
                            engine_->AllocateBatch(1, &b), engine_->GetBatchStatus(1, &st),
                            engine_->RegisterMemory(local(MiB), 4096), engine_->Warmup(target_->name)})
      out += std::string(Status::CodeName(s.code())) + "|" + s.message() + "\n";
    out += engine_->closed() ? "closed\n" : "open\n";
    engine_->Close();
    engine_.reset();
    if (write(report[1], out.data(), out.size()) != static_cast<ssize_t>(out.size())) _exit(3);
    close(report[1]);
    std::exit(0);
  }
  close(report[1]);
  std::string got;
  char buf[4096];
  for (;;) {
    pollfd p{report[0], POLLIN, 0};
    if (poll(&p, 1, 20000) <= 0) break;
    const ssize_t n = read(report[0], buf, sizeof(buf));
    if (n <= 0) break;
    got.append(buf, static_cast<size_t>(n));
  }
  close(report[0]);
  int wstatus = 0;
  pid_t waited = 0;
  for (int i = 0; i < 200 && waited == 0; ++i) {
    waited = waitpid(pid, &wstatus, WNOHANG);
    if (waited == 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (waited == 0) {
    kill(pid, SIGKILL);
    waitpid(pid, &wstatus, 0);
    ADD_FAILURE() << "the child did not exit within 10 s";
  } else {
    EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << "child wait status " << wstatus;
  }

  // Every call of the child's copy: Closed, naming the parent's process.
  size_t lines = 0;
  for (size_t at = 0, nl; (nl = got.find('\n', at)) != std::string::npos; at = nl + 1, ++lines) {
    const std::string line = got.substr(at, nl - at);
    if (line == "closed" || line == "open") {
      EXPECT_EQ(line, "closed");
      continue;
    }
    EXPECT_EQ(line.substr(0, line.find('|')), "Closed") << line;
    EXPECT_NE(line.find("belongs to process " + std::to_string(parent)), std::string::npos) << line;
    EXPECT_NE(line.find("create a new Engine in the child"), std::string::npos) << line;
  }
  EXPECT_EQ(lines, 7u) << got;

  // The parent: its descriptor is still in the store (a new engine finds it
  // and writes into its memory), and its connection to the target works.
  std::unique_ptr<Engine> other;
  ASSERT_TRUE(Engine::Create(cfg_, &other).ok());
  std::vector<uint8_t> src(MiB);
  FillPattern(src.data(), MiB, 0, 43);
  ASSERT_TRUE(other->RegisterMemory(src.data(), MiB).ok());
  SegmentHandle h;
  Status s = other->OpenSegment(engine_->name(), &h);
  ASSERT_TRUE(s.ok()) << "the parent's segment after the child's exit: " << s.ToString();
  s = other->Transfer({{OpCode::kWrite, src.data(), h, reinterpret_cast<uint64_t>(local(2 * MiB)), MiB}});
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(CheckPattern(local(2 * MiB), MiB, 0, 43), MiB);
  EXPECT_TRUE(other->UnregisterMemory(src.data()).ok());
  other.reset();
  s = WritePattern(MiB, MiB, MiB, 42);
  EXPECT_TRUE(s.ok()) << "the parent's transfers after the child's exit: " << s.ToString();
  EXPECT_EQ(target_->Check(MiB, MiB, 42), MiB);
  BatchId b;
  ASSERT_TRUE(engine_->AllocateBatch(1, &b).ok());
  EXPECT_TRUE(engine_->FreeBatch(b).ok());
  target_.reset();
  engine_.reset();
}

INSTANTIATE_TEST_SUITE_P(Transports, EngineLifecycleTest, ::testing::ValuesIn(ProviderCases()), CaseName);

}  // namespace
}  // namespace kvfabric::test
