#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <climits>
#include <cstdio>
#include <cstdlib>

namespace kvfabric::crypto {
namespace {

std::string OpenSslError() {
  char buf[256];
  ERR_error_string_n(ERR_get_error(), buf, sizeof(buf));
  return buf;
}

}  // namespace

Status RandomBytes(void* out, size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  while (n > 0) {
    const int step = n > INT_MAX ? INT_MAX : static_cast<int>(n);
    if (RAND_bytes(p, step) != 1)
      return Status::Unavailable("the system random generator failed (OpenSSL RAND_bytes): " + OpenSslError());
    p += step;
    n -= static_cast<size_t>(step);
  }
  return Status::OK();
}

uint64_t RandomU64() {
  uint64_t v = 0;
  Status s = RandomBytes(&v, sizeof(v));
  if (!s.ok()) {
    std::fprintf(stderr, "kvfabric: %s\n", s.ToString().c_str());
    std::abort();
  }
  return v;
}

std::string HmacSha256(std::string_view key, std::string_view data) {
  unsigned char mac[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
       reinterpret_cast<const unsigned char*>(data.data()), data.size(), mac, &len);
  return std::string(reinterpret_cast<char*>(mac), len);
}

std::string Sha256(std::string_view data) {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  EVP_Digest(data.data(), data.size(), md, &len, EVP_sha256(), nullptr);
  return std::string(reinterpret_cast<char*>(md), len);
}

bool SameBytes(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace kvfabric::crypto
