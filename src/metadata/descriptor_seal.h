// Sealed descriptors: with a shared secret (KVF_AUTH_TOKEN), what an engine
// hands to peers and writes to a metadata store is authenticated, and its
// memory keys are usable only by holders of the secret.
//
//   {"sealed": 1, "body": "<descriptor JSON>", "mac": "<hex>"}
//
// `mac` is HMAC-SHA256 over `body` with the descriptor key derived from the
// token (auth.h). In `body`, each memory key is XORed with 8 bytes of
// HMAC-SHA256(key-seal key, seal_nonce | rail | chunk number), the nonce
// fresh at each sealing; a reader of etcd or of the wire without the token
// sees neither the keys nor a way to forge a descriptor.
#pragma once

#include <string>
#include <string_view>

#include "kvfabric/status.h"
#include "metadata/segment_desc.h"

namespace kvfabric::metadata {

// The text to publish or send for `d`: sealed when `token` is set, the plain
// JSON of segment_desc.h otherwise.
std::string SealDescriptor(const SegmentDesc& d, std::string_view token);

// Reads what SealDescriptor wrote, with the reader's `token`:
//  - token set, sealed: the MAC must match (else PermissionDenied, "tampered
//    or sealed with another token") and the keys are unmasked;
//  - token set, plain: PermissionDenied (the peer has no token);
//  - no token, sealed: PermissionDenied (set KVF_AUTH_TOKEN);
//  - no token, plain: FromJson.
// Malformed text is a ProtocolError. `out` is untouched on any error.
Status OpenDescriptor(std::string_view text, std::string_view token, SegmentDesc* out);

}  // namespace kvfabric::metadata
