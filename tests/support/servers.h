// Real metadata servers for the tests, started on loopback by the tests
// themselves: etcd (Debian's etcd-server) and kvfabric-metadata-server.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

namespace kvfabric::test {

class Server {
 public:
  ~Server();
  std::string uri;  // "etcd://127.0.0.1:P" or "http://127.0.0.1:P/metadata"
  int port = 0;     // P
  pid_t pid = -1;
  std::string data_dir;  // removed at the end
};

// A TCP port of `host` (an IPv4 or IPv6 literal: "127.0.0.1", "::1") that
// was free a moment ago (for servers that need a fixed port, such as a
// target restarted under the same name), chosen below the kernel's
// ephemeral range so no engine's connection takes it before the server
// binds it; 0 if none, e.g. no IPv6 loopback.
int FreePort(const std::string& host = "127.0.0.1");

// Sends SIGSTOP to `pid` and waits (at most 2 s) until every thread of it
// is stopped: a stop lands asynchronously, and a process still running for
// a moment after kill() returns can answer what a test expects to hang.
// False when it is not stopped by then.
bool StopProcess(pid_t pid);

// Whether an HTTP server on host:port answers `method` `path` (any status
// below 500) within 20 s, while process `pid` runs.
bool WaitHttpReady(const std::string& host, int port, const std::string& method, const std::string& path, pid_t pid);

// Null with `error` saying why (for example, no etcd binary: tests skip).
std::unique_ptr<Server> StartEtcd(std::string* error);
// kvfabric-metadata-server with `flags` added to its command line and,
// when `auth_token` is not empty, KVF_AUTH_TOKEN set in its environment.
std::unique_ptr<Server> StartHttpMetadataServer(std::string* error, const std::vector<std::string>& flags = {},
                                                const std::string& auth_token = "");

// One of each for the whole test binary, started on first use; "" and the
// reason when it cannot start. `kind` is "etcd" or "http".
const std::string& SharedMetadataUri(const std::string& kind, std::string* error);

}  // namespace kvfabric::test
