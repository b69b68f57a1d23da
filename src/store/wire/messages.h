// The store's control messages: what a client asks a node and what the node
// answers, one request and one reply per node per batch (a batch's keys go
// to their homes in one message each). Payloads of the control channel
// (control_client.h); the encoding is wire.h's. Every Decode checks the
// whole payload: a truncated, oversized or trailing-bytes message is a
// ProtocolError naming the message, and the output is then unspecified.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "kvfabric/status.h"
#include "store/wire/checksum.h"

namespace kvfabric::store {

// The longest key, in bytes; keys are never empty.
constexpr size_t kMaxKeyBytes = 4096;
// Whether `key` may be stored: OK, or InvalidArgument saying why.
Status CheckKey(std::string_view key);

enum class Op : uint8_t {
  kHello = 1,      // -> NodeInfo
  kLookup = 2,     // keys -> a Location per key
  kExists = 3,     // keys -> a bit per key
  kPut = 4,        // PutRequest -> a Status per key
  kRemove = 5,     // keys -> a bit per key (there was a page)
  kRemoveAll = 6,  // -> count removed
  kStats = 7,      // -> NodeStats
  kPin = 8,        // keys -> a bit per key (pinned)
  kUnpin = 9,      // keys -> a bit per key (was pinned)
  kTouch = 10,     // keys -> nothing: pages read without a lookup become most recently used
  kReserve = 11,   // ReserveRequest -> Slots: a PUT by WRITE, first step
  kCommit = 12,    // CommitRequest -> a Status per key: its second step
};

// The operation of a request: its first byte. ProtocolError for an empty
// payload or an unknown operation.
Status PeekOp(std::string_view payload, Op* op);

// How a process on the node's host maps the node's pool (SharedPool); an
// empty `host`: the pool is not shared.
struct PoolShare {
  std::string host;    // SharedPoolHostKey() of the node
  uint64_t pid = 0;    // the node's process
  uint64_t fd = 0;     // the pool's memfd in that process
  uint64_t inode = 0;  // that memfd's inode: a reused pid's fd is not taken for it
  uint64_t bytes = 0;  // the file's length: the pool, then the region versions' page (SharedPool)
  bool operator==(const PoolShare&) const = default;
};

// A node as it describes itself.
struct NodeInfo {
  std::string segment;      // its engine's segment name: where the pool is read
  uint64_t pool_addr = 0;   // the pool's address in the node's segment
  uint64_t pool_bytes = 0;
  uint64_t max_page_bytes = 0;
  uint64_t read_window_ms = 0;  // a lookup's locations may be read this long after it
  uint64_t epoch = 0;           // differs at every start of the node
  // The pool's region versions (RegionVersions): kRegions 64-bit words at
  // versions_addr in the node's segment, region r covering the pool's
  // bytes [r * region_bytes, (r + 1) * region_bytes), then the epoch.
  uint64_t versions_addr = 0;
  uint64_t region_bytes = 0;
  PoolShare share;
  // How long the node had served when it answered: a member that entered
  // the store less than KVF_STORE_HANDOFF_MS ago may not hold yet the keys
  // that now home on it (MemberSnapshot::Recent).
  uint64_t age_ms = 0;
};

// Where a key's page is: found, its bytes at [addr, addr + length) in the
// node's segment, their checksum and the page's generation.
struct Location {
  bool found = false;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint64_t generation = 0;
  Checksum checksum;
  // The version of the page's region when the lookup answered: while the
  // region's version is still this, the page is still the key's.
  uint64_t version = 0;
  bool operator==(const Location&) const = default;
};

// A piece of a page in the writer's registered memory.
struct Extent {
  uint64_t addr = 0;
  uint64_t length = 0;
};

struct PutItem {
  std::string key;
  std::vector<Extent> sources;  // the page is their bytes, in order
};

// A PUT: the node reads each page from `writer` (an engine segment name)
// with one-sided READ into a slot of its pool.
struct PutRequest {
  std::string writer;
  uint32_t budget_ms = 0;  // the writer waits this long for the reply: the node gives up its READs sooner
  std::vector<PutItem> items;
  // A hand-over's PUT (Handoff) never stores a key removed on its home
  // within the window. kIfAbsent: a key that has a page when its READ ends
  // keeps it, and the item is OK without being stored; kOver: the page
  // replaces the home's (a page written on the previous home after it
  // handed an older one over).
  enum class HandOver : uint8_t { kNo = 0, kIfAbsent = 1, kOver = 2 };
  HandOver hand_over = HandOver::kNo;
};

// A PUT by WRITE (KVF_STORE_PUT_MODE=push), first step: the node reserves
// a slot per item and the writer WRITEs the page into it, then commits.
struct ReserveItem {
  std::string key;
  uint64_t length = 0;
};
struct ReserveRequest {
  uint32_t budget_ms = 0;  // the writer commits within this long: the node abandons the slots after it
  std::vector<ReserveItem> items;
};
// The node's answer: per item OK and the slot's address in its segment, or
// why it was refused. `ticket` names the reservation in the commit (0 when
// nothing was reserved); `epoch` is the node's (NodeInfo::epoch): a writer
// whose view of the node has another one holds a segment of its engine's
// earlier life.
struct Slots {
  uint64_t ticket = 0;
  uint64_t epoch = 0;
  std::vector<Status> statuses;
  std::vector<uint64_t> addrs;
};
// Second step, one item per slot of the reservation, in its order: whether
// the writer's WRITE of it completed, and the checksum of each written
// page when the writer took it (its bytes were in host memory). The node
// commits those pages (checksumming the others itself), frees at once the
// slots the writer never started a WRITE into, and holds the others back
// (a WRITE given up on may still land). A granted slot (see `grant`) names
// the key of its page here; a reserved one has its key already.
enum class CommitState : uint8_t {
  kNotWritten = 0,  // a WRITE was started and did not complete
  kWritten = 1,
  kUnused = 3,      // no WRITE was ever started into it
};
struct CommitItem {
  CommitState state = CommitState::kNotWritten;
  bool has_checksum = false;  // kWritten only
  Checksum checksum;
  std::string key;  // a granted slot's page: its key; empty otherwise
  bool written() const { return state == CommitState::kWritten; }
};
struct CommitRequest {
  uint64_t ticket = 0;
  std::vector<CommitItem> items;
  // Slots the writer asks for its next PUT to this node, by length: the
  // reply grants them under a new ticket (as many as the node gives), so
  // that PUT WRITEs at once and costs one round trip, not two.
  std::vector<uint64_t> grant;
};
// A home grants at most this many slots per commit, of at most this share
// of its pool (1/kGrantPoolShare): a writer asks for no more.
constexpr size_t kMaxGrantSlots = 1024;
constexpr uint64_t kGrantPoolShare = 16;
// Every grant a home holds open at once, together, takes at most this share
// of its pool (1/kGrantsPoolShare): writers' grants never take the pool from
// the pages already stored.
constexpr uint64_t kGrantsPoolShare = 4;
// A writer starts no WRITE into a grant later than this after it came (a
// stream of PUTs uses it within milliseconds); the home holds it this long
// and its deadline more, then abandons it.
constexpr int64_t kGrantUsableMs = 1000;
// The commit's answer: a status per item, the slots granted, and where
// each committed page lies, as a lookup would answer it at that moment
// (found false for an item not committed): the writer remembers it, so
// its own GETs of the page read at once (its region versions confirm it).
struct CommitReply {
  std::vector<Status> statuses;
  Slots granted;  // ticket 0: none
  std::vector<Location> pages;  // empty (none known), or one per item
};

struct NodeStats {
  uint64_t pool_bytes = 0, used_bytes = 0, reserved_bytes = 0, quarantined_bytes = 0;
  uint64_t pages = 0, pinned_pages = 0;
  uint64_t evictions = 0, removals = 0, overwrites = 0, refusals = 0;
  uint64_t puts = 0, put_failures = 0, lookups = 0, lookup_hits = 0, exists = 0;
  uint64_t pins_released = 0;  // pins whose connection closed before their unpin
  // What the node served, in bytes of pages; kept by the node's own process
  // (its metrics), not sent in the stats reply.
  uint64_t stored_bytes = 0, located_bytes = 0, touched_bytes = 0;
};

// Requests.
std::string EncodeKeys(Op op, const std::vector<std::string_view>& keys);  // kLookup, kExists, kRemove, kPin, kUnpin, kTouch
std::string EncodePut(const PutRequest& put);
std::string EncodeReserve(const ReserveRequest& reserve);
std::string EncodeCommit(const CommitRequest& commit);
std::string EncodeCommitReply(const CommitReply& reply);
std::string EncodeBare(Op op);  // kRemoveAll, kStats, kHello
// The keys of a keys request (views into `payload`).
Status DecodeKeys(std::string_view payload, std::vector<std::string_view>* keys);
Status DecodePut(std::string_view payload, PutRequest* out);
Status DecodeReserve(std::string_view payload, ReserveRequest* out);
Status DecodeCommit(std::string_view payload, CommitRequest* out);
// `expected`: the items of the commit.
Status DecodeCommitReply(std::string_view payload, size_t expected, CommitReply* out);

// Replies.
std::string EncodeNodeInfo(const NodeInfo& info);
Status DecodeNodeInfo(std::string_view payload, NodeInfo* out);
std::string EncodeLocations(const std::vector<Location>& locations);
Status DecodeLocations(std::string_view payload, size_t expected, std::vector<Location>* out);
std::string EncodeBits(const std::vector<bool>& bits);
Status DecodeBits(std::string_view payload, size_t expected, std::vector<bool>* out);
std::string EncodeStatuses(const std::vector<Status>& statuses);
Status DecodeStatuses(std::string_view payload, size_t expected, std::vector<Status>* out);
std::string EncodeSlots(const Slots& slots);
Status DecodeSlots(std::string_view payload, size_t expected, Slots* out);
std::string EncodeCount(uint64_t n);
Status DecodeCount(std::string_view payload, uint64_t* n);
std::string EncodeNodeStats(const NodeStats& stats);
Status DecodeNodeStats(std::string_view payload, NodeStats* out);

}  // namespace kvfabric::store
