#include "fabric/progress.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>

#include "common/log.h"

namespace kvfabric::fabric {

struct Progress::Worker {
  std::vector<Rail*> rails;
  bool all_waitable = true;
  int epfd = -1;
  int wakefd = -1;
  std::atomic<bool> sleeping{false};
  std::thread thread;

  ~Worker() {
    if (epfd >= 0) close(epfd);
    if (wakefd >= 0) close(wakefd);
  }
  void Wake() {
    if (sleeping.load(std::memory_order_acquire)) {
      uint64_t one = 1;
      ssize_t r = write(wakefd, &one, sizeof(one));
      (void)r;
    }
  }
};

Progress::Progress(const std::vector<Rail*>& rails, int threads, int64_t spin_us, int64_t idle_us)
    : spin_us_(spin_us), idle_us_(idle_us < 1 ? 1 : idle_us) {
  size_t n = threads <= 0 ? rails.size() : static_cast<size_t>(threads);
  if (n > rails.size()) n = rails.size();
  for (size_t i = 0; i < n; ++i) {
    auto w = std::make_unique<Worker>();
    w->epfd = epoll_create1(EPOLL_CLOEXEC);
    w->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = w->wakefd;
    epoll_ctl(w->epfd, EPOLL_CTL_ADD, w->wakefd, &ev);
    workers_.push_back(std::move(w));
  }
  for (size_t i = 0; i < rails.size(); ++i) {
    Worker* w = workers_[i % n].get();
    Rail* r = rails[i];
    w->rails.push_back(r);
    if (r->wait_fd() >= 0) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.fd = r->wait_fd();
      epoll_ctl(w->epfd, EPOLL_CTL_ADD, r->wait_fd(), &ev);
    } else {
      w->all_waitable = false;
    }
    r->set_waker([w] { w->Wake(); });
  }
  for (auto& w : workers_) {
    Worker* raw = w.get();
    w->thread = std::thread([this, raw] { Run(raw); });
  }
}

Progress::~Progress() {
  stop_.store(true);
  for (auto& w : workers_) {
    uint64_t one = 1;
    ssize_t r = write(w->wakefd, &one, sizeof(one));
    (void)r;
    if (w->thread.joinable()) w->thread.join();
  }
  for (auto& w : workers_)
    for (Rail* r : w->rails) r->set_waker(nullptr);
}

void Progress::Run(Worker* w) {
  using Clock = std::chrono::steady_clock;
  auto last_work = Clock::now();
  const auto spin = std::chrono::microseconds(spin_us_);
  while (!stop_.load(std::memory_order_relaxed)) {
    size_t done = 0;
    bool busy = false;
    const auto polled = Clock::now();
    for (Rail* r : w->rails) {
      done += r->Poll();
      busy = busy || r->Busy();
    }
    auto now = Clock::now();
    // A passive target sees no completions for the RMA it serves, yet with
    // shm its progress call does the copies: a poll that took real time did
    // work, so keep polling instead of sleeping (measured: the sleeping
    // target held shm writes to ~70% of the bare fabric).
    if (done > 0 || now - polled > std::chrono::microseconds(3)) last_work = now;
    if (done > 0 || now - last_work < spin) continue;
    if (busy && !w->all_waitable) {
      // shm has no wait object: keep polling, but let the other process run.
      sched_yield();
      continue;
    }
    // Block until a CQ fd or a wake-up fires. Busy rails wait at most 1 ms so
    // progress that raises no fd event (sends draining) still advances.
    // Idle with wait fds, incoming traffic wakes us: block long. Without them
    // (shm) sleep at most idle_us so a passive target still polls.
    int timeout_ms = w->all_waitable ? 100 : static_cast<int>((idle_us_ + 999) / 1000);
    if (busy) timeout_ms = 1;
    bool can_block = true;
    if (w->all_waitable)
      for (Rail* r : w->rails) can_block = can_block && r->TryWait();
    if (!can_block) continue;
    w->sleeping.store(true, std::memory_order_release);
    // Re-check after announcing sleep: work queued before the flag was seen.
    bool queued = false;
    for (Rail* r : w->rails) queued = queued || r->Busy();
    if (!queued || busy) {
      // Without CQ fds (shm) only the wake fd is in the set: this is a bounded
      // sleep, so a passive target still polls every idle_us.
      epoll_event evs[8];
      epoll_wait(w->epfd, evs, 8, timeout_ms);
    }
    w->sleeping.store(false, std::memory_order_release);
    uint64_t drain;
    while (read(w->wakefd, &drain, sizeof(drain)) > 0) {
    }
    last_work = Clock::now() - spin;  // poll once, then block again if still idle
  }
}

}  // namespace kvfabric::fabric
