#include "store/wire/messages.h"

#include <array>
#include <utility>

#include "store/wire/wire.h"

namespace kvfabric::store {
namespace {

constexpr uint8_t kLastOp = static_cast<uint8_t>(Op::kCommit);

Status Malformed(std::string_view what) {
  return Status::ProtocolError("store: malformed " + std::string(what) +
                               " message (a peer of another version, or corruption on the wire)");
}

// Reads a reply's item count and checks that it is the one asked for.
bool CountIs(WireReader& r, size_t min_item_bytes, size_t expected) {
  uint32_t n = 0;
  return r.Count(min_item_bytes, &n) && n == expected;
}

// NodeStats on the wire: its fields in this order.
constexpr std::array kStatsFields = {
    &NodeStats::pool_bytes, &NodeStats::used_bytes, &NodeStats::reserved_bytes, &NodeStats::quarantined_bytes,
    &NodeStats::pages,      &NodeStats::pinned_pages, &NodeStats::evictions,    &NodeStats::removals,
    &NodeStats::overwrites, &NodeStats::refusals,   &NodeStats::puts,           &NodeStats::put_failures,
    &NodeStats::lookups,    &NodeStats::lookup_hits, &NodeStats::exists,    &NodeStats::pins_released,
};

void WriteStatus(WireWriter& w, const Status& s) {
  w.U8(static_cast<uint8_t>(s.code()));
  if (!s.ok()) w.Bytes(s.message());
}

// A status as WriteStatus wrote it: false for a short input or an unknown code.
bool ReadStatus(WireReader& r, Status* out) {
  uint8_t code = 0;
  std::string_view message;
  if (!r.U8(&code)) return false;
  if (code == 0) {
    *out = Status::OK();
    return true;
  }
  if (!r.Bytes(&message)) return false;
  switch (static_cast<Status::Code>(code)) {
#define KVF_STORE_STATUS_CASE_(number, Name, C_NAME, meaning) \
  case Status::Code::k##Name:                                  \
    *out = Status::Name(std::string(message));                 \
    return true;
    KVF_STATUS_CODES(KVF_STORE_STATUS_CASE_)
#undef KVF_STORE_STATUS_CASE_
    default:
      return false;
  }
}

// A status per item: their count, then each as WriteStatus writes it.
void WriteStatuses(WireWriter& w, const std::vector<Status>& statuses) {
  w.U32(static_cast<uint32_t>(statuses.size()));
  for (const Status& s : statuses) WriteStatus(w, s);
}

// Statuses as WriteStatuses wrote them, exactly `expected` of them.
bool ReadStatuses(WireReader& r, size_t expected, std::vector<Status>* out) {
  if (!CountIs(r, 1, expected)) return false;
  out->assign(expected, Status::OK());
  for (Status& s : *out)
    if (!ReadStatus(r, &s)) return false;
  return true;
}

// Locations: their count, then each one's found byte and, when found, its
// fields.
void WriteLocations(WireWriter& w, const std::vector<Location>& locations) {
  w.U32(static_cast<uint32_t>(locations.size()));
  for (const Location& l : locations) {
    w.U8(l.found ? 1 : 0);
    if (!l.found) continue;
    for (uint64_t v : {l.addr, l.length, l.generation, l.checksum.low, l.checksum.high, l.version}) w.U64(v);
  }
}

// Locations as WriteLocations wrote them: exactly `expected` of them, or
// none at all when `or_none`.
bool ReadLocations(WireReader& r, size_t expected, bool or_none, std::vector<Location>* out) {
  uint32_t n = 0;
  if (!r.Count(1, &n) || (n != expected && !(or_none && n == 0))) return false;
  out->assign(n, Location{});
  for (Location& l : *out) {
    uint8_t found = 0;
    r.U8(&found);
    if (found > 1) return false;
    l.found = found != 0;
    if (!l.found) continue;
    for (uint64_t* v : {&l.addr, &l.length, &l.generation, &l.checksum.low, &l.checksum.high, &l.version}) r.U64(v);
  }
  return true;
}

}  // namespace

Status CheckKey(std::string_view key) {
  if (key.empty()) return Status::InvalidArgument("store: an empty key");
  if (key.size() > kMaxKeyBytes)
    return Status::InvalidArgument("store: a key of " + std::to_string(key.size()) + " bytes (at most " +
                                   std::to_string(kMaxKeyBytes) + ")");
  return Status::OK();
}

Status PeekOp(std::string_view payload, Op* op) {
  if (payload.empty() || static_cast<uint8_t>(payload[0]) == 0 || static_cast<uint8_t>(payload[0]) > kLastOp)
    return Status::ProtocolError("store: unknown request" +
                                 (payload.empty() ? std::string(" (empty)")
                                                  : " operation " + std::to_string(static_cast<uint8_t>(payload[0]))) +
                                 " (a client of another version?)");
  *op = static_cast<Op>(payload[0]);
  return Status::OK();
}

std::string EncodeBare(Op op) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(op));
  return w.Take();
}

