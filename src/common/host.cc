#include "common/host.h"

#include <unistd.h>

#include <fstream>

namespace kvfabric::host {

const std::string& BootId() {
  static const std::string id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string s;
    std::getline(f, s);
    if (s.empty()) {
      char name[256] = {0};
      gethostname(name, sizeof(name) - 1);
      s = name;
    }
    return s;
  }();
  return id;
}

std::string Hostname() {
  char name[256] = {0};
  gethostname(name, sizeof(name) - 1);
  return name;
}

}  // namespace kvfabric::host
