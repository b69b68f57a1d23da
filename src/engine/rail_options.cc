#include "engine/rail_options.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "common/text.h"
#include "fabric/fabric_info.h"

namespace kvfabric::engine {
namespace {

Status Count(const char* variable, int64_t value, const char* zero_means, size_t* out) {
  if (value < 0)
    return Status::InvalidArgument(
        text::Format("{}={}: use 0 ({}) or a positive number", variable, value, zero_means));
  *out = static_cast<size_t>(value);
  return Status::OK();
}

Status Period(const char* variable, int64_t ms, const char* zero_means, std::chrono::nanoseconds* out) {
  constexpr int64_t kMaxMs = std::numeric_limits<int64_t>::max() / 1000000;
  if (ms < 0 || ms > kMaxMs)
    return Status::InvalidArgument(text::Format("{}={}: use 0 ({}) or a number of milliseconds up to {}", variable, ms,
                                                zero_means, kMaxMs));
  *out = std::chrono::milliseconds(ms);
  return Status::OK();
}

}  // namespace

Status RailOptionsFromSettings(const Settings& s, fabric::RailOptions* out) {
  fabric::RailOptions o;
  if (s.post_mode == "auto") {
    o.post_mode = fabric::PostMode::kAuto;
  } else if (s.post_mode == "direct") {
    o.post_mode = fabric::PostMode::kDirect;
  } else if (s.post_mode == "progress") {
    o.post_mode = fabric::PostMode::kProgress;
  } else {
    return Status::InvalidArgument("KVF_POST_MODE='" + s.post_mode + "': use 'auto', 'direct' or 'progress'");
  }
  if (s.write_completion == "delivery") {
    o.write_completion = fabric::WriteCompletion::kDelivery;
  } else if (s.write_completion == "transmit") {
    o.write_completion = fabric::WriteCompletion::kTransmit;
  } else {
    return Status::InvalidArgument("KVF_WRITE_COMPLETION='" + s.write_completion +
                                   "': use 'delivery' or 'transmit'");
  }
  KVF_RETURN_IF_ERROR(Count("KVF_TX_DEPTH", s.tx_depth, "the provider's depth", &o.tx_depth));
  KVF_RETURN_IF_ERROR(Count("KVF_CQ_SIZE", s.cq_size, "as many as the tx depth", &o.cq_size));
  KVF_RETURN_IF_ERROR(Count("KVF_MAX_SLICE_BYTES", s.max_slice_bytes, "the provider's max_msg_size",
                            &o.max_slice_bytes));
  KVF_RETURN_IF_ERROR(Period("KVF_RAIL_STALL_MS", s.rail_stall_ms, "never stall", &o.stall_period));
  KVF_RETURN_IF_ERROR(Period("KVF_RAIL_RETRY_MS", s.rail_retry_ms, "retry at once", &o.retry_period));
  // At least a second: a handshake timeout set low for quick metadata
  // failures must not give up on tcp connections still being set up.
  o.refused_period = std::chrono::milliseconds(std::max<int64_t>(s.handshake_timeout_ms, 1000));
  if (s.post_burst_us < 0 || s.post_burst_us > 1000 * 1000)
    return Status::InvalidArgument(text::Format(
        "KVF_POST_BURST_US={}: use 0 (post the whole queue first) or a number of microseconds up to 1000000",
        s.post_burst_us));
  o.post_burst = std::chrono::microseconds(s.post_burst_us);
  if (s.efa_rnr_retry < 0 || s.efa_rnr_retry > 7)
    return Status::InvalidArgument(
        text::Format("KVF_EFA_RNR_RETRY={}: use 0 to 7 (7: retry for ever)", s.efa_rnr_retry));
  o.efa_rnr_retry = static_cast<int>(s.efa_rnr_retry);
  o.close_connections = fabric::MayCloseConnections(s.close_connections);
  o.close_stalled_connections = fabric::MayCloseStalledConnections(s.close_connections, fi_version());
  *out = o;
  return Status::OK();
}

}  // namespace kvfabric::engine
