#include "engine/slicing.h"

namespace kvfabric::engine {

size_t StripePieceBytes(size_t length, size_t rails, size_t threshold) {
  if (threshold == 0 || length < threshold || rails < 2) return length;
  const size_t want = rails * kPiecesPerRail;
  const size_t piece = std::clamp((length + want - 1) / want, kMinPiece, kMaxPiece);
  return (piece + 4095) & ~size_t{4095};
}

}  // namespace kvfabric::engine
