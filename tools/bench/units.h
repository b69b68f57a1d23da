// Report units shared by the benchmarks: --report_unit=GB|GiB|Gb|MB|MiB|Mb|KB|KiB|Kb.
#pragma once

#include <string>

namespace kvfabric::bench {

// Bytes per second -> value in `unit` per second; false for an unknown unit.
inline bool ToUnit(double bytes_per_s, const std::string& unit, double* out) {
  struct U { const char* name; double div; };
  static const U units[] = {{"GB", 1e9}, {"GiB", 1073741824.0}, {"Gb", 1e9 / 8}, {"MB", 1e6},
                            {"MiB", 1048576.0}, {"Mb", 1e6 / 8}, {"KB", 1e3}, {"KiB", 1024.0},
                            {"Kb", 1e3 / 8}};
  for (const auto& u : units)
    if (unit == u.name) { *out = bytes_per_s / u.div; return true; }
  return false;
}

}  // namespace kvfabric::bench
