// Rail choice: which of a peer's rails takes the next piece of a request.
// Pure functions over what the engine read from its rails and the peer at
// one instant (RailView); no fabric, clock or lock inside, so every rule is
// tested without a NIC (rail_choice_test.cc).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace kvfabric::engine {

// Local rails an engine may open (EFA hosts carry up to 32 NICs); rail
// indices are below it, and near-rail masks are 64-bit.
inline constexpr size_t kMaxLocalRails = 64;

// One local rail as rail choice sees it.
struct RailView {
  bool in_service = true;   // not out of service after a stall (see fabric::RailHealth)
  bool up_for_peer = true;  // no operation to this peer failed on it within KVF_RAIL_RETRY_MS
  bool near = true;         // near the local memory (its NUMA node, or its GPU's PCIe switch)
  double speed = 0;         // bytes/s it drained lately; 0 when not measured recently
  uint64_t load_bytes = 0;  // bytes queued or in flight on it
};

// How one local rail could carry one request's memory.
struct PairView {
  bool local_in_place = false;  // the local memory is registered on this rail
  bool local_staged = false;    // it is GPU memory this rail would stage (no FI_HMEM here)
  int peer_rail = -1;           // the peer rail it reaches that holds the remote memory's key, or -1
};

// The rails of `rails` on which both ends hold the request's memory (a
// peer rail with its key, and the local memory registered or stageable),
// in `rails`' order, written to `out`; returns how many. Rails that move
// the local memory in place are taken alone when there are any: staging
// is for when nothing else reaches the peer's memory.
// REQUIRES: pairs[r] describes rail r for every r in `rails`; `out` has
// room for rails.size() entries.
size_t PairedRails(std::span<const size_t> rails, const PairView* pairs, size_t* out);

// The rails of `usable` (local rail indices, in preference order) that may
// take new work, written to `out` in `usable`'s order; returns how many.
// A rail qualifies when it is in service, up for the peer and not `exclude`
// (-1: none). Near rails are taken alone when any near rail qualifies; the
// others only when none does. With `fallback`, when no rail qualifies, every
// usable rail but `exclude` (a rail that failed a while ago beats failing
// the request outright).
// REQUIRES: views[r] describes rail r for every r in `usable`; `out` has
// room for usable.size() entries.
size_t CandidateRails(std::span<const size_t> usable, const RailView* views, int exclude, bool fallback,
                      size_t* out);

// The candidate that should finish `len` more bytes first: the least
// (load_bytes + planned[r] + len) / speed, where planned[r] counts the bytes
// this request already assigned to rail r. Speeds count only when every
// candidate was measured and the fastest is at least 1.3 times the slowest
// (rails of 2,2,2,1 Gbit/s); on even rails measurement noise alone would
// cost throughput, so there the bytes alone decide. Ties go to the first tied
// candidate in the order that starts at cand[first % cand.size()] and wraps
// around. Callers rotate `first` from request to request (from a different
// start in each process): with ties always going to the lowest rail,
// engines that each post a few pages at once to the same peer (the homes of
// one store PUT reading from its writer) would all leave the same last
// rail short, and every batch would wait for the fuller ones.
// REQUIRES: !cand.empty(); views and planned indexed by rail index.
size_t PickRail(std::span<const size_t> cand, const RailView* views, size_t len, const uint64_t* planned,
                size_t first = 0);

}  // namespace kvfabric::engine
