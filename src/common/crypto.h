// The few cryptographic primitives kvfabric uses, from the system's OpenSSL
// (libcrypto): random bytes, HMAC-SHA256 and a comparison whose time says
// nothing about where two secrets differ. Nothing here is hand-written crypto.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "kvfabric/status.h"

namespace kvfabric::crypto {

constexpr size_t kMacSize = 32;  // HMAC-SHA256 output, raw bytes

// Fills `out` with `n` bytes from the operating system's CSPRNG.
// Unavailable (with OpenSSL's reason) only if the generator fails.
Status RandomBytes(void* out, size_t n);
// A random value; aborts the process if the CSPRNG fails, since every caller
// (memory keys, nonces, epochs) would otherwise be guessable.
uint64_t RandomU64();

// HMAC-SHA256(key, data): 32 raw bytes.
std::string HmacSha256(std::string_view key, std::string_view data);
// SHA-256(data): 32 raw bytes.
std::string Sha256(std::string_view data);

// Equal sizes and equal bytes; the time taken depends only on the sizes.
bool SameBytes(std::string_view a, std::string_view b);

}  // namespace kvfabric::crypto
