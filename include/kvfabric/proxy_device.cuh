// kvfabric/proxy_device.cuh: the proxy queue's producer side for CUDA
// kernels (kvfabric/proxy.h, docs/design/proxy.md). A kernel gets the
// ring's device address (the host maps ProxyQueue::ring() for the device)
// and, from one GPU thread per producer id at a time:
//
//   kvf_put_nbi(ring, id, local, segment, remote, length);  // returns once the command is in the ring
//   kvf_quiet(ring, id);                                    // every WRITE `id` put has ended
//
// `local` is the host-visible address of registered memory as the engine
// knows it (a GPU buffer registered as cuda:N, or host memory); `segment`
// an Engine SegmentHandle the host opened. A WRITE's failure is reported
// to the host (ProxyQueue::Quiet of the same id, or the ring's failed[id]
// count, which kvf_failed reads).
//
// Compiled on every build that has nvcc (make cuda-check); not yet run on
// a GPU: docs/design/proxy.md says what is tested and what is not.
#pragma once

#include <stdint.h>

#include "kvfabric/proxy_ring.h"

__device__ inline uint64_t kvf_proxy_load(const uint64_t* word) {
  return *reinterpret_cast<const volatile uint64_t*>(word);
}

// Puts one WRITE in the ring for producer `id`, waiting while its slot is
// still taken (the ring is full until the proxy takes a command).
__device__ inline void kvf_put_nbi(kvf_proxy_ring* ring, uint64_t id, uint64_t local, int64_t segment,
                                   uint64_t remote, uint64_t length) {
  const uint64_t ticket = atomicAdd(reinterpret_cast<unsigned long long*>(&ring->head), 1ull);
  kvf_proxy_slot* slot = kvf_proxy_slots(ring) + (ticket & (ring->capacity - 1));
  while (kvf_proxy_load(&slot->seq) != ticket) __nanosleep(200);
  slot->local = local;
  slot->remote = remote;
  slot->length = length;
  slot->target = segment;
  slot->producer = id;
  uint64_t* issued = kvf_proxy_issued(ring) + id;
  *reinterpret_cast<volatile uint64_t*>(issued) = kvf_proxy_load(issued) + 1;
  // The command and the count reach host memory before the slot says it is published.
  __threadfence_system();
  *reinterpret_cast<volatile uint64_t*>(&slot->seq) = ticket + 1;
}

// Waits until every WRITE producer `id` put has ended (landed, or failed).
__device__ inline void kvf_quiet(kvf_proxy_ring* ring, uint64_t id) {
  const uint64_t issued = kvf_proxy_load(kvf_proxy_issued(ring) + id);
  while (kvf_proxy_load(kvf_proxy_ended(ring) + id) < issued) __nanosleep(1000);
  __threadfence_system();
}

// How many of producer `id`'s WRITEs failed so far.
__device__ inline uint64_t kvf_failed(kvf_proxy_ring* ring, uint64_t id) {
  return kvf_proxy_load(kvf_proxy_failed(ring) + id);
}
