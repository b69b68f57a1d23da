// kvfabric::proxy::ProxyQueue: WRITEs issued by producers that do not call
// the engine themselves (GPU kernels, through kvfabric/proxy_device.cuh,
// or host threads) through a lock-free ring of commands in host memory
// (kvfabric/proxy_ring.h), which a proxy thread drains into engine
// batches (docs/design/proxy.md).
//
//   ProxyQueue::Create(engine, options, &q);
//   q->PutNbi(id, local, segment, remote_addr, length);   // returns at once
//   ...
//   q->Quiet(id);   // every WRITE producer `id` issued has ended
//
// A producer id is used by one thread (or one GPU thread) at a time; ids
// are independent: one producer's Quiet waits for its own commands only.
// The local memory must be registered with the engine and stay untouched
// until Quiet; the proxy checks each command as the engine checks a
// request, and a bad one fails alone, reported by its producer's Quiet.
#pragma once

#include <cstdint>
#include <memory>

#include "kvfabric/engine.h"
#include "kvfabric/proxy_ring.h"

namespace kvfabric::proxy {

struct ProxyOptions {
  uint64_t capacity = 4096;   // commands in the ring (a power of two, at least 2)
  uint64_t producers = 64;    // producer ids 0 .. producers - 1 (1 to 65536)
  uint64_t max_batch = 256;   // commands the proxy submits in one engine batch (1 to capacity)
  uint64_t max_in_flight = 64;  // engine batches the proxy keeps unfinished before it waits for the oldest
};

struct ProxyStats {
  uint64_t commands = 0;  // taken from the ring
  uint64_t batches = 0;   // engine batches submitted
  uint64_t failed = 0;    // commands that ended in an error
};

class ProxyQueue {
 public:
  // Creates the ring and starts the proxy thread. `engine` must outlive
  // the queue.
  static Status Create(Engine* engine, const ProxyOptions& options, std::unique_ptr<ProxyQueue>* out);
  // The commands already in the ring are submitted and waited for, then
  // the thread stops. No producer may be inside PutNbi meanwhile (a ticket
  // taken and never published would hold the proxy).
  ~ProxyQueue();
  ProxyQueue(const ProxyQueue&) = delete;
  ProxyQueue& operator=(const ProxyQueue&) = delete;

  // Puts a WRITE of `length` bytes from `local` to `remote_addr` of
  // `target` in the ring for producer `producer`, waiting while the ring
  // is full (the proxy frees slots as it takes them), and returns:
  // InvalidArgument for a producer id out of range or a length of 0,
  // else OK. Whether the WRITE succeeds, Quiet says.
  Status PutNbi(uint64_t producer, const void* local, SegmentHandle target, uint64_t remote_addr, uint64_t length);
  // Waits until every command `producer` put has ended, up to `timeout_ms`
  // (negative: no limit; Timeout when it passes first). The first failure
  // among them since the producer's last Quiet, else OK.
  Status Quiet(uint64_t producer, int64_t timeout_ms = -1);

  // The ring, for a device producer: map this host memory for the device
  // (cuMemHostRegister with CU_MEMHOSTREGISTER_DEVICEMAP, then
  // cuMemHostGetDevicePointer) and hand the kernel the device address.
  kvf_proxy_ring* ring();
  ProxyStats stats() const;

  struct Impl;

 private:
  explicit ProxyQueue(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfabric::proxy
