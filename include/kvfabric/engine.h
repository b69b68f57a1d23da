// kvfabric::Engine: one per process. It registers local memory, opens peers'
// segments by name and moves bytes with one-sided READ/WRITE over libfabric.
//
//   EngineConfig cfg;                       // p2p handshake, protocol auto
//   std::unique_ptr<Engine> e;
//   Engine::Create(cfg, &e);
//   e->RegisterMemory(buf, len);
//   SegmentHandle peer;  e->OpenSegment("10.0.0.2:15000", &peer);
//   e->Transfer({{OpCode::kWrite, buf, peer, remote_addr, len}});
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/codes.h"
#include "kvfabric/settings.h"
#include "kvfabric/stats.h"
#include "kvfabric/status.h"

namespace kvfabric {

using SegmentHandle = int64_t;  // from OpenSegment; the engine's own segment too
using BatchId = uint64_t;       // from AllocateBatch

// kRead, kWrite: one per row of KVF_OP_CODES (kvfabric/codes.h), numbered as in C and Python.
#define KVF_OP_CODE_ENUMERATOR_(number, Name, C_NAME, meaning) k##Name = number,
enum class OpCode : int { KVF_OP_CODES(KVF_OP_CODE_ENUMERATOR_) };
#undef KVF_OP_CODE_ENUMERATOR_

// One request: READ copies [remote_addr, +length) of the target segment into
// local memory at `local`; WRITE copies local memory there. `remote_addr` is
// the address of the bytes in the target process (as its segment lists them).
struct TransferRequest {
  OpCode opcode = OpCode::kWrite;
  void* local = nullptr;
  SegmentHandle target = -1;
  uint64_t remote_addr = 0;
  size_t length = 0;
  // WRITE only. Nonzero: the target learns when every byte of this WRITE
  // has landed without polling them: its Engine::TakeNotices returns
  // `notice` once (each piece carries it as remote CQ data, or, where a
  // rail has none or the bytes go through GPU staging, the initiator sends
  // it as a message once every piece was delivered: KVF_NOTICE_PATH;
  // docs/design/weights.md, "Notices"; such a request completes once the
  // target took the message). Keep one WRITE per notice value and target
  // unfinished at a time.
  uint16_t notice = 0;
};

// kPending, kCompleted, kFailed, kTimeout: one per row of KVF_TASK_STATES
// (kvfabric/codes.h), numbered as in C and Python.
#define KVF_TASK_STATE_ENUMERATOR_(number, Name, C_NAME, meaning) k##Name = number,
enum class TaskState : int { KVF_TASK_STATES(KVF_TASK_STATE_ENUMERATOR_) };
#undef KVF_TASK_STATE_ENUMERATOR_

// The state's C name without KVF_: "PENDING", "COMPLETED", ... ("UNKNOWN" for no state).
inline const char* TaskStateName(TaskState s) {
  switch (s) {
#define KVF_TASK_STATE_NAME_(number, Name, C_NAME, meaning) \
  case TaskState::k##Name: return #C_NAME;
    KVF_TASK_STATES(KVF_TASK_STATE_NAME_)
#undef KVF_TASK_STATE_NAME_
  }
  return "UNKNOWN";
}

struct TransferStatus {
  TaskState state = TaskState::kPending;
  size_t transferred_bytes = 0;
  Status error;  // set when state is kFailed or kTimeout
};

struct BufferEntry {
  void* addr = nullptr;
  size_t length = 0;
  // "cpu:N" (NUMA node), "cuda:N", or "*": ask the CUDA driver whether this
  // is device memory (and whose), else the NUMA node of its first page.
  std::string location = "*";
  // Peers may READ the buffer and never WRITE it: its registration lacks
  // remote write access, so the NIC refuses a peer's WRITE whatever key it
  // holds (docs/security.md says where a provider does not enforce it).
  bool read_only = false;
};

// A registered buffer of a segment, as its owner published it.
struct RemoteBuffer {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  bool read_only = false;  // registered with BufferEntry::read_only: READ it, never WRITE it
};

// What the engine knows of local memory it registered (DescribeMemory).
struct MemoryFacts {
  std::string location;        // as registered: "cpu:N" or "cuda:N"
  bool device = false;         // GPU memory
  bool remote_access = false;  // registered on a rail: peers may READ it, and WRITE it unless read_only
  bool read_only = false;      // registered with BufferEntry::read_only
};

struct RailInfo {
  std::string provider;  // e.g. "tcp;ofi_rxm", "shm", "efa"
  std::string domain;    // e.g. "lo", "rdmap79s0-rdm"
  std::string fabric;
  size_t tx_depth = 0;   // credits in use
  size_t max_msg_size = 0;
  bool virt_addr = false;  // remote addresses are virtual addresses (else MR offsets)
  uint64_t completed_bytes = 0;  // bytes this rail moved successfully so far
  size_t peer_slots = 0;         // peers in this rail's address vector now
};

struct EngineConfig {
  // host:port the handshake server binds to and advertises; port 0 picks one.
  // Peers open this engine's segment by the resulting name.
  std::string local_server_name = "127.0.0.1:0";
  // "p2p" (also "P2PHANDSHAKE"): peers ask each other; nothing to run.
  std::string metadata = "p2p";
  // efa, tcp (tcp;ofi_rxm), shm, verbs (verbs;ofi_rxm), sockets or auto.
  std::string protocol = "auto";
  // Comma-separated libfabric domain names to use (e.g. "lo" or
  // "rdmap79s0-rdm,rdmap80s0-rdm"); empty picks automatically.
  std::string nic_filter;
  Settings settings;              // compiled-in defaults ...
  bool apply_environment = true;  // ... overlaid with KVF_* variables
};

// Sets what libfabric must see in the environment before its first use in
// the process, from `settings`: FI_HMEM=system when GPU memory is off
// (KVF_CUDA=0) or the CUDA driver cannot load (so no provider creates a CUDA
// context), and the rxm connection settings of KVF_RXM_FAST_CONNECT; a
// variable the user set keeps its value. Engine::Create calls it; a program
// that asks libfabric anything earlier (kvfabric doctor, topology) calls it
// first. Returns whether GPU memory is usable: OK, or the reason.
Status PrepareLibfabric(const Settings& settings);

// Threads: every method may be called from any thread at once, Close
// included. Only the destructor must be the last use of the object.
class Engine {
 public:
  static Status Create(const EngineConfig& config, std::unique_ptr<Engine>* out);
  // Close(), then frees the engine.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Stops the engine. Every later call fails with Closed. Calls under way on
  // other threads return first: a WaitBatch or Transfer waiting for requests
  // is woken and returns Closed; a handshake under way (OpenSegment, Probe,
  // ...) ends within KVF_HANDSHAKE_TIMEOUT_MS. Then the handshake server
  // stops, the segment leaves the metadata store, requests still in flight
  // are abandoned and the rails close. Idempotent; a second caller returns
  // once the first has finished.
  //
  // After fork(), the child's copy of an engine is inert: every call fails
  // with Closed ("create a new Engine in the child"), and Close and the
  // destructor leave the parent's descriptor, connections, shared memory and
  // libfabric objects alone (the copy's memory is leaked on purpose).
  void Close();
  // Whether Close ran, or this process is a fork of the engine's.
  bool closed() const;

