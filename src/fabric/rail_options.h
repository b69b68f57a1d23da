// RailOptions: how a rail should run, as the layer above resolved it (the
// engine reads them from its Settings: src/engine/rail_options.h). Defaults
// are those of the KVF_* settings they come from.
#pragma once

#include <chrono>
#include <cstddef>

namespace kvfabric::fabric {

// Who calls fi_write/fi_read (KVF_POST_MODE).
enum class PostMode {
  kAuto,      // kDirect on efa and verbs (a post hands a descriptor to the NIC), else kProgress
  kDirect,    // the submitting thread, under the rail's post lock
  kProgress,  // only the progress thread; submitters queue and wake it
};

// When a write counts as completed (KVF_WRITE_COMPLETION).
enum class WriteCompletion {
  kDelivery,  // visible in the target's memory (FI_DELIVERY_COMPLETE)
  kTransmit,  // the source buffer may be reused; no guarantee at the target
};

struct RailOptions {
  PostMode post_mode = PostMode::kAuto;
  WriteCompletion write_completion = WriteCompletion::kDelivery;
  // Operations in flight; 0 = the provider's tx_attr->size. A larger value
  // is capped to it, and credits never exceed the CQ size read back.
  size_t tx_depth = 0;
  // Completion queue entries; 0 = as many as the tx depth.
  size_t cq_size = 0;
  // Largest single fi_write/fi_read; 0 = the provider's max_msg_size (a
  // larger value is capped to it).
  size_t max_slice_bytes = 0;
  // With work in flight and nothing completing for `stall_period`, the
  // rail's work is offered elsewhere and the rail goes out of service for
  // `retry_period` (see RailHealth). A zero stall period never does.
  std::chrono::nanoseconds stall_period = std::chrono::milliseconds(2000);
  std::chrono::nanoseconds retry_period = std::chrono::milliseconds(5000);
  // A peer the provider refuses every post to (-FI_EAGAIN) for this long,
  // with nothing in flight to it, cannot be connected to: its waiting
  // operations fail with NetworkError (KVF_HANDSHAKE_TIMEOUT_MS, at least
  // 1 s: the time allowed to connect). While the rail completes work for
  // other peers meanwhile, they do not count against its health (CheckStall).
  // Zero: they wait for their own deadlines.
  std::chrono::nanoseconds refused_period = std::chrono::milliseconds(5000);
  // The progress thread posts queued operations for at most this long
  // before it reads completions again (KVF_POST_BURST_US); zero posts the
  // whole queue first. Submitters posting directly are not bounded.
  std::chrono::nanoseconds post_burst = std::chrono::microseconds(20);
  // GPU memory is wanted on this rail: its fi_info was asked for FI_HMEM.
  bool hmem = false;
  // FI_OPT_EFA_RNR_RETRY for efa endpoints (KVF_EFA_RNR_RETRY), 0 to 7.
  int efa_rnr_retry = 7;
  // Connections may be closed to end a peer's operations past their
  // deadline, and before a stalled rail's posted operations move
  // (KVF_CLOSE_CONNECTIONS through MayCloseConnections and
  // MayCloseStalledConnections); rails of rxm's providers then do
  // (Rail::CutPeer).
  bool close_connections = false;
  bool close_stalled_connections = false;
};

}  // namespace kvfabric::fabric
