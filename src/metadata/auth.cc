#include "metadata/auth.h"

#include "common/crypto.h"

namespace kvfabric::metadata::auth {
namespace {

std::string_view Label(Purpose p) {
  switch (p) {
    case Purpose::kHandshake: return "kvfabric/v1/handshake";
    case Purpose::kDescriptor: return "kvfabric/v1/descriptor-mac";
    case Purpose::kKeySeal: return "kvfabric/v1/memory-key-seal";
    case Purpose::kStoreWrite: return "kvfabric/v1/store-write";
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

}  // namespace kvfabric::metadata::auth
