// Message text: the one way error messages and log lines are worded from
// values. Format takes fmt's "{}" syntax (as the log macros do); Range and
// RailLabel are how every message shows a byte range and a rail.
#pragma once

#include <fmt/format.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace kvfabric::text {

template <typename... Args>
std::string Format(fmt::format_string<Args...> format, Args&&... args) {
  return fmt::format(format, std::forward<Args>(args)...);
}

// "[0x7f12a0000000, +4096)": `len` bytes from `addr`.
std::string Range(uint64_t addr, uint64_t len);

// "rail 2 (tcp;ofi_rxm lo)": a local rail by index, provider and domain.
std::string RailLabel(size_t index, std::string_view provider, std::string_view domain);

// A size as a reader takes it in: "unlimited" for UINT64_MAX (what
// providers report when they set no bound), "N KiB/MiB/GiB/TiB" when `n` is
// a whole number of one of them (the largest), else "N bytes".
std::string Bytes(uint64_t n);

// The Levenshtein distance: single-character insertions, deletions and
// substitutions that turn `a` into `b`.
size_t EditDistance(std::string_view a, std::string_view b);

}  // namespace kvfabric::text
