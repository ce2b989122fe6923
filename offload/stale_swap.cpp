// Finding and removing swap directories of dead runs (see stale_swap.hpp for the rule).
#include "stale_swap.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
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

// statfs f_type values of local file systems (linux/magic.h; ZFS and bcachefs from their
// sources), where a flock is held by the one kernel every user of the file goes through.
struct LocalFs {
  uint64_t magic;
  const char* name;
};
constexpr LocalFs kLocalFileSystems[] = {
    {0xEF53, "ext2/3/4"},     {0x58465342, "xfs"},       {0x9123683E, "btrfs"},
    {0x01021994, "tmpfs"},    {0xF2F52010, "f2fs"},      {0x2FC12FC1, "zfs"},
    {0xCA451A4E, "bcachefs"}, {0x794C7630, "overlayfs"}, {0x858458F6, "ramfs"},
};

}  // namespace

bool lock_swap_file(int fd, const std::string& path) {
  if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return true;
  if (errno == EWOULDBLOCK)
    TZ_THROW("cannot lock swap file " + path + ": another process holds it",
             "another process opened this run's private swap file; check nvme_path for other "
             "jobs' files");
  log::warn("cannot lock swap file " + path + ": " + errno_text() +
            "; the run goes on, but if it is killed its swap is not removed by the next run "
            "(delete tierzero-swap-* directories under nvme_path by hand)");
  return false;
}

bool locks_are_node_wide(const std::string& dir, std::string* fs) {
  struct statfs st {};
  if (::statfs(dir.c_str(), &st) != 0) {
    if (fs) *fs = "unknown (statfs: " + errno_text() + ")";
    return false;
  }
  const auto magic = static_cast<uint64_t>(static_cast<uint32_t>(st.f_type));
  for (const LocalFs& l : kLocalFileSystems) {
    if (l.magic == magic) {
      if (fs) *fs = l.name;
      return true;
    }
  }
  if (fs) {
    char hex[32];
    std::snprintf(hex, sizeof hex, "0x%llX", static_cast<unsigned long long>(magic));
    *fs = std::string("file system type ") + hex;
  }
  return false;
}

size_t remove_stale_swap_dirs(const std::string& dir, double min_age_s) {
  std::string fs;
  if (!locks_are_node_wide(dir, &fs)) {
    log::info("swap of killed runs is not looked for in " + dir + " (" + fs +
              "): a lock there may not show a run on another node");
    return 0;
  }
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
        if (::rmdir(sub.c_str()) != 0 && errno != ENOENT)  // ENOENT: removed by another engine
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
