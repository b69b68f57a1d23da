// NoticeMailer: the notices that travel as messages (KVF_NOTICE_PATH).
// A WRITE whose notice cannot ride on its pieces as remote CQ data (the
// rail has none, the bytes go through GPU staging, or the setting asks for
// messages) has its pieces posted delivery-complete; once the last one is
// back, its task hands itself here instead of completing, and the
// mailer's thread sends the notice to the target's segment server
// (metadata::kNotice), which puts it on its NoticeBoard: the notices
// queued meanwhile for the same target go in one message. The task ends
// COMPLETED when the target took the notice, FAILED with the reason when
// it did not (its bytes landed; the notice did not).
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "metadata/handshake.h"

namespace kvfabric::engine {

class Task;

class NoticeMailer {
 public:
  // Sends with `options` (the handshake's deadline, frame limit and token).
  explicit NoticeMailer(metadata::CallOptions options);
  // Waits for the notice being sent; those still queued end their tasks
  // FAILED (Closed).
  ~NoticeMailer();
  NoticeMailer(const NoticeMailer&) = delete;
  NoticeMailer& operator=(const NoticeMailer&) = delete;

  // Queues `task`'s notice (Task::MailNotice set it); the task ends through
  // Task::NoticeSent, on the mailer's thread, once it was sent or refused.
  void Send(Task* task);
  // Notices sent and taken by their targets so far, and those that failed.
  uint64_t sent() const;
  uint64_t failed() const;

 private:
  void Run();
  // Sends the notices of `group` (one target, one epoch) in one message and
  // ends each task with the answer.
  void SendGroup(const std::vector<Task*>& group);

  const metadata::CallOptions options_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task*> queue_;
  bool stop_ = false;
  uint64_t sent_ = 0;
  uint64_t failed_ = 0;
  std::thread thread_;
};

}  // namespace kvfabric::engine
