// The proxy ring's host side (include/kvfabric/proxy_ring.h says the
// layout and the protocol): a producer's Publish and the proxy's Take, with
// std::atomic_ref on the shared words. Pure over the ring's memory: no
// thread, clock or engine inside, so the protocol is tested with threads
// alone (ring_test.cc).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "kvfabric/proxy_ring.h"

namespace kvfabric::proxy {

// A ring's memory, freed with it.
struct RingDeleter {
  void operator()(kvf_proxy_ring* r) const;
};
using RingPtr = std::unique_ptr<kvf_proxy_ring, RingDeleter>;

// A ring of `capacity` slots for `producers` producer ids, every slot free
// for its first ticket and every counter 0; page-aligned, so it can be
// mapped for a device.
// REQUIRES: capacity a power of two, producers >= 1.
RingPtr NewRing(uint64_t capacity, uint64_t producers);

inline uint64_t LoadAcquire(uint64_t& word) {
  return std::atomic_ref<uint64_t>(word).load(std::memory_order_acquire);
}
inline void StoreRelease(uint64_t& word, uint64_t v) {
  std::atomic_ref<uint64_t>(word).store(v, std::memory_order_release);
}

// A producer's ticket: the slot it will fill.
inline uint64_t TakeTicket(kvf_proxy_ring* r) {
  return std::atomic_ref<uint64_t>(r->head).fetch_add(1, std::memory_order_relaxed);
}

// Whether the slot of `ticket` is free for it (the proxy took the command
// of the ticket one round before).
inline bool SlotFree(kvf_proxy_ring* r, uint64_t ticket) {
  return LoadAcquire(kvf_proxy_slots(r)[ticket & (r->capacity - 1)].seq) == ticket;
}

// Writes `cmd` (its seq ignored) into the slot of `ticket` and publishes it,
// counting it as issued by cmd.producer.
// REQUIRES: SlotFree(r, ticket); cmd.producer < r->producers and used by
// this thread alone.
inline void Publish(kvf_proxy_ring* r, uint64_t ticket, const kvf_proxy_slot& cmd) {
  kvf_proxy_slot& s = kvf_proxy_slots(r)[ticket & (r->capacity - 1)];
  s.local = cmd.local;
  s.remote = cmd.remote;
  s.length = cmd.length;
  s.target = cmd.target;
  s.producer = cmd.producer;
  uint64_t& issued = kvf_proxy_issued(r)[cmd.producer];
  StoreRelease(issued, issued + 1);
  StoreRelease(s.seq, ticket + 1);
}

// The proxy's side: copies the command at `tail` into `*out` and frees its
// slot for the next round; false when it is not published yet.
// REQUIRES: the calling thread is the ring's only consumer.
inline bool Take(kvf_proxy_ring* r, kvf_proxy_slot* out) {
  const uint64_t t = r->tail;
  kvf_proxy_slot& s = kvf_proxy_slots(r)[t & (r->capacity - 1)];
  if (LoadAcquire(s.seq) != t + 1) return false;
  *out = s;
  StoreRelease(s.seq, t + r->capacity);
  r->tail = t + 1;
  return true;
}

// The proxy counts the end of one of `producer`'s commands.
inline void CountEnded(kvf_proxy_ring* r, uint64_t producer, bool failed) {
  if (failed) std::atomic_ref<uint64_t>(kvf_proxy_failed(r)[producer]).fetch_add(1, std::memory_order_release);
  std::atomic_ref<uint64_t>(kvf_proxy_ended(r)[producer]).fetch_add(1, std::memory_order_release);
}

}  // namespace kvfabric::proxy
