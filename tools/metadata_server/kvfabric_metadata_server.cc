// kvfabric-metadata-server: the http:// metadata store, in memory.
//   GET    <path>?key=K   200 and the value, or 404
//   PUT    <path>?key=K   stores the body (at most --max_value bytes)
//   DELETE <path>?key=K   200, or 404
// Engines started with metadata "http://HOST:PORT<path>" publish their
// segment descriptors here. It binds 127.0.0.1 unless told otherwise;
// --host ::1 (or [::1]) binds an IPv6 address, served as http://[::1]:PORT.
#include <httplib.h>

#include <CLI/CLI.hpp>
#include <csignal>
#include <cstdio>
#include <map>
#include <mutex>
#include <string>

namespace {
httplib::Server* g_server = nullptr;
void OnSignal(int) {
  if (g_server) g_server->stop();
}

// httplib binds an IPv6 address given bare, so "[::1]" is unwrapped.
std::string BareHost(const std::string& host) {
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') return host.substr(1, host.size() - 2);
  return host;
}

// host:port as a URL spells it: an IPv6 address in brackets.
std::string Authority(const std::string& host, int port) {
  const std::string h = host.find(':') != std::string::npos ? "[" + host + "]" : host;
  return h + ":" + std::to_string(port);
}
}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfabric-metadata-server: an in-memory key/value store for kvfabric's http:// metadata"};
  std::string host = "127.0.0.1", path = "/metadata";
  int port = 8080;
  size_t max_value = 16 << 20, max_keys = 1 << 16;
  app.add_option("--host", host, "address to bind: a name, an IPv4 or an IPv6 address (::1 or [::1])");
  app.add_option("--port", port, "port to bind; 0 picks a free one")->check(CLI::Range(0, 65535));
  app.add_option("--path", path, "URL path of the store");
  app.add_option("--max_value", max_value, "largest value accepted, in bytes");
  app.add_option("--max_keys", max_keys, "most keys held");
  CLI11_PARSE(app, argc, argv);

  std::mutex mu;
  std::map<std::string, std::string> kv;
  httplib::Server server;
  server.set_payload_max_length(max_value);
  auto key_of = [](const httplib::Request& req, httplib::Response& res, std::string* key) {
    if (!req.has_param("key") || req.get_param_value("key").empty()) {
      res.status = 400;
      res.set_content("missing ?key=\n", "text/plain");
      return false;
    }
    *key = req.get_param_value("key");
    return true;
  };
  server.Get(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (!key_of(req, res, &key)) return;
    std::lock_guard<std::mutex> g(mu);
    auto it = kv.find(key);
    if (it == kv.end()) {
      res.status = 404;
      res.set_content("no such key\n", "text/plain");
      return;
    }
    res.set_content(it->second, "application/json");
  });
  server.Put(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (!key_of(req, res, &key)) return;
    std::lock_guard<std::mutex> g(mu);
    if (kv.size() >= max_keys && kv.find(key) == kv.end()) {
      res.status = 507;
      res.set_content("store full (--max_keys)\n", "text/plain");
      return;
    }
    kv[key] = req.body;
    res.set_content("ok\n", "text/plain");
  });
  server.Delete(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (!key_of(req, res, &key)) return;
    std::lock_guard<std::mutex> g(mu);
    if (kv.erase(key) == 0) res.status = 404;
  });

  host = BareHost(host);
  const int asked = port;
  if (port == 0) port = server.bind_to_any_port(host);
  else if (!server.bind_to_port(host, port)) port = -1;
  if (port < 0) {
    std::fprintf(stderr,
                 "kvfabric-metadata-server: cannot bind %s: the port is in use or the address is not local "
                 "(or IPv6 is disabled); choose another --host or --port\n",
                 Authority(host, asked).c_str());
    return 1;
  }
  g_server = &server;
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  std::printf("kvfabric-metadata-server listening: metadata http://%s%s\n", Authority(host, port).c_str(),
              path.c_str());
  std::fflush(stdout);
  server.listen_after_bind();
  return 0;
}
