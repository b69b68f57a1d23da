// WriterSegments: the segments of the writers a node READs PUTs from
// (KVF_STORE_PUT_MODE=pull), opened once and kept, and the writers whose
// open failed, not tried again for a while: a client naming writers that
// never answer costs the node one handshake per writer and retry period,
// not one per request. Thread-safe.
#pragma once

#include <chrono>
#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>
#include <utility>

#include "kvfabric/engine.h"
#include "kvfabric/status.h"

namespace kvfabric::store {

class WriterSegments {
 public:
  // Opens segments with `engine`; a failed open is remembered for `retry`.
  WriterSegments(Engine* engine, std::chrono::milliseconds retry) : engine_(engine), retry_(retry) {}

  // The writer's segment if it was opened before (no handshake).
  bool Known(const std::string& name, SegmentHandle* out);
  // Why writer `name` is not tried now (its last open failed within the
  // retry period: that failure, annotated), or OK.
  Status Unreachable(const std::string& name);
  // Opens writer `name`'s segment and keeps it, or fails as Unreachable
  // says, or with the open's failure (then remembered).
  Status Open(const std::string& name, SegmentHandle* out);

 private:
  // Failures remembered at most: past it, the oldest expire first and new
  // ones are not remembered.
  static constexpr size_t kMaxUnreachable = 4096;
  using Clock = std::chrono::steady_clock;
  Engine* const engine_;
  const std::chrono::milliseconds retry_;
  std::mutex mu_;
  std::unordered_map<std::string, SegmentHandle> open_;
  std::unordered_map<std::string, std::pair<Clock::time_point, Status>> unreachable_;  // until, why
};

}  // namespace kvfabric::store
