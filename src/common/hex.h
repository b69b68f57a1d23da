// Hex text for binary blobs (endpoint addresses in descriptors) and addresses
// in messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace kvfabric::hex {

std::string Encode(std::string_view bin);
// False (and `out` untouched) unless `text` is an even number of hex digits.
bool Decode(std::string_view text, std::string* out);
// "0x7f12a0000000": how error messages show an address.
std::string Address(uint64_t addr);

}  // namespace kvfabric::hex