  // The name peers pass to OpenSegment: "host:port" (also after Close).
  const std::string& name() const;
  const Settings& settings() const;
  // EngineConfig::metadata as given: "p2p", "etcd://...", "http://...".
  const std::string& metadata() const;
  // The rails with their counters as of now (none after Close).
  std::vector<RailInfo> rails() const;
  // Everything the engine counted (kvfabric/stats.h): per rail, per peer,
  // failures by code, latency by op and size class, registrations.
  Status Stats(EngineStats* out) const;
  // The metrics endpoint serving this engine ("127.0.0.1:9400"), or "" when
  // KVF_METRICS_LISTEN is empty or could not be bound.
  std::string metrics_address() const;

  // Memory. Registration covers every rail that serves `location` (see
  // BufferEntry::location; "*" detects it). Host memory must be mapped in
  // this process: a range with an unmapped page is an InvalidArgument.
  Status RegisterMemory(void* addr, size_t length, const std::string& location = "*");
  Status UnregisterMemory(void* addr);
  Status RegisterMemoryBatch(const std::vector<BufferEntry>& buffers);
  Status UnregisterMemoryBatch(const std::vector<void*>& addrs);
  // The facts of the registered buffer holding all of [addr, +length):
  // NotFound when no registered buffer holds the whole range.
  Status DescribeMemory(const void* addr, size_t length, MemoryFacts* out) const;

