// The Prometheus families of an engine's and a store's figures: pure
// functions from the public stats structs (kvfabric/stats.h,
// kvfabric/store.h) to prometheus-cpp's data model. Every sample carries
// `engine` (the engine's name), so engines sharing one endpoint stay apart.
// Names follow Prometheus conventions: counters end in _total, sizes in
// _bytes, durations in _seconds; docs/metrics.md lists them all.
#pragma once

#include <prometheus/metric_family.h>

#include <vector>

#include "kvfabric/stats.h"
#include "kvfabric/store.h"

namespace kvfabric::metrics {

std::vector<prometheus::MetricFamily> EngineFamilies(const EngineStats& stats);

// `engine` names the store's engine, `node` its control address (a node's;
// "" for a client); `latency` are its calls' histograms (op "put", "get",
// "exists"; size_class unused).
std::vector<prometheus::MetricFamily> StoreFamilies(const std::string& engine, const std::string& node,
                                                    const StoreStats& stats,
                                                    const std::vector<LatencyStats>& latency);

}  // namespace kvfabric::metrics
