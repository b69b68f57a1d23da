#include "metadata/auth.h"

#include <charconv>

#include "common/crypto.h"
#include "common/hex.h"
#include "common/text.h"

namespace kvfabric::metadata::auth {
namespace {

std::string_view Label(Purpose p) {
  switch (p) {
    case Purpose::kHandshake: return "kvfabric/v1/handshake";
    case Purpose::kDescriptor: return "kvfabric/v1/descriptor-mac";
    case Purpose::kKeySeal: return "kvfabric/v1/memory-key-seal";
    case Purpose::kStoreWrite: return "kvfabric/v1/store-write";
    case Purpose::kMemberRecord: return "kvfabric/v1/member-record";
  }
  return "kvfabric/v1/unknown";
}

std::string Proof(std::string_view token, std::string_view direction, std::string_view client_nonce,
                  std::string_view server_nonce) {
  std::string msg;
  msg.reserve(direction.size() + 1 + client_nonce.size() + server_nonce.size());
  msg.append(direction).push_back('\0');
  msg.append(client_nonce).append(server_nonce);
  return crypto::HmacSha256(DeriveKey(token, Purpose::kHandshake), msg);
}

}  // namespace

std::string DeriveKey(std::string_view token, Purpose purpose) { return crypto::HmacSha256(token, Label(purpose)); }

std::string MemberRecordMac(std::string_view token, std::string_view name, std::string_view segment,
                            uint64_t pool_bytes) {
  const std::string msg = text::Format("{}\n{}\n{}", name, segment, pool_bytes);
  return hex::Encode(crypto::HmacSha256(DeriveKey(token, Purpose::kMemberRecord), msg));
}

std::string NewNonce() {
  std::string n(kNonceSize, '\0');
  for (size_t i = 0; i < kNonceSize; i += 8) {
    const uint64_t v = crypto::RandomU64();
    n.replace(i, 8, reinterpret_cast<const char*>(&v), 8);
  }
  return n;
}

std::string ServerProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce) {
  return Proof(token, "server", client_nonce, server_nonce);
}

std::string ClientProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce) {
  return Proof(token, "client", client_nonce, server_nonce);
}

std::string StoreWriteMac(std::string_view token, std::string_view method, std::string_view path,
                          std::string_view key, std::string_view timestamp, std::string_view body) {
  std::string msg;
  msg.reserve(method.size() + path.size() + key.size() + timestamp.size() + 4 + crypto::kMacSize);
  msg.append(method).push_back('\n');
  msg.append(path).push_back('\n');
  msg.append(key).push_back('\n');
  msg.append(timestamp).push_back('\n');
  msg.append(crypto::Sha256(body));
  return crypto::HmacSha256(DeriveKey(token, Purpose::kStoreWrite), msg);
}

std::string SignedMethod(std::string_view method, int64_t ttl_s) {
  return ttl_s > 0 ? text::Format("{} ttl={}", method, ttl_s) : std::string(method);
}

std::string StoreWriteHeader(std::string_view token, std::string_view method, std::string_view path,
                             std::string_view key, int64_t unix_seconds, std::string_view body) {
  const std::string t = std::to_string(unix_seconds);
  return "t=" + t + ",mac=" + hex::Encode(StoreWriteMac(token, method, path, key, t, body));
}

Status CheckStoreWrite(std::string_view token, std::string_view header, std::string_view method,
                       std::string_view path, std::string_view key, std::string_view body,
                       int64_t now_unix_seconds) {
  const std::string what = text::Format("{} of key '{}'", method, key);
  if (header.empty())
    return Status::PermissionDenied(text::Format(
        "{}: no {} header; this store requires writes signed with KVF_AUTH_TOKEN (set it in the writer)", what,
        kStoreAuthHeader));
  // "t=<digits>,mac=<64 hex>"
  std::string_view t, mac_hex;
  const size_t comma = header.find(',');
  if (header.rfind("t=", 0) == 0 && comma != std::string_view::npos && header.compare(comma + 1, 4, "mac=") == 0) {
    t = header.substr(2, comma - 2);
    mac_hex = header.substr(comma + 5);
  }
  int64_t seconds = 0;
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), seconds);
  std::string mac;
  if (t.empty() || ec != std::errc() || end != t.data() + t.size() || seconds < 0 || !hex::Decode(mac_hex, &mac) ||
      mac.size() != crypto::kMacSize)
    return Status::PermissionDenied(text::Format(
        "{}: malformed {} header (expected t=<unix seconds>,mac=<64 hex digits>)", what, kStoreAuthHeader));
  const int64_t skew = seconds > now_unix_seconds ? seconds - now_unix_seconds : now_unix_seconds - seconds;
  if (skew > kStoreWriteMaxSkewS)
    return Status::PermissionDenied(text::Format(
        "{}: signed at unix time {}, {} s from this server's clock (at most {} s allowed); synchronize the "
        "clocks (NTP) of the writer and the metadata server",
        what, seconds, skew, kStoreWriteMaxSkewS));
  if (!crypto::SameBytes(mac, StoreWriteMac(token, method, path, key, t, body)))
    return Status::PermissionDenied(
        text::Format("{}: wrong MAC; the writer's KVF_AUTH_TOKEN differs from the metadata server's", what));
  return Status::OK();
}

}  // namespace kvfabric::metadata::auth
