// Child processes for the tests: servers and peers started by the test
// itself, read line by line, and killed with it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace kvfabric::test {

// One line from `fd` (without the newline), waiting at most `timeout_ms` for
// each byte; on a timeout or end of file, what arrived plus " <timeout>" or
// " <eof>", so a failing test shows what the child said.
std::string ReadLine(int fd, int timeout_ms);

// A process for one test: it dies with the test process (PR_SET_PDEATHSIG)
// and is ended (SIGTERM, then SIGKILL) when this object goes.
class Child {
 public:
  Child() = default;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  // Starts argv with stdout readable through FirstLine and stderr discarded.
  bool Start(const std::vector<std::string>& argv);
  std::string FirstLine(int timeout_ms) { return ReadLine(out_, timeout_ms); }
  bool Running() const;
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int out_ = -1;
};

}  // namespace kvfabric::test
