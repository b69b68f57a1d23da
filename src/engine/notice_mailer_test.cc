// The notices sent as messages: a task that mails one ends only once its
// target answered, keeps its batch until then, and ends FAILED with the
// reason when the target cannot be reached or refuses it.
#include "engine/notice_mailer.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "engine/batch.h"
#include "engine/notice_board.h"
#include "metadata/handshake.h"

namespace kvfabric::engine {
namespace {

// A target's handshake server that takes every kNotice (or refuses them
// all) after `delay_ms`, recording what came.
class NoticeTarget {
 public:
  explicit NoticeTarget(bool refuse = false, int delay_ms = 0) {
    metadata::HandshakeServer::Options o;
    o.timeout_ms = 2000;
    EXPECT_TRUE(metadata::HandshakeServer::Start(
                    o,
                    [this, refuse, delay_ms](uint16_t type, const std::string& payload, std::string*) {
                      if (type != metadata::kNotice) return Status::ProtocolError("not a notice");
                      std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
                      if (refuse) return Status::NotFound("a restarted target");
                      std::lock_guard<std::mutex> g(mu_);
                      got_.push_back(payload);
                      return Status::OK();
                    },
                    &server_)
                    .ok());
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(server_->port()); }
  std::vector<std::string> got() {
    std::lock_guard<std::mutex> g(mu_);
    return got_;
  }

