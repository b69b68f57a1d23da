// What the shared secret (KVF_AUTH_TOKEN) is used for, and how. The token
// itself never leaves the process: every use is through a key derived from
// it for one purpose (HMAC-SHA256 of the token and a purpose label), so a
// value seen on the wire for one purpose says nothing of the others.
//
//   handshake   mutual challenge-response: each side proves it holds the
//               token by a MAC over both sides' fresh nonces
//   descriptor  a MAC over a published segment descriptor (p2p, etcd, http)
//   key seal    memory keys inside a descriptor, masked so a reader of the
//               metadata store without the token cannot use them
//   store write a MAC over a write to kvfabric-metadata-server
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvfabric::metadata::auth {

constexpr size_t kNonceSize = 32;

enum class Purpose { kHandshake, kDescriptor, kKeySeal, kStoreWrite };

// HMAC-SHA256(token, label of `purpose`): a 32-byte key for that purpose only.
std::string DeriveKey(std::string_view token, Purpose purpose);

// A fresh random nonce of kNonceSize bytes.
std::string NewNonce();

// The proofs of the handshake (see handshake.h for the exchange). They bind
// both nonces and the direction, so a proof cannot be replayed on another
// connection nor reflected back to its sender.
std::string ServerProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce);
std::string ClientProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce);

}  // namespace kvfabric::metadata::auth
