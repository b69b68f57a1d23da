#include "common/text.h"

#include "common/hex.h"

namespace kvfabric::text {

std::string Range(uint64_t addr, uint64_t len) { return Format("[{}, +{})", hex::Address(addr), len); }

std::string RailLabel(size_t index, std::string_view provider, std::string_view domain) {
  return Format("rail {} ({} {})", index, provider, domain);
}

}  // namespace kvfabric::text