std::string EncodeKeys(Op op, const std::vector<std::string_view>& keys) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(op));
  w.U32(static_cast<uint32_t>(keys.size()));
  for (std::string_view k : keys) w.Bytes(k);
  return w.Take();
}

Status DecodeKeys(std::string_view payload, std::vector<std::string_view>* keys) {
  WireReader r(payload);
  uint8_t op = 0;
  uint32_t n = 0;
  r.U8(&op);
  if (!r.Count(4, &n)) return Malformed("keys");
  keys->resize(n);
  for (auto& k : *keys) r.Bytes(&k);
  return r.done() ? Status::OK() : Malformed("keys");
}

std::string EncodePut(const PutRequest& put) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(Op::kPut));
  w.Bytes(put.writer);
  w.U32(put.budget_ms);
  w.U8(static_cast<uint8_t>(put.hand_over));
  w.U32(static_cast<uint32_t>(put.items.size()));
  for (const PutItem& item : put.items) {
    w.Bytes(item.key);
    w.U32(static_cast<uint32_t>(item.sources.size()));
    for (const Extent& e : item.sources) {
      w.U64(e.addr);
      w.U64(e.length);
    }
  }
  return w.Take();
}

Status DecodePut(std::string_view payload, PutRequest* out) {
  WireReader r(payload);
  uint8_t op = 0;
  std::string_view writer;
  uint32_t n = 0;
  uint8_t hand_over = 0;
  r.U8(&op);
  r.Bytes(&writer);
  r.U32(&out->budget_ms);
  r.U8(&hand_over);
  if (hand_over > static_cast<uint8_t>(PutRequest::HandOver::kOver) || !r.Count(8, &n)) return Malformed("put");
  out->hand_over = static_cast<PutRequest::HandOver>(hand_over);
  out->writer = writer;
  out->items.resize(n);
  for (PutItem& item : out->items) {
    std::string_view key;
    uint32_t sources = 0;
    r.Bytes(&key);
    if (!r.Count(16, &sources)) return Malformed("put");
    item.key = key;
    item.sources.resize(sources);
    for (Extent& e : item.sources) {
      r.U64(&e.addr);
      r.U64(&e.length);
    }
  }
  return r.done() ? Status::OK() : Malformed("put");
}

std::string EncodeNodeInfo(const NodeInfo& info) {
  WireWriter w;
  w.Bytes(info.segment);
  for (uint64_t v : {info.pool_addr, info.pool_bytes, info.max_page_bytes, info.read_window_ms, info.epoch,
                     info.versions_addr, info.region_bytes})
    w.U64(v);
  w.Bytes(info.share.host);
  for (uint64_t v : {info.share.pid, info.share.fd, info.share.inode, info.share.bytes, info.age_ms}) w.U64(v);
  return w.Take();
}

