// Facts about this host and process used to recognise same-host and same-process peers.
#pragma once

#include <string>

namespace kvfabric::host {

// /proc/sys/kernel/random/boot_id: two processes with the same id share a
// kernel, so the shm provider (and process_vm_writev) can reach each other.
const std::string& BootId();
std::string Hostname();

}  // namespace kvfabric::host
