#include "store/client/verify_overlap.h"

#include <algorithm>

namespace kvfabric::store {

bool VerifyAsPageLands(const std::string& mode, const std::vector<RailInfo>& rails, uint64_t page_bytes,
                       uint64_t piece_bytes) {
  if (mode == "on") return true;
  if (mode == "off" || rails.empty()) return false;
  return page_bytes > piece_bytes ||
         std::any_of(rails.begin(), rails.end(), [](const RailInfo& r) { return r.provider != "shm"; });
}

}  // namespace kvfabric::store
