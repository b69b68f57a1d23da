// Progress: the CQ poller threads of an engine. Every engine runs them for all
// its rails, initiator or not: with manual-progress providers (tcp;ofi_rxm,
// sockets, shm) a target that never reads its CQ never accepts connections
// and stalls one-sided operations.
#pragma once

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "fabric/rail.h"

namespace kvfabric::fabric {

class Progress {
 public:
  // `threads` pollers (0 = one per rail, never more than rails) share `rails`
  // round-robin. A poller spins while its rails are busy and for `spin_us`
  // after; then it blocks on the CQ wait fds (or sleeps, for providers without
  // one) for at most `idle_us`, woken early by new work.
  Progress(const std::vector<Rail*>& rails, int threads, int64_t spin_us, int64_t idle_us);
  ~Progress();  // stops and joins the threads
  Progress(const Progress&) = delete;
  Progress& operator=(const Progress&) = delete;

  size_t thread_count() const { return workers_.size(); }

 private:
  struct Worker;
  void Run(Worker* w);

  std::vector<std::unique_ptr<Worker>> workers_;
  std::atomic<bool> stop_{false};
  int64_t spin_us_;
  int64_t idle_us_;
};

}  // namespace kvfabric::fabric
