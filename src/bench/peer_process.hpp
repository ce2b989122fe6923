// PeerProcess: a peer implementation run in a child process beside ours (a Python script over
// PyTorch, say) and driven one line at a time, so that its steps interleave with ours in the same
// run and load from other processes falls on both. The child's stdin and stdout are one Unix
// socket (writes to a dead child fail with EPIPE instead of killing us with SIGPIPE), its stderr
// goes to a log file whose tail every error quotes, and every read has a deadline: a peer that
// dies or hangs is an Error naming it, never a hang of the benchmark. Internal to bench.
#pragma once

#include <sys/types.h>
#include <string>
#include <vector>

namespace tierzero::bench {

class PeerProcess {
 public:
  // Starts argv (argv[0] looked up on PATH) with `env` added to ours, stderr into `log`.
  // Throws Error when it cannot be started.
  PeerProcess(std::string name, const std::vector<std::string>& argv,
              const std::vector<std::string>& env, std::string log);
  ~PeerProcess();  // closes its input, gives it 5 s to end, then kills it
  PeerProcess(const PeerProcess&) = delete;
  PeerProcess& operator=(const PeerProcess&) = delete;

  // One line from the peer (without the newline), waiting at most timeout_s; throws Error when
  // the peer ended, closed its output or ran past the deadline.
  std::string read_line(double timeout_s);
  // Sends `line` and a newline, then reads the reply line.
  std::string request(const std::string& line, double timeout_s);

 private:
  [[noreturn]] void fail(const std::string& what) const;

  std::string name_;
  std::string log_;
  pid_t pid_ = -1;
  int fd_ = -1;         // our end of the socket: the peer's stdin and stdout
  std::string buffer_;  // bytes read past the last line returned
};

}  // namespace tierzero::bench
