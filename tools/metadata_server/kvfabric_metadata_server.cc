// kvfabric-metadata-server: the http:// metadata store, in memory.
//   GET    <path>?key=K        200 and the value, or 404
//   GET    <path>?prefix=P     200 and a JSON object of every key starting
//                              with P (all for P empty) -> its value (bytes
//                              that are not UTF-8 become U+FFFD); 507 when
//                              they hold more than --max_list_bytes
//   PUT    <path>?key=K        stores the body: 413 over --max_value (chunked
//                              bodies too), 507 past --max_keys or
//                              --max_total_bytes
//   PUT    <path>?key=K&ttl=S  the same, and the entry is gone S seconds
//                              (1-86400) after this PUT unless put again
//   DELETE <path>?key=K        200, or 404
// With --require_auth, PUT and DELETE must carry X-Kvf-Auth (a MAC under
// KVF_AUTH_TOKEN, metadata/auth.h; a PUT with a ttl signs "PUT ttl=S" as its
// method, so the ttl cannot be altered without the token): 401 without it,
// 403 when it is wrong or stale. GETs, listings included, stay open. Each
// connection serves one request, which must arrive and be answered within
// --request_timeout_ms, and one client address holds at most
// --max_per_client workers at once (deadline_server.h).
// Engines started with metadata "http://HOST:PORT<path>" publish their
// segment descriptors here. It binds 127.0.0.1 unless told otherwise;
// --host ::1 (or [::1]) binds an IPv6 address, served as http://[::1]:PORT.
#include <httplib.h>
#include <sys/socket.h>

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "deadline_server.h"
#include "kvfabric/settings.h"
#include "metadata/auth.h"
#include "value_table.h"

namespace {

using kvfabric::Status;
using kvfabric::metadata_server::DeadlineServer;
using kvfabric::metadata_server::ValueTable;

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

void Answer(httplib::Response& res, int status, const std::string& text) {
  res.status = status;
  res.set_content(text + "\n", "text/plain");
}

int64_t UnixSeconds() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// With a token, whether this write carries its MAC; a refusal is answered
// (401 without the header, 403 otherwise) and logged with the writer's
// address, since it means a misconfigured engine or an intruder.
// `ttl_s`: the PUT's ?ttl= (0 without), which its MAC covers.
bool Authorized(const std::string& token, const std::string& path, const std::string& key,
                const std::string& body, int64_t ttl_s, const httplib::Request& req, httplib::Response& res) {
  if (token.empty()) return true;
  namespace auth = kvfabric::metadata::auth;
  const std::string header = req.get_header_value(std::string(auth::kStoreAuthHeader));
  Status s = auth::CheckStoreWrite(token, header, auth::SignedMethod(req.method, ttl_s), path, key, body,
                                   UnixSeconds());
  if (s.ok()) return true;
  std::fprintf(stderr, "kvfabric-metadata-server: refused a write from %s: %s\n", req.remote_addr.c_str(),
               s.message().c_str());
  Answer(res, header.empty() ? 401 : 403, s.message());
  return false;
}

constexpr int64_t kMaxTtlS = 24 * 3600;

// A PUT's ?ttl=: 0 without one; false (answered 400) unless it is whole
// seconds, 1 to kMaxTtlS, in decimal digits.
bool TtlOf(const httplib::Request& req, httplib::Response& res, int64_t* ttl_s) {
  *ttl_s = 0;
  if (!req.has_param("ttl")) return true;
  const std::string t = req.get_param_value("ttl");
  const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), *ttl_s);
  if (t.empty() || t[0] == '+' || t[0] == '-' || ec != std::errc() || end != t.data() + t.size() || *ttl_s < 1 ||
      *ttl_s > kMaxTtlS) {
    Answer(res, 400, "ttl must be whole seconds, 1 to " + std::to_string(kMaxTtlS) + "; nothing was stored");
    return false;
  }
  return true;
}

