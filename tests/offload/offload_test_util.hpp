// Helpers shared by the offload tests: a temporary directory on a real disk (O_DIRECT needs one;
// /tmp may be tmpfs), deterministic random bytes, and running a fault in a forked child so that
// resource limits and credentials changed there cannot leak into other tests.
#pragma once

#include <fcntl.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace tierzero::offload::testing {

constexpr long kTmpfsMagic = 0x01021994;

inline bool is_tmpfs(const std::string& dir) {
  struct statfs fs {};
  return statfs(dir.c_str(), &fs) == 0 && static_cast<long>(fs.f_type) == kTmpfsMagic;
}

// A fresh directory, removed with its contents at scope exit. `base` empty: /var/tmp, or the
// build directory when /var/tmp is tmpfs.
class TempDir {
 public:
  explicit TempDir(std::string base = {}) {
    if (base.empty())
      base =
          is_tmpfs("/var/tmp") ? std::filesystem::current_path().string() : std::string("/var/tmp");
    std::string templ = base + "/tz-offload-test-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
    buf.push_back('\0');
    if (mkdtemp(buf.data())) path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  bool ok() const { return !path_.empty(); }

 private:
  std::string path_;
};

inline std::vector<uint8_t> random_bytes(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);  // (n)
  std::mt19937_64 rng(seed);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    for (size_t k = 0; k < 8; ++k) v[i + k] = static_cast<uint8_t>(x >> (8 * k));
  }
  for (; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

struct ChildResult {
  int exit_code = -1;   // the child's exit status; -1 if it did not exit normally
  std::string message;  // what it wrote
};

// Runs `fn` in a forked child (at most `timeout_s` seconds); its return value is the message,
// an exception's what() is reported with exit code 1.
inline ChildResult run_in_child(const std::function<std::string()>& fn, unsigned timeout_s = 60) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(timeout_s);
    int code = 0;
    std::string msg;
    try {
      msg = fn();
    } catch (const std::exception& ex) {
      msg = ex.what();
      code = 1;
    }
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t w = write(fds[1], msg.data() + off, msg.size() - off);
      if (w <= 0) break;
      off += static_cast<size_t>(w);
    }
    close(fds[1]);
    _exit(code);
  }
  close(fds[1]);
  ChildResult r;
  char buf[4096];
  ssize_t got = 0;
  while ((got = read(fds[0], buf, sizeof buf)) > 0) r.message.append(buf, static_cast<size_t>(got));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  return r;
}

}  // namespace tierzero::offload::testing
