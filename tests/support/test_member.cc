// kvfabric-test-member: one node of the store's membership in a process of
// its own, so that a test can stop or kill it (SIGSTOP, SIGKILL) and watch
// its record expire. It joins the store CLUSTER of METADATA_URI as NAME,
// with records of TTL_S seconds (KVF_STORE_CLUSTER, KVF_STORE_MEMBER_TTL_S),
// prints "JOINED" (or "ERROR <status>") and renews its record until SIGTERM
// or SIGINT, then leaves and exits.
#include <signal.h>

#include <cstdio>
#include <memory>
#include <string>

#include "store/members/membership.h"

using namespace kvfabric;

int main(int argc, char** argv) {
  Settings settings;
  if (argc != 5 || !settings.Assign(std::string("KVF_STORE_CLUSTER=") + argv[3]).ok() ||
      !settings.Assign(std::string("KVF_STORE_MEMBER_TTL_S=") + argv[4]).ok()) {
    std::fprintf(stderr, "usage: %s METADATA_URI NAME CLUSTER TTL_S\n", argv[0]);
    return 2;
  }
  // Blocked before any thread starts, so only sigwait below takes them.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  std::unique_ptr<store::Membership> membership;
  Status s = store::OpenMembership(argv[1], settings, &membership);
  if (s.ok()) s = membership->Join({argv[2], std::string("segment-of-") + argv[2], 1 << 20});
  if (!s.ok()) {
    std::printf("ERROR %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("JOINED\n");
  std::fflush(stdout);
  int sig = 0;
  sigwait(&stop, &sig);
  return membership->Leave().ok() ? 0 : 1;
}
