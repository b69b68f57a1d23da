// kvfabric::weights::WeightSync: one member of a weight sync for RL
// (docs/design/weights.md): the sender (member 0, a trainer rank) or a
// receiver (a rollout rank). Each registers `slots` bucket slots once; the
// sender packs tensors into its own slots and WRITEs each bucket, with a
// notice, into the slots of the receivers the relay plan gives it; a
// receiver checks a bucket (header, manifest, checksum) when its notice
// comes, WRITEs it on to its own children, hands its tensors out, and
// gives its parent the slot back with a credit (an 8-byte WRITE with a
// notice).
//
//   WeightSync::Create(engine, options, &m);   // every member
//   infos[i] = m->Describe();                  // gathered by the caller ...
//   m->Connect(infos, i);                      // ... and given to all
//   sender:   m->BeginSend(v); m->Send(t)...; m->EndSend();
//   receiver: m->BeginReceive(v); while (m->Next(&t, &done), !done) use(t);
//
// One thread per member drives it. The sender that dies ends the sync
// (each wait ends within SyncOptions::timeout_ms with an error naming the
// member it lost). A receiver that dies is found by probes: its parent
// leaves it out, and the sender adopts its children, writing them what
// they lack from its slots (docs/design/weights.md, "A receiver that
// dies").
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "kvfabric/engine.h"

namespace kvfabric::weights {

struct SyncOptions {
  uint64_t bucket_bytes = 64 << 20;   // tensor bytes per bucket
  uint64_t manifest_bytes = 1 << 20;  // room for a bucket's manifest
  int slots = 2;                      // buckets in flight to each receiver
  int64_t timeout_ms = 30000;         // longest wait for a bucket or a credit
  std::string host;                   // this member's host ("" : the engine name's host)
  int rails = 0;                      // this member's rails (0: the engine's count)
};

// A tensor: sent (its bytes are read during Send), or received (its bytes
// stay valid until the next Next call).
struct TensorRef {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  uint64_t bytes = 0;
};

// Where a member's time went since it was created (Stats): nanoseconds
// copying tensors into slots (sender) or gathering tensors that span
// buckets (receiver), computing and checking checksums, waiting for
// notices (a bucket, or a slot given back), and waiting for its own WRITEs.
struct SyncStats {
  uint64_t buckets = 0;  // sent, or received and checked
  uint64_t bytes = 0;    // of tensors
  int64_t copy_ns = 0;
  int64_t checksum_ns = 0;
  int64_t notice_wait_ns = 0;
  int64_t write_wait_ns = 0;
};

class WeightSync {
 public:
  // Registers this member's slots and credit word with `engine` (which must
  // outlive it).
  static Status Create(Engine* engine, const SyncOptions& options, std::unique_ptr<WeightSync>* out);
  ~WeightSync();

  // What the others need of this member (JSON), to give to Connect.
  std::string Describe() const;
  // Every member's Describe(), the sender first; `me` is this member's
  // index. Plans the relays (PlanRelays) and opens the segments of this
  // member's parent and children. Errors: members that disagree on the
  // slot layout, a segment that does not open. What a version that failed
  // half-way left behind (WRITEs, notices of its buckets and slots) is
  // dropped: after every member connects again, any version, the failed
  // one included, can be sent. After a failure, every member connects
  // before the next version is sent (notices that arrived before are
  // dropped too); the engine's notices are the sync's own.
  Status Connect(const std::vector<std::string>& members, int me);
  SyncStats Stats() const;
  // The relay plan Connect made: each member's parent (-1 for the sender).
  std::vector<int> parents() const;
  // Called on the sender with each bucket's slot after it is sealed and
  // before it is written: a test damages bytes in flight with it.
  void set_seal_hook(std::function<void(uint64_t bucket, uint8_t* slot, uint64_t bytes)> hook);

  // The sender's side of version `version`. BeginSend and BeginReceive
  // refuse (InvalidArgument) while the last version this member began did
  // not complete, until Connect.
  Status BeginSend(uint64_t version);
  Status Send(const TensorRef& tensor);
  // Sends the last bucket and waits until the receivers it writes to have
  // taken every bucket.
  Status EndSend();

  // A receiver's side: only buckets of `version` are handed out.
  Status BeginReceive(uint64_t version);
  // The next tensor in the sender's order, or *done when the version is
  // complete. Errors name the bucket and its tensors.
  Status Next(TensorRef* out, bool* done);

  // Its parts, defined in weight_sync_impl.h for the files that make it.
  struct Peer;
  struct Impl;

 private:
  explicit WeightSync(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvfabric::weights
