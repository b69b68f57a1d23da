// CallGate: the engine's public calls against its shutdown and against fork().
//
// Every public call enters the gate and leaves it when it returns: one atomic
// add and one subtract on the hot path (Submit, status polling), no lock.
// Shut() refuses every later call with Closed; WaitForCallers() then returns
// once the calls already inside have left, so the engine can tear its parts
// down under nobody.
//
// A process forked from the one that built the gate finds it refusing too:
// the child's copy of an engine belongs to the parent (its handshake server,
// its descriptor in the metadata store, its libfabric endpoints and shared
// memory, its threads, which the child does not have), so the child must use
// none of it and tear none of it down. A pthread_atfork handler counts forks;
// the gate remembers the count at its construction.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <string>

#include "kvfabric/status.h"

namespace kvfabric::engine {

class CallGate {
 public:
  CallGate();
  CallGate(const CallGate&) = delete;
  CallGate& operator=(const CallGate&) = delete;

  // A call inside the gate; it leaves when the pass goes. A refused pass
  // (`!ok()`) holds nothing: return its refusal().
  class Pass {
   public:
    Pass(Pass&& other) noexcept : gate_(other.gate_), admitted_(other.admitted_) { other.admitted_ = false; }
    Pass(const Pass&) = delete;
    Pass& operator=(const Pass&) = delete;
    ~Pass() {
      if (admitted_) gate_->Leave();
    }
    bool ok() const { return admitted_; }
    // Closed: the engine was closed, or this process is a fork of its owner's.
    Status refusal() const { return gate_->Refusal(); }

   private:
    friend class CallGate;
    Pass(CallGate* gate, bool admitted) : gate_(gate), admitted_(admitted) {}
    CallGate* gate_;
    bool admitted_;
  };

  Pass Enter() {
    const uint32_t before = state_.fetch_add(kCaller, std::memory_order_acq_rel);
    if ((before & kShut) != 0 || forks_.load(std::memory_order_relaxed) != forks_at_birth_) [[unlikely]] {
      Leave();
      return Pass(this, false);
    }
    return Pass(this, true);
  }

  // Names the engine in refusals; before the gate is shared between threads.
  void set_owner(std::string owner) { owner_ = std::move(owner); }
  // Refuses every later call. True for the first caller, who then tears
  // the engine down (after WaitForCallers, in the owning process).
  bool Shut() { return (state_.fetch_or(kShut, std::memory_order_acq_rel) & kShut) == 0; }
  // After Shut: returns once no call is inside. Never in a forked child: the
  // threads that were inside at the fork exist only in the parent.
  void WaitForCallers();
  bool shut() const { return (state_.load(std::memory_order_acquire) & kShut) != 0; }
  // Whether this process is a fork of the one that built the gate.
  bool forked() const { return forks_.load(std::memory_order_relaxed) != forks_at_birth_; }
  pid_t owner_pid() const { return owner_pid_; }

 private:
  static constexpr uint32_t kShut = 1;    // bit 0
  static constexpr uint32_t kCaller = 2;  // the rest: calls inside, times 2
  // Forks this process has made children by (in a child: its parent's count
  // plus one). Bumped by a pthread_atfork child handler.
  static std::atomic<uint64_t> forks_;
  static void OnForkChild();
  // forks_ now, with the handler registered (once per process).
  static uint64_t ForksSoFar();

  void Leave() {
    // The last caller out of a shut gate wakes the closer. The gate outlives
    // this notify: only Close shuts it, and the engine is freed after that
    // returned and no call is under way (see Engine::Close).
    if (state_.fetch_sub(kCaller, std::memory_order_acq_rel) == (kShut | kCaller)) state_.notify_all();
  }
  Status Refusal() const;

  std::atomic<uint32_t> state_{0};
  const uint64_t forks_at_birth_;
  const pid_t owner_pid_;
  std::string owner_ = "engine";
};

}  // namespace kvfabric::engine
