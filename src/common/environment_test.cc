#include "common/environment.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <future>
#include <thread>

namespace kvfabric {
namespace {

// A child forked while another thread holds the lock (as when a thread
// forks while another starts an engine) can take it: fork waits for the
// holder, and the child starts with the lock free. Without the fork
// handlers the child's try_lock fails, the lock's owner being a thread
// that does not exist in the child.
TEST(EnvironmentLockTest, AChildForkedWhileAnotherThreadHoldsItCanTakeIt) {
  std::promise<void> held;
  std::thread holder([&] {
    std::lock_guard<std::recursive_mutex> g(EnvironmentLock());
    held.set_value();
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  });
  held.get_future().wait();
  const auto before = std::chrono::steady_clock::now();
  const pid_t child = fork();
  ASSERT_GE(child, 0) << "fork failed";
  if (child == 0) {
    const bool took = EnvironmentLock().try_lock();
    if (took) EnvironmentLock().unlock();
    _exit(took ? 0 : 3);
  }
  const auto waited = std::chrono::steady_clock::now() - before;
  holder.join();
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "the child could not take the environment lock";
  // fork waited for the holder, so the child never saw it held.
  EXPECT_GE(waited, std::chrono::milliseconds(100));
  // The parent still can, and again from the thread that forked.
  ASSERT_TRUE(EnvironmentLock().try_lock());
  EnvironmentLock().unlock();
}

}  // namespace
}  // namespace kvfabric
