#include "store/messages.h"

#include <array>
#include <utility>

#include "store/wire.h"

namespace kvfabric::store {
namespace {

constexpr uint8_t kLastOp = static_cast<uint8_t>(Op::kTouch);

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
    &NodeStats::lookups,    &NodeStats::lookup_hits, &NodeStats::exists,
};

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
  r.U8(&op);
  r.Bytes(&writer);
  r.U32(&out->budget_ms);
  if (!r.Count(8, &n)) return Malformed("put");
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
  return w.Take();
}

Status DecodeNodeInfo(std::string_view payload, NodeInfo* out) {
  WireReader r(payload);
  std::string_view segment;
  r.Bytes(&segment);
  for (uint64_t* v : {&out->pool_addr, &out->pool_bytes, &out->max_page_bytes, &out->read_window_ms, &out->epoch,
                      &out->versions_addr, &out->region_bytes})
    r.U64(v);
  out->segment = segment;
  return r.done() ? Status::OK() : Malformed("hello reply");
}

std::string EncodeLocations(const std::vector<Location>& locations) {
  WireWriter w;
  w.U32(static_cast<uint32_t>(locations.size()));
  for (const Location& l : locations) {
    w.U8(l.found ? 1 : 0);
    if (!l.found) continue;
    for (uint64_t v : {l.addr, l.length, l.generation, l.checksum.low, l.checksum.high, l.version}) w.U64(v);
  }
  return w.Take();
}

Status DecodeLocations(std::string_view payload, size_t expected, std::vector<Location>* out) {
  WireReader r(payload);
  if (!CountIs(r, 1, expected)) return Malformed("lookup reply");
  out->assign(expected, Location{});
  for (Location& l : *out) {
    uint8_t found = 0;
    r.U8(&found);
    if (found > 1) return Malformed("lookup reply");
    l.found = found != 0;
    if (!l.found) continue;
    for (uint64_t* v : {&l.addr, &l.length, &l.generation, &l.checksum.low, &l.checksum.high, &l.version}) r.U64(v);
  }
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
  w.U32(static_cast<uint32_t>(statuses.size()));
  for (const Status& s : statuses) {
    w.U8(static_cast<uint8_t>(s.code()));
    if (!s.ok()) w.Bytes(s.message());
  }
  return w.Take();
}

Status DecodeStatuses(std::string_view payload, size_t expected, std::vector<Status>* out) {
  WireReader r(payload);
  if (!CountIs(r, 1, expected)) return Malformed("put reply");
  out->clear();
  out->reserve(expected);
  for (size_t i = 0; i < expected && r.ok(); ++i) {
    uint8_t code = 0;
    std::string_view message;
    r.U8(&code);
    if (code == 0) {
      out->push_back(Status::OK());
      continue;
    }
    r.Bytes(&message);
    switch (static_cast<Status::Code>(code)) {
#define KVF_STORE_STATUS_CASE_(number, Name, C_NAME, meaning) \
  case Status::Code::k##Name:                                  \
    out->push_back(Status::Name(std::string(message)));        \
    break;
      KVF_STATUS_CODES(KVF_STORE_STATUS_CASE_)
#undef KVF_STORE_STATUS_CASE_
      default:
        return Malformed("put reply");
    }
  }
  return r.done() ? Status::OK() : Malformed("put reply");
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
