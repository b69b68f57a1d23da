// PutQueue: the work a node holds for its put threads (PUTs by READ, and
// commits that need the node's checksums), bounded so that no client can
// make a node hold more than it chose, and ordered so that writers whose
// segments are open never wait behind handshakes with writers that are not:
//
//  - Push admits a job of `bytes` (its request's size on the wire) while the
//    queued jobs' bytes stay within max_bytes, or when the queue is empty
//    (one request of any size that the control channel let through);
//    otherwise the caller refuses it at once. Jobs of 0 bytes (commits of
//    slots already reserved) are always admitted.
//  - Pop hands out jobs ready to run (their writer known) first, in order;
//    a job whose writer's segment must be opened first (a handshake that may
//    take the whole handshake timeout) only while fewer than max_opening
//    threads are opening one.
//
// Stop ends the admissions; the put threads then finish what is queued.
// Thread-safe; Pop blocks.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <mutex>
#include <utility>

namespace kvfabric::store {

template <typename Job>
class PutQueue {
 public:
  // REQUIRES: max_opening >= 1.
  PutQueue(size_t max_bytes, size_t max_opening) : max_bytes_(max_bytes), max_opening_(max_opening) {}

  // Whether a job of `bytes` would be admitted now (above).
  bool Admits(size_t bytes) const {
    std::lock_guard<std::mutex> g(mu_);
    return AdmitsLocked(bytes);
  }
  // Queues `job` (true), or leaves it untouched to the caller (false): the
  // queue is stopped, or holds too many bytes for it (above).
  bool Push(Job&& job, size_t bytes, bool needs_open) {
    {
      std::lock_guard<std::mutex> g(mu_);
      if (stopped_ || !AdmitsLocked(bytes)) return false;
      bytes_ += bytes;
      (needs_open ? opens_ : ready_).push_back({std::move(job), bytes});
    }
    cv_.notify_one();
    return true;
  }

  // The next job for a put thread (true), waiting for one; false once the
  // queue is stopped and empty (a stopped queue hands out its jobs needing
  // an open whatever the threads opening). *opening: the job needs its
  // writer opened; the thread calls DoneOpening once it has tried.
  bool Pop(Job* out, bool* opening) {
    std::unique_lock<std::mutex> g(mu_);
    cv_.wait(g, [&] {
      return stopped_ || !ready_.empty() || (!opens_.empty() && opening_ < max_opening_);
    });
    if (ready_.empty() && opens_.empty()) return false;  // stopped
    *opening = ready_.empty();
    std::deque<Held>& from = *opening ? opens_ : ready_;
    bytes_ -= from.front().bytes;
    *out = std::move(from.front().job);
    from.pop_front();
    if (*opening) ++opening_;
    return true;
  }
  void DoneOpening() {
    {
      std::lock_guard<std::mutex> g(mu_);
      --opening_;
    }
    cv_.notify_all();
  }

  // Push refuses from now on; Pop returns false once the queue is empty.
  void Stop() {
    {
      std::lock_guard<std::mutex> g(mu_);
      stopped_ = true;
    }
    cv_.notify_all();
  }

  size_t bytes() const {
    std::lock_guard<std::mutex> g(mu_);
    return bytes_;
  }

 private:
  bool AdmitsLocked(size_t bytes) const {
    return bytes == 0 || (ready_.empty() && opens_.empty()) || bytes_ + bytes <= max_bytes_;
  }
  struct Held {
    Job job;
    size_t bytes;
  };
  const size_t max_bytes_, max_opening_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Held> ready_, opens_;
  size_t bytes_ = 0;
  size_t opening_ = 0;
  bool stopped_ = false;
};

}  // namespace kvfabric::store
