// Swap directories of dead runs: a run killed with SIGKILL leaves its swap file behind; the next
// engine started on the same directory removes it (once it is old enough to be sure nobody is
// still creating it, and the dead process's lock is gone), while the swap of an engine that is
// alive stays locked and untouched and keeps working.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "offload_test_util.hpp"
#include "stale_swap.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

using testing::random_bytes;
using testing::run_in_child;
using testing::TempDir;

NvmeOptions options_for(const std::string& dir, double min_age_s) {
  NvmeOptions o;
  o.directories = {dir};
  o.block_size = 64 << 10;
  o.queue_depth = 8;
  o.io_timeout_s = 30;
  o.stale_swap_min_age_s = min_age_s;
  return o;
}

size_t swap_dirs_in(const std::string& dir) {
  size_t n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir))
    n += e.path().filename().string().rfind("tierzero-swap-", 0) == 0;
  return n;
}

// The kernel drops a dead process's flock when the last reference to its file goes; io_uring's
// registered-file table is torn down asynchronously after the process exits, so that can take a
// moment. Waits (up to 30 s) until every swap file in `dir` can be locked.
bool wait_until_unlocked(const std::string& dir) {
  for (int attempt = 0; attempt < 600; ++attempt) {
    bool all_free = true;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
      const std::string file = e.path().string() + "/swap.bin";
      const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
      if (fd < 0) continue;
      all_free = all_free && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
      ::close(fd);
    }
    if (all_free) return true;
    ::usleep(50000);
  }
  return false;
}

// A child that writes 1 MiB of swap and is then killed outright: no destructor runs.
void run_killed_engine(const std::string& dir) {
  const testing::ChildResult r = run_in_child([dir]() -> std::string {
    NvmeEngine engine(options_for(dir, 10.0));
    SwapSpace swap(engine);
    const std::vector<uint8_t> data = random_bytes(size_t{1} << 20, 3);  // (1 MiB)
    Extent e = swap.allocate(data.size(), Category::param, "dies with the run");
    engine.write(e, data.data()).wait();
    std::raise(SIGKILL);
    return "not killed";
  });
  ASSERT_EQ(r.exit_code, -1) << "the child was not killed: " << r.message;
}

TEST(StaleSwap, DeadRunsSwapIsRemovedAndLiveSwapIsLeftAlone) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path();
  std::string fs;
  if (!detail::locks_are_node_wide(path, &fs))
    GTEST_SKIP() << path << " is on " << fs << ", where stale swap is never removed";
  run_killed_engine(path);
  ASSERT_EQ(swap_dirs_in(path), 1u) << "the killed run left no swap behind to clean up";

  ASSERT_TRUE(wait_until_unlocked(path)) << "the dead run's lock was never released";
  // Too young to be taken for stale: left alone (it could be a run just starting).
  {
    NvmeEngine cautious(options_for(path, 3600.0));
    EXPECT_EQ(swap_dirs_in(path), 2u) << "a fresh swap file was removed";
  }
  EXPECT_EQ(swap_dirs_in(path), 1u);

  NvmeEngine live(options_for(path, 0.0));  // removes the dead run's directory
  EXPECT_EQ(swap_dirs_in(path), 1u) << "the dead run's swap directory was not removed";
  SwapSpace swap(live);
  const std::vector<uint8_t> data = random_bytes(300000, 4);  // (300000)
  Extent e = swap.allocate(data.size(), Category::param, "live");
  live.write(e, data.data()).wait();

  // A second engine on the same directory (another rank of this node) must not touch the live one.
  NvmeEngine other(options_for(path, 0.0));
  EXPECT_EQ(swap_dirs_in(path), 2u) << "a live engine's swap directory was removed";
  std::vector<uint8_t> back(data.size());  // (300000)
  live.read(e, back.data()).wait();
  EXPECT_TRUE(back == data) << "the live engine's data did not survive another engine's start";
  std::printf("dead run's swap removed, live swap kept and read back intact\n");
}

// Cleanup trusts a lock only where every process that can reach the file goes through this
// kernel: here /proc (not a disk, and not in the list of local file systems) stands in for an NFS
// or Lustre mount, where a run on another node may hold no lock this node can see.
TEST(StaleSwap, OnlyLocalFileSystemsAreCleanedUp) {
  std::string fs;
  EXPECT_FALSE(detail::locks_are_node_wide("/proc", &fs));
  EXPECT_EQ(fs, "file system type 0x9FA0");
  EXPECT_FALSE(detail::locks_are_node_wide("/no/such/dir", &fs));
  EXPECT_NE(fs.find("statfs"), std::string::npos) << fs;
  EXPECT_EQ(detail::remove_stale_swap_dirs("/proc", 0.0), 0u);
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const bool local = detail::locks_are_node_wide(dir.path(), &fs);
  std::printf("%s is on %s: stale swap %s\n", dir.path().c_str(), fs.c_str(),
              local ? "removed" : "left alone");
}

// A swap file some other process has locked is a clear error naming it, not a silent success.
TEST(StaleSwap, LockingAFileAnotherProcessHoldsIsAnError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string file = dir.path() + "/swap.bin";
  const int a = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ASSERT_GE(a, 0);
  const int b = ::open(file.c_str(), O_RDWR | O_CLOEXEC);  // its own open file description
  ASSERT_GE(b, 0);
  EXPECT_TRUE(detail::lock_swap_file(a, file));
  try {
    detail::lock_swap_file(b, file);
    ADD_FAILURE() << "a file locked by another open was locked again";
  } catch (const Error& e) {
    std::printf("%s\n", e.what());
    EXPECT_NE(std::string(e.what()).find(file), std::string::npos) << e.what();
  }
  ::close(b);
  ::close(a);
}

}  // namespace
}  // namespace tierzero::offload
