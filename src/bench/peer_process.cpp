// PeerProcess (peer_process.hpp): posix_spawnp with the socket as the child's stdin and stdout,
// poll() with a deadline for every read.
#include "peer_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "child_runs.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/timer.hpp"

extern char** environ;

namespace tierzero::bench {

namespace {

void check_posix(int rc, const std::string& what) {
  TZ_CHECK(rc == 0, what + ": " + std::strerror(rc), "see the OS error");
}

// Waits up to `seconds` for the child to exit; true when it was reaped.
bool reap_within(pid_t pid, double seconds) {
  Timer t;
  int status = 0;
  for (;;) {
    const pid_t w = waitpid(pid, &status, WNOHANG);
    if (w == pid || (w < 0 && errno != EINTR)) return true;
    if (t.seconds() > seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace

PeerProcess::PeerProcess(std::string name, const std::vector<std::string>& argv,
                         const std::vector<std::string>& env, std::string log)
    : name_(std::move(name)), log_(std::move(log)) {
  TZ_CHECK(!argv.empty(), "PeerProcess " + name_ + ": no program", "");
  int sv[2];  // sv[0] ours, sv[1] the child's stdin and stdout
  TZ_CHECK_ERRNO(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv),
                 "socketpair for peer " + name_);
  fd_ = sv[0];
  posix_spawn_file_actions_t actions;
  check_posix(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init");
  std::unique_ptr<posix_spawn_file_actions_t, int (*)(posix_spawn_file_actions_t*)> guard(
      &actions, &posix_spawn_file_actions_destroy);
  // dup2 clears FD_CLOEXEC on the copies, so only stdin, stdout and stderr reach the child.
  check_posix(posix_spawn_file_actions_adddup2(&actions, sv[1], STDIN_FILENO), "adddup2 stdin");
  check_posix(posix_spawn_file_actions_adddup2(&actions, sv[1], STDOUT_FILENO), "adddup2 stdout");
  check_posix(posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, log_.c_str(),
                                               O_WRONLY | O_CREAT | O_TRUNC, 0644),
              "addopen " + log_);

  std::vector<std::string> all_env;
  for (char** e = environ; *e != nullptr; ++e) all_env.emplace_back(*e);
  all_env.insert(all_env.end(), env.begin(), env.end());  // later entries win in getenv
  std::vector<char*> args, envp;                          // null-terminated
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  for (const auto& e : all_env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const int rc = posix_spawnp(&pid_, args[0], &actions, nullptr, args.data(), envp.data());
  close(sv[1]);
  if (rc != 0) {
    close(fd_);
    fd_ = -1;
    TZ_THROW("cannot start peer " + name_ + " (" + argv[0] + "): " + std::strerror(rc),
             "check that " + argv[0] + " is on PATH");
  }
}

PeerProcess::~PeerProcess() {
  if (fd_ >= 0) {
    (void)shutdown(fd_, SHUT_WR);  // the peer reads end of input and exits
    close(fd_);
  }
  if (pid_ > 0 && !reap_within(pid_, 5.0)) {
    kill(pid_, SIGKILL);
    reap_within(pid_, 5.0);
  }
}

void PeerProcess::fail(const std::string& what) const {
  TZ_THROW(
      "peer " + name_ + ": " + what + "; the end of its log " + log_ + ":\n" + file_tail(log_, 12),
      "run the peer by hand to see why, or leave it out");
}

std::string PeerProcess::read_line(double timeout_s) {
  Timer t;
  for (;;) {
    const size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    const double left = timeout_s - t.seconds();
    if (left <= 0) fail("no answer within " + std::to_string(static_cast<int>(timeout_s)) + " s");
    pollfd p{fd_, POLLIN, 0};
    const int ready = poll(&p, 1, static_cast<int>(left * 1000.0) + 1);
    if (ready < 0 && errno == EINTR) continue;
    TZ_CHECK_ERRNO(ready, "poll on peer " + name_);
    if (ready == 0) continue;
    char chunk[4096];
    const ssize_t got = read(fd_, chunk, sizeof chunk);
    if (got < 0 && errno == EINTR) continue;
    TZ_CHECK_ERRNO(got, "read from peer " + name_);
    if (got == 0) fail("it ended before answering");
    buffer_.append(chunk, static_cast<size_t>(got));
  }
}

std::string PeerProcess::request(const std::string& line, double timeout_s) {
  const std::string out = line + "\n";
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t w = send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) fail(std::string("cannot send '") + line + "': " + std::strerror(errno));
    sent += static_cast<size_t>(w);
  }
  return read_line(timeout_s);
}

}  // namespace tierzero::bench
