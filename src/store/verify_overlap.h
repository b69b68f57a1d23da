// VerifyOverlap: whether a GET checksums the pages it reads from remembered
// locations as each one lands, while the rest of its batch still moves, or
// once the whole batch has landed (KVF_STORE_VERIFY_OVERLAP). The policy is
// pure: a function of the setting and the engine's rails.
#pragma once

#include <string>
#include <vector>

#include "kvfabric/engine.h"

namespace kvfabric::store {

// Contract:
//  - `mode` "on": true; "off": false (lower case, as Settings keeps it);
//  - "auto" (and anything else, which Settings refuses before this): true
//    when at least one of `rails` is not shm, false when every one is shm
//    or there is none.
// Why shm alone is off: there this process's own progress thread copies
// the pages, and the checksums compete with those copies for the host's
// cores (on 2 vCPUs a GET fell from 0.65 to 0.55 of the bare READ); where
// a NIC or the network moves the bytes, the checksums hide under the
// transfer (the emulated fabric: 0.83 to 0.95 of the bare READ).
bool VerifyAsPagesLand(const std::string& mode, const std::vector<RailInfo>& rails);

}  // namespace kvfabric::store
