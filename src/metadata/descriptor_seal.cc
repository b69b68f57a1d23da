#include "metadata/descriptor_seal.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "common/crypto.h"
#include "common/hex.h"
#include "metadata/auth.h"

namespace kvfabric::metadata {
namespace {

using nlohmann::json;

constexpr size_t kSealNonceSize = 16;

// The 8-byte masks of every key of `d`, in order (chunk by chunk, rail by
// rail); both directions XOR with them.
void MaskKeys(SegmentDesc* d, std::string_view seal_key) {
  uint64_t chunk_number = 0;
  for (auto& b : d->buffers)
    for (auto& c : b.chunks) {
      for (uint32_t rail = 0; rail < c.keys.size(); ++rail) {
        if (!c.keys[rail]) continue;
        std::string input = d->seal_nonce;
        input.append(reinterpret_cast<const char*>(&rail), sizeof(rail));
        input.append(reinterpret_cast<const char*>(&chunk_number), sizeof(chunk_number));
        const std::string pad = crypto::HmacSha256(seal_key, input);
        uint64_t mask;
        std::memcpy(&mask, pad.data(), sizeof(mask));
        *c.keys[rail] ^= mask;
      }
      ++chunk_number;
    }
}

}  // namespace

std::string SealDescriptor(const SegmentDesc& d, std::string_view token) {
  if (token.empty()) return ToJson(d);
  SegmentDesc sealed = d;
  sealed.seal_nonce = auth::NewNonce().substr(0, kSealNonceSize);
  MaskKeys(&sealed, auth::DeriveKey(token, auth::Purpose::kKeySeal));
  const std::string body = ToJson(sealed);
  json j;
  j["sealed"] = 1;
  j["body"] = body;
  j["mac"] = hex::Encode(crypto::HmacSha256(auth::DeriveKey(token, auth::Purpose::kDescriptor), body));
  return j.dump();
}

Status OpenDescriptor(std::string_view text, std::string_view token, SegmentDesc* out) {
  json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  const bool sealed = j.is_object() && j.contains("sealed");
  if (!sealed) {
    if (!token.empty())
      return Status::PermissionDenied(
          "the descriptor is not authenticated: that engine has no KVF_AUTH_TOKEN; set the same token on both sides");
    return FromJson(text, out);
  }
  if (token.empty())
    return Status::PermissionDenied("the descriptor is sealed with a KVF_AUTH_TOKEN: set the same token on this engine");
  auto body = j.find("body");
  auto mac = j.find("mac");
  std::string mac_bytes;
  if (j["sealed"] != 1 || body == j.end() || !body->is_string() || mac == j.end() || !mac->is_string() ||
      !hex::Decode(mac->get<std::string>(), &mac_bytes))
    return Status::ProtocolError("sealed descriptor: needs \"sealed\": 1, a string \"body\" and a hex \"mac\"");
  const std::string& body_text = body->get_ref<const std::string&>();
  if (!crypto::SameBytes(mac_bytes, crypto::HmacSha256(auth::DeriveKey(token, auth::Purpose::kDescriptor), body_text)))
    return Status::PermissionDenied(
        "the descriptor's MAC does not match: it was tampered with, or sealed with another KVF_AUTH_TOKEN");
  SegmentDesc d;
  KVF_RETURN_IF_ERROR(FromJson(body_text, &d));
  if (d.seal_nonce.size() != kSealNonceSize)
    return Status::ProtocolError("sealed descriptor: seal_nonce must be 16 bytes");
  MaskKeys(&d, auth::DeriveKey(token, auth::Purpose::kKeySeal));
  d.seal_nonce.clear();
  *out = std::move(d);
  return Status::OK();
}

}  // namespace kvfabric::metadata
