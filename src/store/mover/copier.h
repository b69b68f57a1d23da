// Copier: a thread of its own that makes a process's copies to and from the
// pools it maps (PoolMaps, through BatchRunner), piece after piece in the
// order given, while the caller goes on. A GET then checksums each page as
// soon as its copy is done, beside the copies of the next pages: two cores
// at work instead of one, as when a NIC moves the bytes.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <deque>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "net/socket.h"

namespace kvfabric::store {

class Copier {
 public:
  struct Piece {
    void* to;
    const void* from;
    size_t length;
  };

  // Pieces being copied, in order.
  class Job {
   public:
    size_t size() const { return pieces_.size(); }
    // How many pieces are copied: the first done() ones (their bytes are
    // visible to the caller once it has read this).
    size_t done() const { return done_.load(std::memory_order_acquire); }
    // Waits until every piece is copied, or `until`: whether they are.
    bool WaitUntil(net::Deadline until) const;
    void Wait() const;
    // Lets the Copier copy the pieces from the job's gate on (see Start).
    void Open() const { open_.store(true, std::memory_order_release); }

   private:
    friend class Copier;
    std::vector<Piece> pieces_;
    std::vector<std::shared_ptr<const void>> keep_;  // what must outlive the copies (the mappings)
    std::atomic<size_t> done_{0};
    size_t gate_ = SIZE_MAX;
    mutable std::atomic<bool> open_{false};
  };

  Copier() = default;
  ~Copier();  // copies what is queued, then stops
  Copier(const Copier&) = delete;
  Copier& operator=(const Copier&) = delete;

  // Queues `pieces` (their memory stays valid, and `keep` held, until the
  // job is done: the caller waits for it before it lets go of either).
  // With a `gate` below pieces.size(), the pieces from it on are copied
  // only once the caller has called Job::Open (it copies others itself
  // meanwhile, which must be read or written before those); it must call
  // it, soon: the Copier waits, spinning.
  std::shared_ptr<const Job> Start(std::vector<Piece> pieces, std::vector<std::shared_ptr<const void>> keep,
                                   size_t gate = SIZE_MAX);
  // Whether a job is queued or being copied: another one would wait for it.
  bool Busy() const { return busy_.load(std::memory_order_acquire) != 0; }

 private:
  void Loop();

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::atomic<size_t> busy_{0};  // jobs queued or being copied
  std::thread thread_;  // started with the first job
};

}  // namespace kvfabric::store
