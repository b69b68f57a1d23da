// Base64 (RFC 4648, with padding): etcd's JSON gateway carries keys and
// values this way.
#pragma once

#include <string>
#include <string_view>

namespace kvfabric::base64 {

std::string Encode(std::string_view bytes);
// False (and *out unspecified) on a character outside the alphabet or a bad length.
bool Decode(std::string_view text, std::string* out);

}  // namespace kvfabric::base64
