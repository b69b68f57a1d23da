// Engine::Impl: the engine's parts, in the order they are built, and what
// builds, reports and tears them down. The public Engine (engine.cc) is a
// facade over it: each call checks its arguments and hands the work to the
// part that owns it.
#pragma once

#include <atomic>
#include <memory>
#include <string>

#include "engine/batch_table.h"
#include "engine/call_gate.h"
#include "engine/counters.h"
#include "engine/notice_board.h"
#include "engine/notice_mailer.h"
#include "engine/poster.h"
#include "engine/rail_set.h"
#include "engine/segment_directory.h"
#include "engine/segment_server.h"
#include "engine/startup.h"
#include "fabric/progress.h"
#include "kvfabric/engine.h"
#include "memory/memory_registry.h"
#include "metrics/endpoint.h"
#include "topology/topology.h"

namespace kvfabric {

// The parts are torn down (Shutdown) in the order that lets each finish
// with the ones below it still there. The gate, the name and the settings
// stay until the object goes.
struct Engine::Impl {
  engine::CallGate gate;                             // call_gate.*: calls against Close and fork
  std::string name;                                  // server->name(), kept after Close
  std::string metadata;                              // config.metadata, as given
  std::atomic<bool> closed{false};                   // Close has torn the parts down
  Settings settings;
  std::unique_ptr<metadata::MetadataStore> store;    // null with p2p
  engine::NoticeBoard notices;                       // notice_board.*: WRITEs' notices landed here
  engine::RailSet rails;                             // rail_set.*
  topology::Topology topo;                           // topology/
  std::unique_ptr<memory::MemoryRegistry> registry;  // memory/
  std::unique_ptr<engine::SegmentServer> server;     // segment_server.*: what peers see of us
  std::unique_ptr<engine::SegmentDirectory> segments;  // segment_directory.*: the peers we opened
  std::unique_ptr<engine::NoticeMailer> mailer;      // notice_mailer.*: notices sent as messages
  std::unique_ptr<engine::Poster> poster;            // poster.*, staged_post.cc, reroute.cc
  std::unique_ptr<fabric::Progress> progress;        // fabric/: completions
  engine::BatchTable batches;                        // batch_table.*
  std::unique_ptr<engine::Counters> counters;        // counters.*: requests (null with KVF_METRICS=0)
  std::unique_ptr<metrics::Endpoint::Membership> metrics;  // metrics/: our figures on KVF_METRICS_LISTEN

  ~Impl() { Shutdown(); }

  // Builds every part from `config` (Engine::Create).
  Status Build(const EngineConfig& config);
  // Ends the calls under way and the requests with the provider (a moment
  // for those to return), then Shutdown (Engine::Close).
  void Drain();
  // Idempotent; also of a half-built engine (Build failed).
  void Shutdown();
  // Engine::Stats, and what the metrics endpoint serves.
  void FillStats(EngineStats* out) const;
  // Joins KVF_METRICS_LISTEN's endpoint when set (Endpoint::JoinIfSet).
  Status StartMetrics();
  std::shared_ptr<engine::Batch> FindBatch(BatchId id, Status* error);

 private:
  // Build's steps after the rails: the memory registry over them, and the
  // segment server, directory, poster and progress threads.
  void BuildRegistry();
  Status BuildServing(const engine::ListenAddress& listen);
};

}  // namespace kvfabric
