// The rail options an engine's Settings ask for (fabric/ never reads Settings).
#pragma once

#include "fabric/rail_options.h"
#include "kvfabric/settings.h"
#include "kvfabric/status.h"

namespace kvfabric::engine {

// Resolves KVF_POST_MODE, KVF_WRITE_COMPLETION, KVF_TX_DEPTH, KVF_CQ_SIZE,
// KVF_MAX_SLICE_BYTES, KVF_RAIL_STALL_MS, KVF_RAIL_RETRY_MS and
// KVF_POST_BURST_US into `*out`.
// Values are taken as given, never clamped: an unknown mode, a negative
// count or period, or a period too long for the nanosecond clock is an
// InvalidArgument naming the variable, its value and what it accepts, and
// `*out` is unchanged then. (Limits that depend on the provider, such as a
// tx depth above what it offers, are applied by fabric::Rail::Open.)
Status RailOptionsFromSettings(const Settings& settings, fabric::RailOptions* out);

}  // namespace kvfabric::engine
