// Signal handlers that a library beneath libfabric installs behind the
// application's back.
//
// Debian's and Ubuntu's libfabric links the PSM providers, whose
// libinfinipath installs, as soon as it is loaded, handlers for SIGSEGV,
// SIGBUS, SIGILL, SIGABRT, SIGINT and SIGTERM that print a backtrace and
// call exit(1). A process that links kvfabric would then end with status 1
// and no message on SIGTERM (a pod stopped, a service asked to leave)
// instead of dying of the signal or running its own handler, and a crash
// would leave no core. The library reads IPATH_NO_BACKTRACE when it loads
// (kvfabric's Python package sets it before loading the native module);
// where it was loaded first, kvfabric puts those signals back to their
// default action the first time it asks libfabric for providers.
#pragma once

#include <string>
#include <vector>

namespace kvfabric::fabric {

// The signals whose handler's code lies in a loaded object whose file name
// contains `library` ("libinfinipath"), put back to SIG_DFL. Returns their
// names ("SIGTERM"...); handlers of any other object (the application's, the
// Python interpreter's, a sanitizer's) are left alone.
std::vector<std::string> RestoreSignalsHandledBy(const std::string& library);

// RestoreSignalsHandledBy("libinfinipath") once per process, with a debug
// line naming what it restored. Called before the first fi_getinfo.
void RestoreForeignSignalHandlers();

}  // namespace kvfabric::fabric
