#include "store/verify_overlap.h"

#include <algorithm>

namespace kvfabric::store {

bool VerifyAsPagesLand(const std::string& mode, const std::vector<RailInfo>& rails) {
  if (mode == "on") return true;
  if (mode == "off") return false;
  return std::any_of(rails.begin(), rails.end(), [](const RailInfo& r) { return r.provider != "shm"; });
}

}  // namespace kvfabric::store
