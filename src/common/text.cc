#include "common/text.h"

#include <algorithm>
#include <vector>

#include "common/hex.h"

namespace kvfabric::text {

std::string Range(uint64_t addr, uint64_t len) { return Format("[{}, +{})", hex::Address(addr), len); }

std::string RailLabel(size_t index, std::string_view provider, std::string_view domain) {
  return Format("rail {} ({} {})", index, provider, domain);
}

std::string Bytes(uint64_t n) {
  if (n == UINT64_MAX) return "unlimited";
  static constexpr std::string_view kUnits[] = {"TiB", "GiB", "MiB", "KiB"};
  for (int i = 0; i < 4; ++i) {
    const uint64_t unit = uint64_t{1} << (10 * (4 - i));
    if (n != 0 && n % unit == 0) return Format("{} {}", n / unit, kUnits[i]);
  }
  return Format("{} bytes", n);
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t above = row[j];
      row[j] = std::min({above + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1] ? 1 : 0)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace kvfabric::text