Status DecodeNodeInfo(std::string_view payload, NodeInfo* out) {
  WireReader r(payload);
  std::string_view segment;
  r.Bytes(&segment);
  for (uint64_t* v : {&out->pool_addr, &out->pool_bytes, &out->max_page_bytes, &out->read_window_ms, &out->epoch,
                      &out->versions_addr, &out->region_bytes})
    r.U64(v);
  std::string_view host;
  r.Bytes(&host);
  for (uint64_t* v : {&out->share.pid, &out->share.fd, &out->share.inode, &out->share.bytes, &out->age_ms}) r.U64(v);
  out->segment = segment;
  out->share.host = host;
  return r.done() ? Status::OK() : Malformed("hello reply");
}

std::string EncodeLocations(const std::vector<Location>& locations) {
  WireWriter w;
  WriteLocations(w, locations);
  return w.Take();
}

Status DecodeLocations(std::string_view payload, size_t expected, std::vector<Location>* out) {
  WireReader r(payload);
  if (!ReadLocations(r, expected, false, out)) return Malformed("lookup reply");
  return r.done() ? Status::OK() : Malformed("lookup reply");
}

std::string EncodeBits(const std::vector<bool>& bits) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(bits.size()));
  for (bool b : bits) w.U8(b ? 1 : 0);
  return w.Take();
}

Status DecodeBits(std::string_view payload, size_t expected, std::vector<bool>* out) {
  WireReader r(payload);
  if (!CountIs(r, 1, expected)) return Malformed("reply");
  out->assign(expected, false);
  for (size_t i = 0; i < expected; ++i) {
    uint8_t b = 0;
    r.U8(&b);
    if (b > 1) return Malformed("reply");
    (*out)[i] = b != 0;
  }
  return r.done() ? Status::OK() : Malformed("reply");
}

std::string EncodeStatuses(const std::vector<Status>& statuses) {
  WireWriter w;
  WriteStatuses(w, statuses);
  return w.Take();
}

Status DecodeStatuses(std::string_view payload, size_t expected, std::vector<Status>* out) {
  WireReader r(payload);
  if (!ReadStatuses(r, expected, out)) return Malformed("put reply");
  return r.done() ? Status::OK() : Malformed("put reply");
}

std::string EncodeReserve(const ReserveRequest& reserve) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(Op::kReserve));
  w.U32(reserve.budget_ms);
  w.U32(static_cast<uint32_t>(reserve.items.size()));
  for (const ReserveItem& item : reserve.items) {
    w.Bytes(item.key);
    w.U64(item.length);
  }
  return w.Take();
}

Status DecodeReserve(std::string_view payload, ReserveRequest* out) {
  WireReader r(payload);
  uint8_t op = 0;
  uint32_t n = 0;
  r.U8(&op);
  r.U32(&out->budget_ms);
  if (!r.Count(12, &n)) return Malformed("reserve");
  out->items.resize(n);
  for (ReserveItem& item : out->items) {
    std::string_view key;
    r.Bytes(&key);
    r.U64(&item.length);
    item.key = key;
  }
  return r.done() ? Status::OK() : Malformed("reserve");
}

namespace {

void WriteSlots(WireWriter& w, const Slots& slots) {
  w.U64(slots.ticket);
  w.U64(slots.epoch);
  w.U32(static_cast<uint32_t>(slots.statuses.size()));
  for (size_t i = 0; i < slots.statuses.size(); ++i) {
    WriteStatus(w, slots.statuses[i]);
    if (slots.statuses[i].ok()) w.U64(slots.addrs[i]);
  }
}

// Slots as WriteSlots wrote them; `expected` items, or any number when
// `expected` is SIZE_MAX.
bool ReadSlots(WireReader& r, size_t expected, Slots* out) {
  r.U64(&out->ticket);
  r.U64(&out->epoch);
  uint32_t n = 0;
  if (!r.Count(1, &n) || (expected != SIZE_MAX && n != expected)) return false;
  out->statuses.assign(n, Status::OK());
  out->addrs.assign(n, 0);
  for (size_t i = 0; i < n; ++i) {
    if (!ReadStatus(r, &out->statuses[i])) return false;
    if (out->statuses[i].ok()) r.U64(&out->addrs[i]);
  }
  return true;
}

}  // namespace

