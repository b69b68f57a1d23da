// RailInfo: what the layers above a rail (topology, peer pairing, the
// segment it publishes) need to know about it. The public
// kvfabric::RailInfo (include/kvfabric/engine.h) is the API's copy, with
// counters added; this one stays inside the library.
#pragma once

#include <cstddef>
#include <string>

namespace kvfabric::fabric {

struct RailInfo {
  std::string provider;  // e.g. "tcp;ofi_rxm", "shm", "efa"
  std::string domain;    // e.g. "lo", "rdmap79s0-rdm"
  std::string fabric;    // e.g. an IP subnet for tcp, "efa"
  size_t tx_depth = 0;   // credits in use
  size_t max_msg_size = 0;  // largest single fi_write/fi_read the rail posts
  bool virt_addr = false;   // remote addresses are virtual addresses (else MR offsets)
};

}  // namespace kvfabric::fabric
