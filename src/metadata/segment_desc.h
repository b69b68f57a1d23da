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
};

struct SegmentDesc {
  static constexpr int kVersion = 1;
  std::string name;
  uint64_t epoch = 0;   // random per engine start: a restarted peer has a new one
  std::string host_id;  // boot id: equal means same kernel (shm reachable)
  int64_t pid = 0;
  std::vector<RailDesc> rails;
  std::vector<BufferDesc> buffers;  // sorted by addr

  // The buffer holding all of [addr, addr+len), or null.
  const BufferDesc* FindBuffer(uint64_t addr, uint64_t len) const;
};

std::string ToJson(const SegmentDesc& d);
// ProtocolError naming the first problem; `out` is untouched then.
Status FromJson(std::string_view text, SegmentDesc* out);

}  // namespace kvfabric::metadata
