#include "common/hex.h"

#include <cstdio>

namespace kvfabric::hex {

std::string Encode(std::string_view bin) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bin.size() * 2);
  for (unsigned char c : bin) {
    s.push_back(digits[c >> 4]);
    s.push_back(digits[c & 15]);
  }
  return s;
}

bool Decode(std::string_view text, std::string* out) {
  if (text.size() % 2 != 0) return false;
  auto val = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::string b;
  b.reserve(text.size() / 2);
  for (size_t i = 0; i < text.size(); i += 2) {
    int hi = val(text[i]), lo = val(text[i + 1]);
    if (hi < 0 || lo < 0) return false;
    b.push_back(static_cast<char>(hi * 16 + lo));
  }
  *out = std::move(b);
  return true;
}

std::string Address(uint64_t addr) {
  char b[32];
  std::snprintf(b, sizeof(b), "%#llx", static_cast<unsigned long long>(addr));
  return b;
}

}  // namespace kvfabric::hex
