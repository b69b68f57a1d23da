#include "store/checksum.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>

namespace kvfabric::store {

Checksum ChecksumOf(std::span<const ByteRange> pieces, uint64_t length) {
  XXH128_hash_t h;
  if (pieces.size() == 1) {
    h = XXH3_128bits(pieces[0].data, std::min<uint64_t>(length, pieces[0].length));
  } else {
    std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(), &XXH3_freeState);
    XXH3_128bits_reset(state.get());
    uint64_t left = length;
    for (const ByteRange& p : pieces) {
      if (left == 0) break;
      const size_t n = static_cast<size_t>(std::min<uint64_t>(left, p.length));
      XXH3_128bits_update(state.get(), p.data, n);
      left -= n;
    }
    h = XXH3_128bits_digest(state.get());
  }
  return Checksum{h.low64, h.high64};
}

}  // namespace kvfabric::store
