#include "tests/support/servers.h"

#include <httplib.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <utility>
#include <vector>

namespace kvfabric::test {

namespace {

// The kernel's ephemeral range (/proc/sys/net/ipv4/ip_local_port_range),
// from which it picks the ports of outgoing connections and of listeners
// bound to port 0: libfabric's tcp provider takes some for every engine.
std::pair<int, int> EphemeralRange() {
  std::ifstream f("/proc/sys/net/ipv4/ip_local_port_range");
  int lo = 32768, hi = 60999;
  if (!(f >> lo >> hi)) return {32768, 60999};
  return {lo, hi};
}

// Whether a listener could bind host:port now (0: the kernel's pick).
int TryBind(const std::string& host, int port) {
  const bool v6 = host.find(':') != std::string::npos;
  sockaddr_storage a{};
  socklen_t len = v6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  if (v6) {
    auto* a6 = reinterpret_cast<sockaddr_in6*>(&a);
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET6, host.c_str(), &a6->sin6_addr) != 1) return 0;
  } else {
    auto* a4 = reinterpret_cast<sockaddr_in*>(&a);
    a4->sin_family = AF_INET;
    a4->sin_port = htons(static_cast<uint16_t>(port));
    if (inet_pton(AF_INET, host.c_str(), &a4->sin_addr) != 1) return 0;
  }
  int fd = socket(a.ss_family, SOCK_STREAM, 0);
  if (fd < 0) return 0;
  const bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), len) == 0 &&
                  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) return 0;
  return ntohs(v6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
}

}  // namespace

int FreePort(const std::string& host) {
  // A port the kernel hands out (bind to 0) can be handed out again, to an
  // engine's connection or listener, between this call and the server's own
  // bind, which then fails with "Address already in use". Ports below the
  // ephemeral range are only ever taken by a bind that names them.
  const auto [lo, hi] = EphemeralRange();
  (void)hi;
  const int floor = 10000;
  if (lo - floor >= 1000) {
    // Never the same port twice in one process: a test often names several
    // servers before it starts any, and a port stays free until its server
    // binds it.
    static std::mutex mu;
    static std::mt19937 rng(std::random_device{}() ^ static_cast<unsigned>(getpid()));
    static std::set<int> given;
    std::uniform_int_distribution<int> pick(floor, lo - 1);
    std::lock_guard lock(mu);
    for (int i = 0; i < 200; ++i) {
      const int candidate = pick(rng);
      if (given.count(candidate) != 0) continue;
      if (int port = TryBind(host, candidate); port != 0) {
        given.insert(port);
        return port;
      }
    }
  }
  return TryBind(host, 0);
}

bool StopProcess(pid_t pid) {
  if (kill(pid, SIGSTOP) != 0) return false;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  const std::string tasks = "/proc/" + std::to_string(pid) + "/task";
  while (std::chrono::steady_clock::now() < until) {
    bool all = true;
    std::error_code ec;
    for (const auto& task : std::filesystem::directory_iterator(tasks, ec)) {
      std::ifstream f(task.path() / "stat");
      std::string line;
      std::getline(f, line);
      // "pid (comm) S ...": the state follows the last ')'.
      const size_t close = line.rfind(')');
      if (close == std::string::npos || close + 2 >= line.size() || (line[close + 2] != 'T' && line[close + 2] != 't'))
        all = false;
    }
    if (all && !ec) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

bool WaitHttpReady(const std::string& host, int port, const std::string& method, const std::string& path, pid_t pid) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < until) {
    int st;
    if (waitpid(pid, &st, WNOHANG) == pid) return false;
    httplib::Client c(host, port);
    c.set_connection_timeout(0, 200000);
    auto r = method == "POST" ? c.Post(path, "{}", "application/json") : c.Get(path);
    if (r && r->status < 500) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return false;
}

namespace {

// `env`: "NAME=value" words added to the child's environment.
pid_t Spawn(const std::vector<std::string>& argv, const std::vector<std::string>& env = {}) {
  pid_t pid = fork();
  if (pid == 0) {
    for (const auto& e : env) putenv(const_cast<char*>(e.c_str()));
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    // Quiet: the servers' logs would drown the test output.
    freopen("/dev/null", "w", stdout);
    freopen("/dev/null", "w", stderr);
    execvp(args[0], args.data());
    _exit(127);
  }
  return pid;
}

}  // namespace

Server::~Server() {
  if (pid > 0) {
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
  if (!data_dir.empty()) std::filesystem::remove_all(data_dir);
}

std::unique_ptr<Server> StartEtcd(std::string* error) {
  const char* bin = "etcd";
  if (system("command -v etcd >/dev/null 2>&1") != 0) {
    *error = "no etcd binary on PATH (Debian: apt install etcd-server; make deps installs it)";
    return nullptr;
  }
  auto s = std::make_unique<Server>();
  char tmpl[] = "/tmp/kvf-etcd-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) {
    *error = "mkdtemp failed";
    return nullptr;
  }
  s->data_dir = tmpl;
  const int client = FreePort(), peer = FreePort();
  const std::string c = "http://127.0.0.1:" + std::to_string(client), p = "http://127.0.0.1:" + std::to_string(peer);
  s->pid = Spawn({bin, "--name", "kvf-test", "--data-dir", s->data_dir, "--listen-client-urls", c,
                  "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
                  "--initial-cluster", "kvf-test=" + p});
  if (!WaitHttpReady("127.0.0.1", client, "POST", "/v3/maintenance/status", s->pid)) {
    *error = "etcd did not start on " + c;
    return nullptr;
  }
  s->uri = "etcd://127.0.0.1:" + std::to_string(client);
  s->port = client;
  return s;
}

std::unique_ptr<Server> StartHttpMetadataServer(std::string* error, const std::vector<std::string>& flags,
                                                const std::string& auth_token) {
  auto s = std::make_unique<Server>();
  const int port = FreePort();
  std::vector<std::string> argv = {KVF_METADATA_SERVER_PATH, "--port", std::to_string(port)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  std::vector<std::string> env;
  if (!auth_token.empty()) env.push_back("KVF_AUTH_TOKEN=" + auth_token);
  s->pid = Spawn(argv, env);
  if (!WaitHttpReady("127.0.0.1", port, "GET", "/metadata?key=probe", s->pid)) {
    *error = std::string("kvfabric-metadata-server did not start (") + KVF_METADATA_SERVER_PATH + ")";
    return nullptr;
  }
  s->uri = "http://127.0.0.1:" + std::to_string(port) + "/metadata";
  s->port = port;
  return s;
}

const std::string& SharedMetadataUri(const std::string& kind, std::string* error) {
  static std::mutex mu;
  static std::map<std::string, std::unique_ptr<Server>> servers;
  static std::map<std::string, std::string> errors;
  static const std::string none;
  std::lock_guard<std::mutex> g(mu);
  if (!servers.count(kind) && !errors.count(kind)) {
    std::string err;
    auto s = kind == "etcd" ? StartEtcd(&err) : StartHttpMetadataServer(&err);
    if (s) servers[kind] = std::move(s);
    else errors[kind] = err;
  }
  if (errors.count(kind)) {
    *error = errors[kind];
    return none;
  }
  return servers[kind]->uri;
}

}  // namespace kvfabric::test
