#include "fabric/signal_handlers.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

namespace kvfabric::fabric {
namespace {

void Ignore(int) {}

std::string ObjectOf(void* code) {
  Dl_info where{};
  EXPECT_NE(dladdr(code, &where), 0);
  return where.dli_fname ? where.dli_fname : "";
}

TEST(SignalHandlersTest, OnlyTheNamedObjectsHandlersAreRestored) {
  struct sigaction saved_ill{}, saved_term{}, mine{};
  mine.sa_handler = Ignore;
  sigemptyset(&mine.sa_mask);
  ASSERT_EQ(sigaction(SIGILL, &mine, &saved_ill), 0);
  ASSERT_EQ(sigaction(SIGTERM, &mine, &saved_term), 0);
  const std::string self = ObjectOf(reinterpret_cast<void*>(&Ignore));
  ASSERT_FALSE(self.empty());

  EXPECT_TRUE(RestoreSignalsHandledBy("no-such-object.so").empty());
  struct sigaction now{};
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, &Ignore);  // another object's handler is left alone

  EXPECT_EQ(RestoreSignalsHandledBy(self), (std::vector<std::string>{"SIGILL", "SIGTERM"}));
  ASSERT_EQ(sigaction(SIGTERM, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);
  ASSERT_EQ(sigaction(SIGILL, nullptr, &now), 0);
  EXPECT_EQ(now.sa_handler, SIG_DFL);

  sigaction(SIGILL, &saved_ill, nullptr);
  sigaction(SIGTERM, &saved_term, nullptr);
}

// Where libfabric brings libinfinipath (Debian, Ubuntu), SIGTERM ended a
// process with exit(1); once restored, the process dies of the signal.
TEST(SignalHandlersTest, AProcessDiesOfSigtermOnceForeignHandlersAreRestored) {
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RestoreForeignSignalHandlers();
    kill(getpid(), SIGTERM);
    _exit(7);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the child exited with " << WEXITSTATUS(status);
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
}

}  // namespace
}  // namespace kvfabric::fabric
