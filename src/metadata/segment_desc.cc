#include "metadata/segment_desc.h"

#include <algorithm>
#include <nlohmann/json.hpp>

#include "common/hex.h"
#include "common/text.h"

namespace kvfabric::metadata {

using nlohmann::json;

namespace {

// More rails than any host carries: a descriptor listing more is malformed.
constexpr size_t kMaxDescriptorRails = 256;
constexpr size_t kMaxString = 4096;

// Field readers: each returns false (and names the field) on a wrong type.
struct Reader {
  std::string error;
  bool Str(const json& j, const char* k, std::string* out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_string() || it->get_ref<const std::string&>().size() > kMaxString)
      return Fail(k, "a string of at most 4096 bytes");
    *out = it->get<std::string>();
    return true;
  }
  bool U64(const json& j, const char* k, uint64_t* out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_unsigned()) return Fail(k, "an unsigned integer");
    *out = it->get<uint64_t>();
    return true;
  }
  bool I64(const json& j, const char* k, int64_t* out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_number_integer()) return Fail(k, "an integer");
    *out = it->get<int64_t>();
    return true;
  }
  bool Bool(const json& j, const char* k, bool* out) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_boolean()) return Fail(k, "a boolean");
    *out = it->get<bool>();
    return true;
  }
  const json* Arr(const json& j, const char* k) {
    auto it = j.find(k);
    if (it == j.end() || !it->is_array()) {
      Fail(k, "an array");
      return nullptr;
    }
    return &*it;
  }
  bool Fail(const std::string& k, const std::string& what) {
    if (error.empty()) error = "field '" + k + "' must be " + what;
    return false;
  }
};

}  // namespace

const BufferDesc* SegmentDesc::FindBuffer(uint64_t addr, uint64_t len) const {
  auto it = std::upper_bound(buffers.begin(), buffers.end(), addr,
                             [](uint64_t a, const BufferDesc& b) { return a < b.addr; });
  if (it == buffers.begin()) return nullptr;
  --it;
  if (addr - it->addr <= it->length && len <= it->length - (addr - it->addr)) return &*it;
  return nullptr;
}

bool IsStale(const SegmentDesc& held, const SegmentDesc& fetched) {
  return fetched.epoch < held.epoch || (fetched.epoch == held.epoch && fetched.generation < held.generation);
}

std::string ToJson(const SegmentDesc& d) {
  json j;
  j["version"] = SegmentDesc::kVersion;
  j["name"] = d.name;
  j["epoch"] = d.epoch;
  j["generation"] = d.generation;
  if (!d.seal_nonce.empty()) j["seal_nonce"] = hex::Encode(d.seal_nonce);
  j["host_id"] = d.host_id;
  j["pid"] = d.pid;
  j["rails"] = json::array();
  for (const auto& r : d.rails)
    j["rails"].push_back({{"provider", r.provider},
                          {"fabric", r.fabric},
                          {"domain", r.domain},
                          {"address", hex::Encode(r.address)},
                          {"virt_addr", r.virt_addr}});
  j["buffers"] = json::array();
  for (const auto& b : d.buffers) {
    json chunks = json::array();
    for (const auto& c : b.chunks) {
      json keys = json::array();
      for (const auto& k : c.keys) keys.push_back(k ? json(*k) : json(nullptr));
      chunks.push_back({{"addr", c.addr}, {"length", c.length}, {"keys", keys}});
    }
    json buffer = {{"addr", b.addr}, {"length", b.length}, {"location", b.location}, {"chunks", chunks}};
    if (b.read_only) buffer["read_only"] = true;
    j["buffers"].push_back(std::move(buffer));
  }
  return j.dump();
}

