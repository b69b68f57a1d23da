#include "engine/slicing.h"

namespace kvfabric::engine {

size_t StripePieceBytes(size_t length, size_t rails, size_t threshold) {
  if (threshold == 0 || length < threshold || rails < 2) return length;
  const size_t want = rails * kPiecesPerRail;
  const size_t piece = std::clamp((length + want - 1) / want, kMinPiece, kMaxPiece);
  return (piece + 4095) & ~size_t{4095};
}

PiecePlan PlanPieces(RailPolicy policy, size_t length, size_t rails, size_t threshold) {
  switch (policy) {
    case RailPolicy::kLeastLoaded:
      return {length, true};
    case RailPolicy::kRoundRobin:
      return {length, false};
    case RailPolicy::kSplit: {
      if (rails < 2) return {length, false};
      const size_t piece = std::max<size_t>(4096, ((length + rails - 1) / rails + 4095) & ~size_t{4095});
      return {std::min(piece, std::max<size_t>(length, 1)), false};
    }
    case RailPolicy::kAuto:
      break;
  }
  const size_t piece = StripePieceBytes(length, rails, threshold);
  const size_t pieces = piece == 0 ? 1 : (length + piece - 1) / piece;
  const size_t up_front = kPiecesInFlightPerRail * rails;
  return {piece, true, pieces > up_front ? up_front : 0};
}

}  // namespace kvfabric::engine
