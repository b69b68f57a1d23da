// Slicing: how a request's bytes are cut into pieces (one per rail choice)
// and pieces into slices (one fi_write/fi_read each). Pure functions over
// sizes and chunk lists; tested in slicing_test.cc without a fabric.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace kvfabric::engine {

// Striped pieces: about this many per candidate rail, so that rails taking
// pieces as they free up (PiecePlan::up_front) end within a piece of each
// other, a sixteenth of their share ...
inline constexpr size_t kPiecesPerRail = 16;
inline constexpr size_t kMinPiece = 64 << 10;
// ... and bounded so one piece moves well within KVF_RAIL_STALL_MS on a slow rail.
inline constexpr size_t kMaxPiece = 8 << 20;

// The size of the pieces a request of `length` bytes is striped in across
// `rails` candidate rails: `length` itself (no striping) when `threshold`
// is 0, `length` is below it, or there is one rail; else about
// length / (rails * kPiecesPerRail), clamped to [kMinPiece, kMaxPiece] and
// rounded up to a multiple of 4096. Every piece but the last has this size.
size_t StripePieceBytes(size_t length, size_t rails, size_t threshold);

// How a request's bytes are cut into pieces and the pieces given rails
// (KVF_RAIL_POLICY).
enum class RailPolicy {
  kAuto,         // striped from the threshold on (StripePieceBytes); each piece by load
  kLeastLoaded,  // whole; on the rail that would finish it first
  kRoundRobin,   // whole; on the next rail in turn, whatever their load
  kSplit,        // one piece per rail, each on its own rail in turn
};

// Striped pieces a request keeps in flight per candidate rail under kAuto;
// the rest go, one by one, to the rail whose piece completes (PiecePlan).
inline constexpr size_t kPiecesInFlightPerRail = 2;

struct PiecePlan {
  size_t piece = 0;      // bytes per piece; every piece but the last has this size
  bool by_load = true;   // each piece's rail by PickRail; false: in turn, from the request's rotation
  // Pieces posted at once (0: all). The others are posted as pieces
  // complete, each on the rail that completed one, so faster rails take
  // more of the request whatever their measured speeds say.
  size_t up_front = 0;
};

// The pieces of a request of `length` bytes to a peer reached by `rails`
// candidate rails under `policy` (`threshold`: KVF_STRIPE_THRESHOLD, for
// kAuto). kSplit cuts length / rails rounded up to a multiple of 4096 (at
// least 4096), so a request below 4096 x rails bytes takes fewer rails;
// one rail, or kLeastLoaded and kRoundRobin, leave the request whole. A
// striped kAuto request posts kPiecesInFlightPerRail x rails pieces at
// once when it has more.
// REQUIRES: rails >= 1.
PiecePlan PlanPieces(RailPolicy policy, size_t length, size_t rails, size_t threshold);

// The index of the chunk holding address `a`: the last chunk whose addr is
// at most `a`. Chunk is any type with `addr` and `length` members.
// REQUIRES: chunks non-empty, sorted by addr and contiguous;
// chunks.front().addr <= a < back().addr + back().length.
template <class Chunk>
size_t ChunkIndexAt(const std::vector<Chunk>& chunks, uint64_t a) {
  if (chunks.size() == 1) return 0;
  auto it = std::upper_bound(chunks.begin(), chunks.end(), a,
                             [](uint64_t x, const Chunk& c) { return x < static_cast<uint64_t>(c.addr); });
  return static_cast<size_t>(it - chunks.begin()) - 1;
}

// One slice of a piece: `length` bytes from local address `local` to remote
// address `remote`, inside local chunk `local_chunk` and remote chunk
// `remote_chunk` (indices into the lists given to CutAtChunks).
struct Cut {
  uint64_t local = 0;
  uint64_t remote = 0;
  size_t length = 0;
  size_t local_chunk = 0;
  size_t remote_chunk = 0;
};

// Cuts [local, +len) <-> [remote, +len) into slices of at most `max_msg`
// bytes that never cross a chunk edge of either side (a registration ends
// there), in address order, appended to `out`. Each slice is as long as
// those limits allow, so the count is minimal.
// REQUIRES: max_msg > 0; both chunk lists satisfy ChunkIndexAt's
// requirements and cover their whole range.
template <class LocalChunk, class RemoteChunk>
void CutAtChunks(const std::vector<LocalChunk>& local_chunks, const std::vector<RemoteChunk>& remote_chunks,
                 uint64_t local, uint64_t remote, size_t len, size_t max_msg, std::vector<Cut>* out) {
  if (len == 0) return;
  size_t lc = ChunkIndexAt(local_chunks, local);
  size_t rc = ChunkIndexAt(remote_chunks, remote);
  while (len > 0) {
    const uint64_t local_end = local_chunks[lc].addr + local_chunks[lc].length;
    const uint64_t remote_end = remote_chunks[rc].addr + remote_chunks[rc].length;
    const size_t n = static_cast<size_t>(std::min<uint64_t>({len, max_msg, local_end - local, remote_end - remote}));
    out->push_back({local, remote, n, lc, rc});
    local += n;
    remote += n;
    len -= n;
    if (local == local_end) ++lc;
    if (remote == remote_end) ++rc;
  }
}

}  // namespace kvfabric::engine