Status FromJson(std::string_view text, SegmentDesc* out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  auto bad = [](const std::string& m) { return Status::ProtocolError("segment descriptor: " + m); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  Reader rd;
  int64_t version = 0;
  SegmentDesc d;
  if (!rd.I64(j, "version", &version)) return bad(rd.error);
  if (version != SegmentDesc::kVersion)
    return bad(text::Format("version {} is not supported (this engine speaks {}); upgrade the older side", version,
                            SegmentDesc::kVersion));
  if (!rd.Str(j, "name", &d.name) || !rd.U64(j, "epoch", &d.epoch) ||
      !rd.Str(j, "host_id", &d.host_id) || !rd.I64(j, "pid", &d.pid))
    return bad(rd.error);
  if (j.contains("generation") && !rd.U64(j, "generation", &d.generation)) return bad(rd.error);
  if (j.contains("seal_nonce")) {
    std::string nonce_hex;
    if (!rd.Str(j, "seal_nonce", &nonce_hex)) return bad(rd.error);
    if (!hex::Decode(nonce_hex, &d.seal_nonce) || d.seal_nonce.empty()) return bad("seal_nonce is not hex");
  }
  const json* rails = rd.Arr(j, "rails");
  if (rails == nullptr) return bad(rd.error);
  if (rails->size() > kMaxDescriptorRails) return bad("more than 256 rails");
  for (const auto& r : *rails) {
    if (!r.is_object()) return bad("rails[] entries must be objects");
    RailDesc rd2;
    std::string hex;
    if (!rd.Str(r, "provider", &rd2.provider) || !rd.Str(r, "fabric", &rd2.fabric) ||
        !rd.Str(r, "domain", &rd2.domain) || !rd.Str(r, "address", &hex) ||
        !rd.Bool(r, "virt_addr", &rd2.virt_addr))
      return bad(rd.error);
    if (hex.empty() || !hex::Decode(hex, &rd2.address)) return bad("rail address is not hex");
    d.rails.push_back(std::move(rd2));
  }
  const json* bufs = rd.Arr(j, "buffers");
  if (bufs == nullptr) return bad(rd.error);
  uint64_t prev_end = 0;
  for (const auto& b : *bufs) {
    if (!b.is_object()) return bad("buffers[] entries must be objects");
    BufferDesc bd;
    if (!rd.U64(b, "addr", &bd.addr) || !rd.U64(b, "length", &bd.length) ||
        !rd.Str(b, "location", &bd.location))
      return bad(rd.error);
    if (b.contains("read_only") && !rd.Bool(b, "read_only", &bd.read_only)) return bad(rd.error);
    if (bd.length == 0 || bd.addr + bd.length < bd.addr) return bad("buffer range is empty or wraps");
    if (bd.addr < prev_end) return bad("buffers overlap or are not sorted");
    prev_end = bd.addr + bd.length;
    const json* chunks = rd.Arr(b, "chunks");
    if (chunks == nullptr) return bad(rd.error);
    uint64_t next = bd.addr;
    for (const auto& c : *chunks) {
      if (!c.is_object()) return bad("chunks[] entries must be objects");
      ChunkDesc cd;
      if (!rd.U64(c, "addr", &cd.addr) || !rd.U64(c, "length", &cd.length)) return bad(rd.error);
      if (cd.addr != next || cd.length == 0 || cd.length > prev_end - cd.addr)
        return bad("chunks must tile their buffer");
      next = cd.addr + cd.length;
      const json* keys = rd.Arr(c, "keys");
      if (keys == nullptr) return bad(rd.error);
      if (keys->size() != d.rails.size()) return bad("a chunk needs one key per rail");
      for (const auto& k : *keys) {
        if (k.is_null()) cd.keys.emplace_back();
        else if (k.is_number_unsigned()) cd.keys.emplace_back(k.get<uint64_t>());
        else return bad("keys must be unsigned integers or null");
      }
      bd.chunks.push_back(std::move(cd));
    }
    if (next != prev_end) return bad("chunks must tile their buffer");
    d.buffers.push_back(std::move(bd));
  }
  *out = std::move(d);
  return Status::OK();
}

}  // namespace kvfabric::metadata
