// SegmentDesc: what a process publishes about itself (its rails' fabric
// addresses and its registered buffers with one remote key per rail), read
// once per peer. Serialized as versioned JSON; parsing validates everything,
// since the bytes come from the network.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "kvfabric/status.h"

namespace kvfabric::metadata {

struct RailDesc {
  std::string provider;  // "tcp;ofi_rxm", "shm", "efa", ...
  std::string fabric;
  std::string domain;
  std::string address;   // raw endpoint name (fi_getname), binary
  bool virt_addr = false;  // remote addresses are virtual (else MR offsets)
};

struct ChunkDesc {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::vector<std::optional<uint64_t>> keys;  // one per rail; empty = not on that rail
};

struct BufferDesc {
  uint64_t addr = 0;
  uint64_t length = 0;
  std::string location;
  std::vector<ChunkDesc> chunks;  // contiguous, covering [addr, addr+length)
  // Peers may READ the buffer, never WRITE it (its keys lack
  // FI_REMOTE_WRITE, so the provider refuses). Optional on the wire.
  bool read_only = false;
};

struct SegmentDesc {
  static constexpr int kVersion = 1;
  std::string name;
  // Per engine start, and larger at each restart: the start time in ms in
  // the high bits, random low bits. A peer tells a restart by a new epoch
  // and refuses an older one (a replayed descriptor of a previous process).
  uint64_t epoch = 0;
  // Grows with every registration change within one epoch: a descriptor
  // with a smaller one than a peer already holds is stale and refused.
  // Optional on the wire (0 when absent).
  uint64_t generation = 0;
  // Set in a sealed descriptor (descriptor_seal.h): the nonce its memory
  // keys are masked with. Empty otherwise; optional on the wire.
  std::string seal_nonce;
  std::string host_id;  // boot id: equal means same kernel (shm reachable)
  int64_t pid = 0;
  std::vector<RailDesc> rails;
  std::vector<BufferDesc> buffers;  // sorted by addr

  // The buffer holding all of [addr, addr+len), or null.
  const BufferDesc* FindBuffer(uint64_t addr, uint64_t len) const;
};

// Whether `fetched` is older than `held`, a descriptor of the same segment
// this engine already uses: an earlier epoch (a previous process), or the
// same epoch with a smaller generation (an earlier state of this process).
bool IsStale(const SegmentDesc& held, const SegmentDesc& fetched);

std::string ToJson(const SegmentDesc& d);
// ProtocolError naming the first problem; `out` is untouched then.
Status FromJson(std::string_view text, SegmentDesc* out);

}  // namespace kvfabric::metadata