 private:
  std::unique_ptr<metadata::HandshakeServer> server_;
  std::mutex mu_;
  std::vector<std::string> got_;
};

// Starts the one task of `b` with one slice to `peer`, mailing `notice`.
Task& StartMailing(Batch& b, NoticeMailer* mailer, const std::string& peer, uint16_t notice, int deadline_ms) {
  size_t first;
  EXPECT_TRUE(b.Reserve(1, &first));
  Task& t = b.task(first);
  b.outstanding_slices() += 1;
  t.Start(&b, 1, Clock::now() + std::chrono::milliseconds(deadline_ms), deadline_ms, "WRITE of 8 bytes",
          std::make_shared<Peer>(7, peer));
  t.MailNotice(mailer, notice, 0x1122334455667788ull);
  return t;
}

// The task's state once it left PENDING, or PENDING after 5 s.
TransferStatus AwaitEnd(Task& t) {
  const auto until = Clock::now() + std::chrono::seconds(5);
  TransferStatus s = t.Snapshot();
  while (s.state == TaskState::kPending && Clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    s = t.Snapshot();
  }
  return s;
}

metadata::CallOptions Quick() { return {2000, 1 << 20, ""}; }

TEST(NoticeMailerTest, ATaskCompletesOnceItsTargetTookTheNotice) {
  NoticeTarget target;
  NoticeMailer mailer(Quick());
  Batch b(1, 1);
  Task& t = StartMailing(b, &mailer, target.address(), 42, 10000);
  EXPECT_TRUE(target.got().empty()) << "nothing is sent before the WRITE is back";
  t.OnSliceDone(fabric::Slice(), 8, Status::OK());
  const TransferStatus s = AwaitEnd(t);
  ASSERT_EQ(s.state, TaskState::kCompleted) << s.error.ToString();
  EXPECT_EQ(s.transferred_bytes, 8u);
  ASSERT_EQ(target.got().size(), 1u);
  uint64_t epoch = 0;
  std::vector<uint16_t> notices;
  ASSERT_TRUE(DecodeNoticeMessage(target.got()[0], &epoch, &notices));
  EXPECT_EQ(notices, std::vector<uint16_t>{42});
  EXPECT_EQ(epoch, 0x1122334455667788ull) << "the epoch of the segment the WRITE went to";
  for (int i = 0; i < 500 && b.outstanding_slices().load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(b.outstanding_slices().load(), 0) << "the batch is let go once the notice is answered";
  EXPECT_EQ(mailer.sent(), 1u);
  EXPECT_EQ(mailer.failed(), 0u);
}

TEST(NoticeMailerTest, NoticesQueuedMeanwhileForOneTargetGoInOneMessage) {
  NoticeTarget slow(/*refuse=*/false, /*delay_ms=*/200), target;
  NoticeMailer mailer(Quick());
  Batch hold(1, 1);
  StartMailing(hold, &mailer, slow.address(), 1, 10000).OnSliceDone(fabric::Slice(), 8, Status::OK());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // being sent
  Batch b(2, 3);
  std::vector<Task*> tasks;
  for (uint16_t n = 11; n <= 13; ++n) tasks.push_back(&StartMailing(b, &mailer, target.address(), n, 10000));
  for (Task* t : tasks) t->OnSliceDone(fabric::Slice(), 8, Status::OK());
  for (Task* t : tasks) EXPECT_EQ(AwaitEnd(*t).state, TaskState::kCompleted);
  ASSERT_EQ(target.got().size(), 1u) << "one message";
  uint64_t epoch = 0;
  std::vector<uint16_t> notices;
  ASSERT_TRUE(DecodeNoticeMessage(target.got()[0], &epoch, &notices));
  EXPECT_EQ(notices, (std::vector<uint16_t>{11, 12, 13}));
  EXPECT_EQ(mailer.sent(), 4u);
}

TEST(NoticeMailerTest, ANoticeTheTargetRefusesOrNeverGetsFailsItsTask) {
  NoticeTarget refusing(/*refuse=*/true);
  NoticeMailer mailer(Quick());
  Batch b(1, 1);
  Task& t = StartMailing(b, &mailer, refusing.address(), 3, 10000);
  t.OnSliceDone(fabric::Slice(), 8, Status::OK());
  TransferStatus s = AwaitEnd(t);
  ASSERT_EQ(s.state, TaskState::kFailed);
  EXPECT_EQ(s.error.code(), Status::Code::kNotFound) << s.error.ToString();
  EXPECT_NE(s.error.message().find("landed, but its notice 3 did not reach the target"), std::string::npos)
      << s.error.ToString();

  // Nobody listens there any more.
  std::string gone;
  {
    NoticeTarget short_lived;
    gone = short_lived.address();
  }
  Batch b2(2, 1);
  Task& t2 = StartMailing(b2, &mailer, gone, 4, 10000);
  t2.OnSliceDone(fabric::Slice(), 8, Status::OK());
  s = AwaitEnd(t2);
  EXPECT_EQ(s.state, TaskState::kFailed) << s.error.ToString();
  EXPECT_EQ(mailer.failed(), 2u);
  EXPECT_EQ(mailer.sent(), 0u);
}

TEST(NoticeMailerTest, AFailedWriteSendsNoNotice) {
  NoticeTarget target;
  NoticeMailer mailer(Quick());
  Batch b(1, 1);
  Task& t = StartMailing(b, &mailer, target.address(), 5, 10000);
  t.OnSliceDone(fabric::Slice(), 0, Status::NetworkError("connection reset"));
  EXPECT_EQ(AwaitEnd(t).state, TaskState::kFailed);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_TRUE(target.got().empty());
  EXPECT_EQ(mailer.sent() + mailer.failed(), 0u);
}

TEST(NoticeMailerTest, TasksStillQueuedWhenTheMailerStopsEndClosed) {
  // The first notice holds the mailer's thread (its target answers after
  // 300 ms); the second, to another target, waits in the queue.
  NoticeTarget slow(/*refuse=*/false, /*delay_ms=*/300), other;
  Batch first(1, 1), second(2, 1);
  Task* a = nullptr;
  Task* b = nullptr;
  {
    NoticeMailer mailer(Quick());
    a = &StartMailing(first, &mailer, slow.address(), 8, 10000);
    b = &StartMailing(second, &mailer, other.address(), 9, 10000);
    a->OnSliceDone(fabric::Slice(), 8, Status::OK());
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first is being sent
    b->OnSliceDone(fabric::Slice(), 8, Status::OK());
  }
  EXPECT_EQ(a->Snapshot().state, TaskState::kCompleted) << "the notice under way was sent";
  const TransferStatus s = b->Snapshot();
  EXPECT_EQ(s.state, TaskState::kFailed);
  EXPECT_EQ(s.error.code(), Status::Code::kClosed) << s.error.ToString();
  EXPECT_EQ(slow.got().size(), 1u);
  EXPECT_TRUE(other.got().empty());
  EXPECT_EQ(second.outstanding_slices().load(), 0);
}

TEST(NoticeMailerTest, ATaskPastItsDeadlineSendsNoNotice) {
  NoticeTarget slow(/*refuse=*/false, /*delay_ms=*/300), other;
  NoticeMailer mailer(Quick());
  Batch first(1, 1), second(2, 1);
  Task& a = StartMailing(first, &mailer, slow.address(), 10, 10000);
  Task& b = StartMailing(second, &mailer, other.address(), 11, 100);
  a.OnSliceDone(fabric::Slice(), 8, Status::OK());
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the first is being sent
  b.OnSliceDone(fabric::Slice(), 8, Status::OK());  // waits behind the first past its deadline
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(b.Snapshot().state, TaskState::kTimeout);
  EXPECT_EQ(AwaitEnd(a).state, TaskState::kCompleted);
  for (int i = 0; i < 500 && second.outstanding_slices().load() != 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(second.outstanding_slices().load(), 0);
  EXPECT_TRUE(other.got().empty()) << "the timed-out task's notice was not sent";
  EXPECT_EQ(mailer.sent(), 1u);
  EXPECT_EQ(mailer.failed(), 0u);
}

}  // namespace
}  // namespace kvfabric::engine
