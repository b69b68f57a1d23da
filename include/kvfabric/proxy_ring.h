/* The proxy queue's ring (kvfabric/proxy.h): the memory layout shared by
 * the producers that fill it (host threads through ProxyQueue::PutNbi, GPU
 * kernels through kvfabric/proxy_device.cuh) and the proxy thread that
 * drains it. Plain C, no atomics here: each side reads and writes these
 * words with its own atomics (std::atomic_ref on the host, the device's
 * atomics and system-scope fences on a GPU).
 *
 * A bounded multi-producer, single-consumer ring of WRITE commands, one
 * 64-byte slot each. A producer takes a ticket (an atomic add on `head`),
 * waits until the slot of ticket t (index t mod capacity) says it is free
 * for t (seq == t), writes the command, then publishes it (seq = t + 1,
 * after the command with release order). The proxy takes ticket `tail` when
 * its seq is tail + 1, copies it, and frees the slot for the ticket one
 * round later (seq = tail + capacity).
 *
 * Completion is counted per producer id (a producer id is used by one
 * thread at a time): the producer counts the commands it issued in
 * issued[id]; the proxy counts those that ended in ended[id], and those
 * that failed in failed[id]. Quiet waits until ended[id] reaches issued[id].
 *
 * The block, in order, each part 64-byte aligned: the header below; then
 * issued[producers], ended[producers], failed[producers] (uint64_t each);
 * then slots[capacity]. */
#ifndef KVFABRIC_PROXY_RING_H_
#define KVFABRIC_PROXY_RING_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The helpers below are for the host and, compiled by nvcc, the device. */
#ifdef __CUDACC__
#define KVF_PROXY_FN static inline __host__ __device__
#else
#define KVF_PROXY_FN static inline
#endif

/* One WRITE: `length` bytes from registered local memory at `local` to
 * `remote` in the segment `target` (an Engine SegmentHandle). */
typedef struct kvf_proxy_slot {
  uint64_t seq;
  uint64_t local;
  uint64_t remote;
  uint64_t length;
  int64_t target;
  uint64_t producer;
  uint64_t reserved[2];
} kvf_proxy_slot;

typedef struct kvf_proxy_ring {
  uint64_t capacity;  /* slots, a power of two */
  uint64_t producers; /* producer ids 0 .. producers - 1 */
  uint64_t reserved0[6];
  uint64_t head; /* the next ticket (producers) */
  uint64_t reserved1[7];
  uint64_t tail; /* the next ticket the proxy takes (the proxy alone) */
  uint64_t reserved2[7];
} kvf_proxy_ring;

/* The counters and slots after the header. */
KVF_PROXY_FN size_t kvf_proxy_counters_bytes(uint64_t producers) {
  return (size_t)((producers * 8 + 63) / 64 * 64);
}
KVF_PROXY_FN uint64_t* kvf_proxy_issued(kvf_proxy_ring* r) {
  return (uint64_t*)((char*)r + sizeof(kvf_proxy_ring));
}
KVF_PROXY_FN uint64_t* kvf_proxy_ended(kvf_proxy_ring* r) {
  return (uint64_t*)((char*)kvf_proxy_issued(r) + kvf_proxy_counters_bytes(r->producers));
}
KVF_PROXY_FN uint64_t* kvf_proxy_failed(kvf_proxy_ring* r) {
  return (uint64_t*)((char*)kvf_proxy_ended(r) + kvf_proxy_counters_bytes(r->producers));
}
KVF_PROXY_FN kvf_proxy_slot* kvf_proxy_slots(kvf_proxy_ring* r) {
  return (kvf_proxy_slot*)((char*)kvf_proxy_failed(r) + kvf_proxy_counters_bytes(r->producers));
}
/* The whole block's size. */
KVF_PROXY_FN size_t kvf_proxy_ring_bytes(uint64_t capacity, uint64_t producers) {
  return sizeof(kvf_proxy_ring) + 3 * kvf_proxy_counters_bytes(producers) +
         (size_t)capacity * sizeof(kvf_proxy_slot);
}

#ifdef __cplusplus
}
#endif

#endif /* KVFABRIC_PROXY_RING_H_ */
