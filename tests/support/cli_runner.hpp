// Runs the real `tierzero` binary from a test as a user's shell would, capturing what it prints
// and its exit status. One copy for every CLI test: the popen loop, the decoding of the status
// (128 + signal for a killed child, as the shell reports it) and the echo of the command.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <string>

namespace tierzero::test {

struct RunResult {
  int exit_code;
  std::string output;
};

// Runs `prefix` (e.g. "timeout 120 " or "env A=1 "), the binary, `args` and `redirect` (which
// streams are captured) through the shell, and prints the command, its exit status and, with
// `echo_output`, everything it printed.
inline RunResult run_tierzero(const std::string& args, const std::string& prefix = "",
                              const std::string& redirect = " 2>&1", bool echo_output = true) {
  const std::string cmd = prefix + std::string(TIERZERO_BINARY) + " " + args + redirect;
  FILE* p = ::popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr) << cmd;
  if (p == nullptr) return {-1, ""};
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int status = ::pclose(p);
  RunResult r{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), out};
  std::printf("$ tierzero %s\n-> exit %d\n%s\n", args.c_str(), r.exit_code,
              echo_output ? out.c_str() : "");
  return r;
}

}  // namespace tierzero::test
