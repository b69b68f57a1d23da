// The process's CPU time, for the bench tools' CPU per operation.
#pragma once

#include <sys/resource.h>

namespace kvfabric::tools {

// User + system time of every thread of this process so far, in seconds.
inline double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

}  // namespace kvfabric::tools
