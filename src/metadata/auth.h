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
//   member      a MAC over a store node's member record (etcd, http)
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "kvfabric/status.h"

namespace kvfabric::metadata::auth {

constexpr size_t kNonceSize = 32;

enum class Purpose { kHandshake, kDescriptor, kKeySeal, kStoreWrite, kMemberRecord };

// HMAC-SHA256(token, label of `purpose`): a 32-byte key for that purpose only.
std::string DeriveKey(std::string_view token, Purpose purpose);

// The seal of a store node's member record: 64 hex digits of
// HMAC-SHA256(DeriveKey(token, kMemberRecord), name \n segment \n pool_bytes
// in decimal). A node name holds no newline (it is host:port), so no two
// records share an input.
std::string MemberRecordMac(std::string_view token, std::string_view name, std::string_view segment,
                            uint64_t pool_bytes);

// A fresh random nonce of kNonceSize bytes.
std::string NewNonce();

// The proofs of the handshake (see handshake.h for the exchange). They bind
// both nonces and the direction, so a proof cannot be replayed on another
// connection nor reflected back to its sender.
std::string ServerProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce);
std::string ClientProof(std::string_view token, std::string_view client_nonce, std::string_view server_nonce);

// Writes to kvfabric-metadata-server (PUT and DELETE; GETs are open) carry
//   X-Kvf-Auth: t=<unix seconds>,mac=<64 hex digits>
// and a server started with --require_auth refuses any other, and any whose
// time is more than kStoreWriteMaxSkewS from its own clock. Within that
// window a captured write can be replayed (the same value under the same
// key, or the same DELETE): the MAC keeps out writers without the token,
// not an observer of the network.
inline constexpr std::string_view kStoreAuthHeader = "X-Kvf-Auth";
inline constexpr int64_t kStoreWriteMaxSkewS = 300;

// HMAC-SHA256(DeriveKey(token, kStoreWrite),
//             method \n path \n key \n timestamp \n SHA-256(body)): 32 raw
// bytes. `method` is "PUT", "DELETE" or, for a PUT with ?ttl=S, "PUT ttl=S"
// (SignedMethod), `path` the store's URL path ("/metadata"), `key` the
// decoded ?key= value, `timestamp` the decimal unix seconds as sent. Only the
// key may hold a newline, and every field after it has a fixed form (digits,
// then 32 bytes), so no two writes share an input.
std::string StoreWriteMac(std::string_view token, std::string_view method, std::string_view path,
                          std::string_view key, std::string_view timestamp, std::string_view body);

// The method a write signs: `method`, or "PUT ttl=S" for a PUT whose entry
// expires S seconds after it (ttl_s > 0). The ttl is thus covered by the MAC:
// without the token it can be neither changed, added nor stripped, and a
// write without one signs the plain method, as a writer that knows no ttl does.
std::string SignedMethod(std::string_view method, int64_t ttl_s);

// The X-Kvf-Auth value for a write signed at `unix_seconds`.
std::string StoreWriteHeader(std::string_view token, std::string_view method, std::string_view path,
                             std::string_view key, int64_t unix_seconds, std::string_view body);

// OK when `header` (the X-Kvf-Auth value, "" if absent) is a valid MAC of
// this write under `token` and its time is within kStoreWriteMaxSkewS of
// `now_unix_seconds`; else PermissionDenied saying which check failed
// (missing, malformed, stale or wrong MAC). The MAC is compared in constant
// time.
Status CheckStoreWrite(std::string_view token, std::string_view header, std::string_view method,
                       std::string_view path, std::string_view key, std::string_view body,
                       int64_t now_unix_seconds);

}  // namespace kvfabric::metadata::auth
