// exec_under_mpiexec(): lets a command that needs several ranks start its own MPI job, using the
// mpiexec found at configure time (TZ_MPIEXEC) and this very executable.
#include <unistd.h>

#include <climits>
#include <string>
#include <thread>
#include <vector>

#include "tierzero/comm/mpi_communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"

namespace tierzero::comm {

void exec_under_mpiexec(int ranks, const std::vector<std::string>& args) {
  TZ_CHECK(ranks >= 1, "cannot launch " + std::to_string(ranks) + " ranks", "ask for 1 or more");
  char self[PATH_MAX];  // (PATH_MAX) this executable's path
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  TZ_CHECK_ERRNO(n, "cannot find this executable's path (/proc/self/exe)");
  self[n] = '\0';
  std::vector<std::string> command = {TZ_MPIEXEC, "-n", std::to_string(ranks)};
  if (static_cast<unsigned>(ranks) > std::thread::hardware_concurrency()) {
    command.push_back("--oversubscribe");
    command.push_back("--bind-to");
    command.push_back("none");
  }
  // Open MPI refuses root unless told; a user who runs tierzero as root already chose to.
  if (geteuid() == 0) command.push_back("--allow-run-as-root");
  command.push_back(self);
  command.insert(command.end(), args.begin(), args.end());
  std::string line;
  for (const auto& a : command) line += (line.empty() ? "" : " ") + a;
  log::info("launching " + line);
  std::vector<char*> argv;  // (command.size() + 1), null-terminated
  for (auto& a : command) argv.push_back(a.data());
  argv.push_back(nullptr);
  execv(argv[0], argv.data());
  TZ_THROW("cannot start " + command[0] + ": " + errno_string(),
           "install Open MPI (scripts/setup.sh), or start the command under mpiexec yourself");
}

}  // namespace tierzero::comm
