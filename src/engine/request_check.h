// Request checks: everything Submit verifies before it posts anything, so
// a batch with one bad request changes nothing. A request that passes
// becomes a Plan: its local buffer, and the peer's descriptor and buffer
// (or the engine's own buffer) it targets.
#pragma once

#include <cstddef>
#include <memory>

#include "engine/peer.h"
#include "engine/segment_directory.h"
#include "kvfabric/engine.h"
#include "memory/memory_registry.h"
#include "metadata/segment_desc.h"

namespace kvfabric::engine {

struct Plan {
  const TransferRequest* req = nullptr;
  std::shared_ptr<Peer> peer;  // null for the engine's own segment
  std::shared_ptr<const memory::Buffer> local;
  std::shared_ptr<const metadata::SegmentDesc> desc;  // the peer's, as the checks saw it
  const metadata::BufferDesc* remote = nullptr;       // inside *desc
  std::shared_ptr<const memory::Buffer> self_remote;  // own segment: the target buffer
};

// Checks request number `index` of a submission: a nonzero length, a local
// range inside one registered buffer, a known target, and a remote range
// inside one buffer the target registered, and not registered read-only
// when the request WRITEs; a notice only on a WRITE. A peer whose last request
// failed (it may have restarted) or whose cached descriptor lacks the
// range (it may have registered since) is asked again first: one handshake
// or store round trip. Errors name the request and say what to do.
Status CheckRequest(const TransferRequest& r, size_t index, const memory::MemoryRegistry& registry,
                    SegmentDirectory* segments, Plan* plan);

}  // namespace kvfabric::engine
