#include "engine/notice_mailer.h"

#include <string>
#include <utility>
#include <vector>

#include "common/text.h"
#include "engine/batch.h"
#include "engine/notice_board.h"

namespace kvfabric::engine {

NoticeMailer::NoticeMailer(metadata::CallOptions options) : options_(std::move(options)) {
  thread_ = std::thread([this] { Run(); });
}

NoticeMailer::~NoticeMailer() {
  std::deque<Task*> left;
  {
    std::lock_guard<std::mutex> g(mu_);
    stop_ = true;
    left.swap(queue_);
  }
  cv_.notify_all();
  thread_.join();
  for (Task* t : left) t->NoticeSent(Status::Closed("the engine closed before the notice was sent"));
}

void NoticeMailer::Send(Task* task) {
  {
    std::lock_guard<std::mutex> g(mu_);
    if (!stop_) {
      queue_.push_back(task);
      cv_.notify_one();
      return;
    }
  }
  task->NoticeSent(Status::Closed("the engine closed before the notice was sent"));
}

uint64_t NoticeMailer::sent() const {
  std::lock_guard<std::mutex> g(mu_);
  return sent_;
}

uint64_t NoticeMailer::failed() const {
  std::lock_guard<std::mutex> g(mu_);
  return failed_;
}

void NoticeMailer::Run() {
  for (;;) {
    std::deque<Task*> tasks;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [this] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      tasks.swap(queue_);
    }
    // A task its deadline or its caller ended meanwhile wants no notice:
    // its bytes landed, but it said TIMEOUT.
    std::vector<Task*> group;
    while (!tasks.empty()) {
      group.clear();
      // Copied: a task that ended already may be let go (with its batch) below.
      const std::string peer = tasks.front()->peer()->name();
      const uint64_t epoch = tasks.front()->mailed_epoch();
      for (auto it = tasks.begin(); it != tasks.end() && group.size() < kMaxNoticesPerMessage;) {
        if ((*it)->pending() && (*it)->peer()->name() == peer && (*it)->mailed_epoch() == epoch) {
          group.push_back(*it);
          it = tasks.erase(it);
        } else if (!(*it)->pending()) {
          (*it)->NoticeSent(Status::OK());  // ended already: only lets its batch go
          it = tasks.erase(it);
        } else {
          ++it;
        }
      }
      if (!group.empty()) SendGroup(group);
    }
  }
}

void NoticeMailer::SendGroup(const std::vector<Task*>& group) {
  std::vector<uint16_t> notices;
  for (Task* t : group) notices.push_back(t->mailed_notice());
  std::string reply;
  const Status s = metadata::HandshakeCall(group.front()->peer()->name(), metadata::kNotice,
                                           EncodeNoticeMessage(group.front()->mailed_epoch(), notices), options_,
                                           &reply);
  {
    std::lock_guard<std::mutex> g(mu_);
    (s.ok() ? sent_ : failed_) += group.size();
  }
  for (Task* t : group) t->NoticeSent(s);
}

}  // namespace kvfabric::engine