  // Segments. Opening is cached: the same name returns the same handle.
  // OpenSegment(name()) returns the engine's own segment (transfers become memcpy).
  Status OpenSegment(const std::string& name, SegmentHandle* out);
  Status CloseSegment(SegmentHandle handle);
  // Refetches the descriptor and returns the peer's registered buffers.
  Status GetSegmentBuffers(SegmentHandle handle, std::vector<RemoteBuffer>* out);
  // Inserts every rail pair of the peer in one handshake round trip. Idempotent.
  Status Warmup(const std::string& name);

  // One handshake round trip: OK when the peer's engine answers.
  Status Probe(const std::string& name);
  // Notifications: a short application message delivered to a peer's engine
  // (through its handshake server) and kept there until it calls GetNotifies.
  // A message is at most 1 MiB (else InvalidArgument). A receiver holding
  // 4096 unread messages, or 64 MiB of them, refuses more (Busy), so none is
  // lost and no sender can fill its memory.
  Status SendNotify(const std::string& name, const std::string& message);
  Status GetNotifies(std::vector<std::string>* out);
  // The notices (TransferRequest::notice) of WRITEs that landed whole in
  // this engine's memory since the last call, in the order they did, each
  // once.
  Status TakeNotices(std::vector<uint16_t>* out);
  // TakeNotices, waiting up to `timeout_ms` for at least one: Timeout when
  // none came, Closed when the engine closed meanwhile.
  Status WaitNotices(int64_t timeout_ms, std::vector<uint16_t>* out);

  // Batches: up to `capacity` requests (1 to 2^20), submitted in one or more calls.
  Status AllocateBatch(size_t capacity, BatchId* out);
  // All requests are checked before any is posted: on error nothing was submitted.
  Status Submit(BatchId batch, const std::vector<TransferRequest>& requests);
  Status GetTaskStatus(BatchId batch, size_t task, TransferStatus* out);
  // Aggregate: COMPLETED when all tasks are, FAILED/TIMEOUT when any is and
  // the rest are done, else PENDING.
  Status GetBatchStatus(BatchId batch, TransferStatus* out);
  // Blocks until every submitted task has ended (or `timeout_ms` passes;
  // negative, or more than the steady clock can count, waits without
  // limit), then returns the aggregate status.
  Status WaitBatch(BatchId batch, int64_t timeout_ms, TransferStatus* out);
  // Ends every task of the batch still pending now, as its deadline would:
  // TIMEOUT (FAILED when one of its operations had failed already). Where
  // the provider allows it (tcp and verbs, through rxm; not with
  // KVF_CLOSE_CONNECTIONS=off), the connections that carry their operations
  // are closed first: once this returns, none of them writes local memory,
  // and the caller may give the buffers of the timed-out tasks to other
  // data. Elsewhere (efa) an operation the provider still holds may
  // complete later; shm copies a
  // READ within its post, so none is left in flight. The next request to
  // such a peer connects again. Refused with Busy while a Submit on another
  // thread uses the batch.
  Status ExpireBatch(BatchId batch);
  // Refused with Busy while any task is still pending, or while a Submit on
  // another thread is using the batch.
  Status FreeBatch(BatchId batch);
  // Submits and waits for every request; the first failure is returned.
  Status Transfer(const std::vector<TransferRequest>& requests);

  struct Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfabric
