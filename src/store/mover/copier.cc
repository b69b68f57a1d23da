#include "store/mover/copier.h"

#include <atomic>
#include <chrono>
#include <cstring>
#include <utility>

#include "common/cpu_relax.h"

namespace kvfabric::store {

bool Copier::Job::WaitUntil(net::Deadline until) const {
  // The copies of a batch take a few hundred microseconds: polled, yielding,
  // then in short sleeps.
  for (int spins = 0; done() < size(); ++spins) {
    if (std::chrono::steady_clock::now() >= until) return false;
    if (spins < 64) std::this_thread::yield();
    else std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  return true;
}

void Copier::Job::Wait() const {
  while (!WaitUntil(std::chrono::steady_clock::now() + std::chrono::seconds(1))) {
  }
}

Copier::~Copier() {
  {
    std::lock_guard<std::mutex> g(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::shared_ptr<const Copier::Job> Copier::Start(std::vector<Piece> pieces,
                                                 std::vector<std::shared_ptr<const void>> keep, size_t gate) {
  auto job = std::make_shared<Job>();
  job->pieces_ = std::move(pieces);
  job->keep_ = std::move(keep);
  job->gate_ = gate;
  {
    std::lock_guard<std::mutex> g(mu_);
    queue_.push_back(job);
    busy_.fetch_add(1, std::memory_order_release);
    if (!thread_.joinable()) thread_ = std::thread([this] { Loop(); });
  }
  cv_.notify_one();
  return job;
}

void Copier::Loop() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> g(mu_);
      cv_.wait(g, [&] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and every job copied
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    for (size_t i = 0; i < job->pieces_.size(); ++i) {
      if (i == job->gate_)
        while (!job->open_.load(std::memory_order_acquire)) CpuRelax();
      const Piece& p = job->pieces_[i];
      std::memcpy(p.to, p.from, p.length);
      std::atomic_thread_fence(std::memory_order_acquire);  // this piece read before the next one
      job->done_.store(i + 1, std::memory_order_release);
    }
    job->keep_.clear();
    busy_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace kvfabric::store
