// VerifyOverlap: whether a GET checksums a page it reads as the page lands,
// while the rest of its batch still moves, or once the whole batch has
// landed (KVF_STORE_VERIFY_OVERLAP). A page longer than a piece is then read
// in pieces and hashed piece by piece as they land. The policy is pure: a
// function of the setting, the engine's rails and the page's length.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvfabric/engine.h"

namespace kvfabric::store {

// Contract:
//  - `mode` "on": true; "off": false (lower case, as Settings keeps it);
//  - "auto" (and anything else, which Settings refuses before this): true
//    when at least one of `rails` is not shm; when every one is shm, true
//    only for a page longer than `piece_bytes`; false when there is no rail.
// Why short pages on shm alone wait: there this process's own progress
// thread copies the pages, and checksums taken beside it compete with
// those copies for the host's cores (128 KiB pages on 2 vCPUs: 0.65 to
// 0.55 of the bare READ). A long page is hashed piece by piece while each
// piece is still in cache, instead of read back from memory once it has
// landed whole, and that gain is larger (2 MiB pages over shm: 0.59 to
// 0.83). Where a NIC or the network moves the bytes, the checksums hide
// under the transfer (the emulated fabric: 0.83 to 0.95).
bool VerifyAsPageLands(const std::string& mode, const std::vector<RailInfo>& rails, uint64_t page_bytes,
                       uint64_t piece_bytes);

}  // namespace kvfabric::store
