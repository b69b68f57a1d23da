#include "fabric/signal_handlers.h"

#include <dlfcn.h>
#include <signal.h>

#include <cstring>
#include <mutex>

#include "common/log.h"

namespace kvfabric::fabric {

namespace {

struct Watched {
  int signal;
  const char* name;
};

constexpr Watched kWatched[] = {{SIGSEGV, "SIGSEGV"}, {SIGBUS, "SIGBUS"}, {SIGILL, "SIGILL"},
                                {SIGABRT, "SIGABRT"}, {SIGINT, "SIGINT"}, {SIGTERM, "SIGTERM"}};

// The code address of a handler, or null for SIG_DFL and SIG_IGN.
void* HandlerAddress(const struct sigaction& action) {
  if (action.sa_flags & SA_SIGINFO) return reinterpret_cast<void*>(action.sa_sigaction);
  if (action.sa_handler == SIG_DFL || action.sa_handler == SIG_IGN) return nullptr;
  return reinterpret_cast<void*>(action.sa_handler);
}

bool LiesIn(void* code, const std::string& library) {
  Dl_info where{};
  if (code == nullptr || dladdr(code, &where) == 0 || where.dli_fname == nullptr) return false;
  return std::strstr(where.dli_fname, library.c_str()) != nullptr;
}

}  // namespace

std::vector<std::string> RestoreSignalsHandledBy(const std::string& library) {
  std::vector<std::string> restored;
  for (const Watched& w : kWatched) {
    struct sigaction current{};
    if (sigaction(w.signal, nullptr, &current) != 0) continue;
    if (!LiesIn(HandlerAddress(current), library)) continue;
    struct sigaction fallback{};
    fallback.sa_handler = SIG_DFL;
    sigemptyset(&fallback.sa_mask);
    if (sigaction(w.signal, &fallback, nullptr) == 0) restored.emplace_back(w.name);
  }
  return restored;
}

void RestoreForeignSignalHandlers() {
  static std::once_flag once;
  std::call_once(once, [] {
    std::vector<std::string> restored = RestoreSignalsHandledBy("libinfinipath");
    if (restored.empty()) return;
    std::string names;
    for (const std::string& n : restored) names += (names.empty() ? "" : " ") + n;
    KVF_LOG_DEBUG(
        "libinfinipath (loaded with libfabric's PSM provider) had installed handlers that exit(1) "
        "on {}: put back to the default action (set IPATH_NO_BACKTRACE=1 to keep it from "
        "installing them)",
        names);
  });
}

}  // namespace kvfabric::fabric
