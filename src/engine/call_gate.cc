#include "engine/call_gate.h"

#include <pthread.h>
#include <unistd.h>

#include <mutex>

#include "common/text.h"

namespace kvfabric::engine {

std::atomic<uint64_t> CallGate::forks_{0};

// Runs in the child of every fork() (glibc's, Python's os.fork, ...) before
// fork returns there, when only the forking thread exists.
void CallGate::OnForkChild() { forks_.fetch_add(1, std::memory_order_relaxed); }

uint64_t CallGate::ForksSoFar() {
  static std::once_flag registered;
  std::call_once(registered, [] { pthread_atfork(nullptr, nullptr, &CallGate::OnForkChild); });
  return forks_.load(std::memory_order_relaxed);
}

CallGate::CallGate() : forks_at_birth_(ForksSoFar()), owner_pid_(getpid()) {}

void CallGate::WaitForCallers() {
  for (uint32_t v = state_.load(std::memory_order_acquire); v != kShut; v = state_.load(std::memory_order_acquire))
    state_.wait(v, std::memory_order_acquire);
}

Status CallGate::Refusal() const {
  if (forked())
    return Status::Closed(text::Format(
        "{} belongs to process {}, and this process ({}) is a fork of it: a child cannot use the engine it "
        "inherits (its connections, threads and published segment are the parent's); create a new Engine in "
        "the child",
        owner_, owner_pid_, getpid()));
  return Status::Closed(text::Format("{} is closed; create a new Engine", owner_));
}

}  // namespace kvfabric::engine
