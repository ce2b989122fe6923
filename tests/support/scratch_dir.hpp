// scratch_dir: a directory of this test process's own, made fresh with mkdtemp and removed with
// its contents when the process exits. A name built from the pid alone is not enough: a machine
// whose /tmp outlives a run (CI's does) hands the same pids out again, and a test that checks a
// file is absent then finds the one an earlier run left there.
#pragma once

#include <stdlib.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <map>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

namespace tierzero::testing {

namespace detail {

// The directories made so far, by prefix; all of them removed at exit, by the process that made
// them only (a forked child that calls exit() must not take its parent's files away).
struct ScratchDirs {
  std::map<std::string, std::string> by_prefix;
  pid_t owner = ::getpid();
  ~ScratchDirs() {
    if (::getpid() != owner) return;
    for (const auto& [prefix, dir] : by_prefix) {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);  // best effort: never fail a test at exit
    }
  }
};

inline ScratchDirs& scratch_dirs() {
  static ScratchDirs dirs;
  return dirs;
}

}  // namespace detail

// The same directory for every call with `prefix` in this process, e.g. /tmp/tz_ckpt_a1B2c3
// (made again when a test has removed it: a binary run by hand runs all its tests in one process).
inline const std::string& scratch_dir(const std::string& prefix) {
  auto& dirs = detail::scratch_dirs().by_prefix;
  auto it = dirs.find(prefix);
  if (it != dirs.end()) {
    std::filesystem::create_directories(it->second);  // again, if a test removed it
    return it->second;
  }
  const std::string templ =
      std::filesystem::temp_directory_path().string() + "/" + prefix + "_XXXXXX";
  std::vector<char> name(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
  name.push_back('\0');
  if (::mkdtemp(name.data()) == nullptr)
    throw std::runtime_error("scratch_dir: mkdtemp(" + templ +
                             ") failed: " + std::generic_category().message(errno));
  return dirs.emplace(prefix, name.data()).first->second;
}

}  // namespace tierzero::testing