// GET <path>?prefix=P: the entries as one JSON object.
void AnswerListing(ValueTable& table, const std::string& prefix, httplib::Response& res) {
  std::map<std::string, std::string> entries;
  Status s = table.List(prefix, &entries);
  if (!s.ok()) return Answer(res, 507, s.message());
  nlohmann::json j = nlohmann::json::object();
  for (auto& [key, value] : entries) j[key] = std::move(value);
  res.set_content(j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace), "application/json");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"kvfabric-metadata-server: an in-memory key/value store for kvfabric's http:// metadata"};
  std::string host = "127.0.0.1", path = "/metadata";
  int port = 8080;
  ValueTable::Limits table_limits;
  DeadlineServer::Limits server_limits;
  bool require_auth = false;
  app.add_option("--host", host, "address to bind: a name, an IPv4 or an IPv6 address (::1 or [::1])");
  app.add_option("--port", port, "port to bind; 0 picks a free one")->check(CLI::Range(0, 65535));
  app.add_option("--path", path, "URL path of the store");
  app.add_option("--max_value", table_limits.max_value,
                 "largest value accepted, in bytes (chunked bodies too); larger PUTs get 413")
      ->capture_default_str();
  app.add_option("--max_keys", table_limits.max_keys, "most keys held; a PUT of a new key past it gets 507")
      ->capture_default_str();
  app.add_option("--max_total_bytes", table_limits.max_total_bytes,
                 "most bytes held, keys and values of all entries; a PUT past it gets 507")
      ->capture_default_str();
  app.add_option("--max_list_bytes", table_limits.max_list_bytes,
                 "most bytes of keys and values one GET ?prefix= lists; a larger listing gets 507")
      ->capture_default_str();
  app.add_option("--request_timeout_ms", server_limits.request_timeout_ms,
                 "a request must arrive whole and be answered within this long of a worker taking its "
                 "connection, else the connection is closed (slow clients cannot hold workers)")
      ->check(CLI::Range(int64_t{10}, int64_t{3600} * 1000))
      ->capture_default_str();
  app.add_option("--threads", server_limits.threads,
                 "connections served at once; more wait until a worker is free")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_option("--max_per_client", server_limits.max_per_client,
                 "connections of one client address served at once; more are answered 503 (clients that keep "
                 "starting slow requests cannot hold every worker); where every client reaches the server "
                 "through one address (NAT), raise it to --threads")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app.add_flag("--require_auth", require_auth,
               "refuse PUT and DELETE without a MAC made with the token in the environment variable "
               "KVF_AUTH_TOKEN (the engines' own; never given on the command line, where ps shows it); the MAC "
               "of a PUT covers its ttl; GETs, listings included, stay open");
  CLI11_PARSE(app, argc, argv);

  std::string token;
  if (require_auth) {
    // Through the engines' settings table: the one reader of KVF_* variables.
    kvfabric::Settings settings;
    Status s = settings.ApplyEnvironment();
    if (!s.ok() || settings.auth_token.empty()) {
      std::fprintf(stderr, "kvfabric-metadata-server: --require_auth needs the shared token in KVF_AUTH_TOKEN%s%s\n",
                   s.ok() ? " (it is unset or empty)" : ": ", s.ok() ? "" : s.ToString().c_str());
      return 2;
    }
    token = settings.auth_token;
  }

  ValueTable table(table_limits);
  // A request holds at most its value and headers (64 KiB covers httplib's
  // request line and header limits many times).
  server_limits.max_request_bytes = table_limits.max_value + (64 << 10);
  DeadlineServer server(server_limits);
  // A declared Content-Length over the limit is refused (413) before its
  // body is read; httplib 0.11 ignores this bound for chunked bodies, which
  // the PUT handler counts itself.
  server.set_payload_max_length(table_limits.max_value);
  // httplib sets SO_REUSEPORT, with which a second server binds the same
  // port and requests land on either at random: a port in use is refused.
  server.set_socket_options([](int sock) {
    const int yes = 1;
    setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });

  auto key_of = [](const httplib::Request& req, httplib::Response& res, std::string* key) {
    if (!req.has_param("key") || req.get_param_value("key").empty()) {
      Answer(res, 400, "missing ?key=");
      return false;
    }
    *key = req.get_param_value("key");
    return true;
  };
  server.Get(path, [&](const httplib::Request& req, httplib::Response& res) {
    if (req.has_param("prefix")) {
      if (req.has_param("key")) return Answer(res, 400, "give ?key= or ?prefix=, not both");
      return AnswerListing(table, req.get_param_value("prefix"), res);
    }
    std::string key, value;
    if (!key_of(req, res, &key)) return;
    if (!table.Get(key, &value)) return Answer(res, 404, "no such key");
    res.set_content(value, "application/json");
  });
  server.Put(path, [&](const httplib::Request& req, httplib::Response& res, const httplib::ContentReader& read) {
    std::string key, body;
    int64_t ttl_s = 0;
    if (!key_of(req, res, &key) || !TtlOf(req, res, &ttl_s)) return;
    // Refused before the body is read, where the headers say enough: a
    // write without a MAC, and a declared length that cannot be stored.
    if (!token.empty() && !req.has_header(std::string(kvfabric::metadata::auth::kStoreAuthHeader)))
      return (void)Authorized(token, path, key, {}, ttl_s, req, res);
    if (req.has_header("Content-Length")) {
      const Status room = table.Admits(key, static_cast<size_t>(req.get_header_value<uint64_t>("Content-Length")));
      if (room.code() == Status::Code::kBusy) return Answer(res, 507, room.message() + "; nothing was stored");
    }
    bool too_large = false;
    const bool complete = read([&](const char* data, size_t n) {
      too_large = body.size() + n > table_limits.max_value;
      if (!too_large) body.append(data, n);
      return !too_large;
    });
    if (too_large || res.status == 413)
      return Answer(res, 413, "value larger than --max_value (" + std::to_string(table_limits.max_value) +
                                  " bytes); nothing was stored");
    if (!complete) return Answer(res, 400, "the request body did not arrive whole; nothing was stored");
    if (!Authorized(token, path, key, body, ttl_s, req, res)) return;
    Status s = table.Put(key, std::move(body), std::chrono::seconds(ttl_s));
    if (s.code() == Status::Code::kBusy) return Answer(res, 507, s.message());
    if (!s.ok()) return Answer(res, 413, s.message());
    Answer(res, 200, "ok");
  });
  server.Delete(path, [&](const httplib::Request& req, httplib::Response& res) {
    std::string key;
    if (!key_of(req, res, &key)) return;
    if (!Authorized(token, path, key, req.body, 0, req, res)) return;
    if (!table.Remove(key)) Answer(res, 404, "no such key");
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
  if (!token.empty())
    std::fprintf(stderr, "kvfabric-metadata-server: PUT and DELETE need a MAC made with KVF_AUTH_TOKEN\n");
  std::printf("kvfabric-metadata-server listening: metadata http://%s%s\n", Authority(host, port).c_str(),
              path.c_str());
  std::fflush(stdout);
  server.listen_after_bind();
  return 0;
}