std::string EncodeSlots(const Slots& slots) {
  WireWriter w;
  WriteSlots(w, slots);
  return w.Take();
}

Status DecodeSlots(std::string_view payload, size_t expected, Slots* out) {
  WireReader r(payload);
  if (!ReadSlots(r, expected, out)) return Malformed("reserve reply");
  return r.done() ? Status::OK() : Malformed("reserve reply");
}

std::string EncodeCommit(const CommitRequest& commit) {
  WireWriter w;
  w.U8(static_cast<uint8_t>(Op::kCommit));
  w.U64(commit.ticket);
  w.U32(static_cast<uint32_t>(commit.items.size()));
  for (const CommitItem& item : commit.items) {
    // The state, 2 for "written, its checksum follows"; then the key.
    const bool sum = item.written() && item.has_checksum;
    w.U8(sum ? 2 : static_cast<uint8_t>(item.state));
    if (sum) {
      w.U64(item.checksum.low);
      w.U64(item.checksum.high);
    }
    w.Bytes(item.key);
  }
  w.U32(static_cast<uint32_t>(commit.grant.size()));
  for (uint64_t length : commit.grant) w.U64(length);
  return w.Take();
}

Status DecodeCommit(std::string_view payload, CommitRequest* out) {
  WireReader r(payload);
  uint8_t op = 0;
  uint32_t n = 0;
  r.U8(&op);
  r.U64(&out->ticket);
  if (!r.Count(5, &n)) return Malformed("commit");
  out->items.assign(n, CommitItem{});
  for (CommitItem& item : out->items) {
    uint8_t state = 0;
    r.U8(&state);
    if (state > 3) return Malformed("commit");
    item.state = state == 2 ? CommitState::kWritten : static_cast<CommitState>(state);
    item.has_checksum = state == 2;
    if (item.has_checksum) {
      r.U64(&item.checksum.low);
      r.U64(&item.checksum.high);
    }
    std::string_view key;
    r.Bytes(&key);
    item.key = key;
  }
  if (!r.Count(8, &n)) return Malformed("commit");
  out->grant.assign(n, 0);
  for (uint64_t& length : out->grant) r.U64(&length);
  return r.done() ? Status::OK() : Malformed("commit");
}

std::string EncodeCommitReply(const CommitReply& reply) {
  WireWriter w;
  WriteStatuses(w, reply.statuses);
  WriteSlots(w, reply.granted);
  WriteLocations(w, reply.pages);
  return w.Take();
}

Status DecodeCommitReply(std::string_view payload, size_t expected, CommitReply* out) {
  WireReader r(payload);
  if (!ReadStatuses(r, expected, &out->statuses) || !ReadSlots(r, SIZE_MAX, &out->granted) ||
      !ReadLocations(r, expected, true, &out->pages))
    return Malformed("commit reply");
  return r.done() ? Status::OK() : Malformed("commit reply");
}

std::string EncodeCount(uint64_t n) {
  WireWriter w;
  w.U64(n);
  return w.Take();
}

Status DecodeCount(std::string_view payload, uint64_t* n) {
  WireReader r(payload);
  r.U64(n);
  return r.done() ? Status::OK() : Malformed("count reply");
}

std::string EncodeNodeStats(const NodeStats& stats) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(kStatsFields.size()));
  for (auto field : kStatsFields) w.U64(stats.*field);
  return w.Take();
}

Status DecodeNodeStats(std::string_view payload, NodeStats* out) {
  WireReader r(payload);
  if (!CountIs(r, 8, kStatsFields.size())) return Malformed("stats reply");
  for (auto field : kStatsFields) r.U64(&(out->*field));
  return r.done() ? Status::OK() : Malformed("stats reply");
}

}  // namespace kvfabric::store
