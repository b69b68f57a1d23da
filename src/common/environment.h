// The process environment is shared by every thread, and glibc's setenv may
// move it while another thread's getenv walks it: a crash (threads that
// start engines at once can crash in getenv, or in libfabric's first
// fi_getinfo). kvfabric reads and writes the environment
// under this lock: Settings::ApplyEnvironment, fabric::ApplyProviderDefaults
// (the only setenv), fabric::InfoList::Query (libfabric reads its variables
// then) and an engine opening its rails. Recursive: those nest.
//
// fork() waits for the lock (a pthread_atfork handler takes it first) and
// the child starts with it free, so a child forked while another thread
// was starting an engine can start its own (the lock's owner, that other
// thread, does not exist in the child).
#pragma once

#include <mutex>

namespace kvfabric {

std::recursive_mutex& EnvironmentLock();

}  // namespace kvfabric
