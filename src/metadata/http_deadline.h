// A whole-request deadline for cpp-httplib's client, shared by the http and
// etcd stores. httplib's own timeouts bound each connect, each read and
// each write, not a request: a server that sends one byte per read timeout
// could hold OpenSegment for as long as it kept sending.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <functional>

namespace kvfabric::metadata {

// Runs `send`, one request on `client`, and ends it once `timeout_ms` has
// passed since this call: connecting, sending and reading the whole response
// all count. `client`'s connect, read and write timeouts are set to
// `timeout_ms` as well. A request past the deadline is stopped by shutting
// its socket down (httplib::Client::stop, from a watchdog thread), so its
// Result is an error and `*expired` is true; otherwise `*expired` is false.
// The call returns within about timeout_ms plus 20 ms (name resolution
// excepted: getaddrinfo cannot be interrupted; stores are named by address).
httplib::Result SendWithDeadline(httplib::Client* client, int64_t timeout_ms,
                                 const std::function<httplib::Result()>& send, bool* expired);

}  // namespace kvfabric::metadata
