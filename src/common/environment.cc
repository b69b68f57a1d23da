#include "common/environment.h"

namespace kvfabric {

std::recursive_mutex& EnvironmentLock() {
  static std::recursive_mutex lock;
  return lock;
}

}  // namespace kvfabric
