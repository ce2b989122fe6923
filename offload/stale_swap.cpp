// Finding and removing swap directories of dead runs (see stale_swap.hpp for the rule).
#include "stale_swap.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/memory_tracker.hpp"

namespace tierzero::offload::detail {

namespace {

constexpr const char* kPrefix = "tierzero-swap-";

std::string errno_text() {
  return std::string(std::strerror(errno)) + " (errno " + std::to_string(errno) + ")";
}

// Seconds since the file's status last changed (creation, writes, renames).
double age_s(const struct stat& st) {
  return std::difftime(std::time(nullptr), st.st_ctime);
}

}  // namespace

void lock_swap_file(int fd, const std::string& path) {
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0)
    TZ_THROW("cannot lock swap file " + path + ": " + errno_text(),
             "another process holds it; check nvme_path for files of other runs");
}

size_t remove_stale_swap_dirs(const std::string& dir, double min_age_s) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return 0;  // open_files reports an unusable directory itself
  std::vector<std::string> candidates;
  while (const dirent* e = ::readdir(d)) {
    if (std::strncmp(e->d_name, kPrefix, std::strlen(kPrefix)) == 0)
      candidates.emplace_back(dir + "/" + e->d_name);
  }
  ::closedir(d);
  size_t removed = 0;
  for (const std::string& sub : candidates) {
    struct stat sd {};
    if (::lstat(sub.c_str(), &sd) != 0 || !S_ISDIR(sd.st_mode) || sd.st_uid != ::geteuid())
      continue;
    const std::string file = sub + "/swap.bin";
    const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) {
      // A directory whose file never appeared (its run died in between) is removed once old.
      if (errno == ENOENT && age_s(sd) >= min_age_s && ::rmdir(sub.c_str()) == 0) {
        log::warn("removed an empty swap directory left by a run that did not exit cleanly: " +
                  sub);
        ++removed;
      }
      continue;
    }
    struct stat sf {};
    const bool old_enough = ::fstat(fd, &sf) == 0 && S_ISREG(sf.st_mode) && age_s(sf) >= min_age_s;
    // Locked: a live engine owns it. Not locked: its owner is gone (the kernel dropped the lock).
    const bool unowned = old_enough && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (unowned) {
      if (::unlink(file.c_str()) != 0) {
        if (errno != ENOENT)  // ENOENT: another new engine removed it first
          log::warn("could not remove the stale swap file " + file + ": " + errno_text());
      } else {
        if (::rmdir(sub.c_str()) != 0)
          log::warn("removed the stale swap file " + file +
                    " but not its directory: " + errno_text());
        log::warn("removed a swap directory left by a run that did not exit cleanly: " + sub +
                  " (" + format_bytes(static_cast<size_t>(sf.st_blocks) * 512) + " on disk freed)");
        ++removed;
      }
    }
    ::close(fd);  // also drops the lock taken above
  }
  return removed;
}

}  // namespace tierzero::offload::detail
