#include "common/environment.h"

#include <pthread.h>

#include <new>

namespace kvfabric {
namespace {

std::recursive_mutex& TheLock() {
  static std::recursive_mutex lock;
  return lock;
}

void TakeBeforeFork() { TheLock().lock(); }
void ReleaseInParent() { TheLock().unlock(); }
// The child's thread has a new id, so it cannot unlock what the parent's
// thread locked (a recursive mutex checks its owner): it starts a new one.
void RenewInChild() { new (&TheLock()) std::recursive_mutex; }

}  // namespace

std::recursive_mutex& EnvironmentLock() {
  static const int registered = pthread_atfork(TakeBeforeFork, ReleaseInParent, RenewInChild);
  (void)registered;
  return TheLock();
}

}  // namespace kvfabric
