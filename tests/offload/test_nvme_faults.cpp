// Faults: a full disk (RLIMIT_FSIZE in a forked child), one flipped byte in a swap file,
// permission denied, a missing path, and reading what was never written. Each gives a clear Error
// naming what and where, and the data written before the fault still reads back intact.
#include <gtest/gtest.h>
#include <pwd.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <csignal>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

using testing::random_bytes;
using testing::run_in_child;
using testing::TempDir;

NvmeOptions options_for(const std::string& dir) {
  NvmeOptions o;
  o.directories = {dir};
  o.block_size = 64 << 10;
  o.queue_depth = 8;
  o.io_timeout_s = 30;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

TEST(NvmeFaults, DiskFullIsAClearErrorAndEarlierDataSurvives) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string path = dir.path();
  // RLIMIT_FSIZE makes the file system "full" at 1 MiB for this process only: the child.
  const testing::ChildResult r = run_in_child([path]() -> std::string {
    std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of being killed
    const rlimit lim{size_t{1} << 20, size_t{1} << 20};
    if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return "setrlimit failed";
    NvmeEngine engine(options_for(path));
    SwapSpace swap(engine);
    const std::vector<uint8_t> first = random_bytes(300000, 1);  // (300000) fits under the limit
    Extent a = swap.allocate(first.size(), Category::param, "before");
    engine.write(a, first.data()).wait();
    const std::vector<uint8_t> second = random_bytes(2 << 20, 2);  // (2 MiB) crosses the limit
    Extent b = swap.allocate(second.size(), Category::param, "crosses the limit");
    std::string error = "no error";
    try {
      engine.write(b, second.data()).wait();
    } catch (const Error& e) {
      error = e.what();
    }
    std::vector<uint8_t> back(first.size());  // (300000)
    engine.read(a, back.data()).wait();
    const bool intact = back == first;
    std::string after_read = "no error";
    try {
      std::vector<uint8_t> lost(second.size());  // (2 MiB)
      engine.read(b, lost.data()).wait();
    } catch (const Error& e) {
      after_read = e.what();
    }
    return error + "\n" + (intact ? "earlier extent intact" : "earlier extent CORRUPT") + "\n" +
           after_read;
  });
  std::printf("child exit %d, reported:\n%s\n", r.exit_code, r.message.c_str());
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_TRUE(contains(r.message, "File too large") || contains(r.message, "No space left"));
  EXPECT_TRUE(contains(r.message, "extent #2"));
  EXPECT_TRUE(contains(r.message, "swap.bin offset"));
  EXPECT_TRUE(contains(r.message, "earlier extent intact"));
  EXPECT_TRUE(contains(r.message, "no completed write")) << "the failed extent is not readable";
}

TEST(NvmeFaults, FlippedByteIsACrcErrorNamingFileOffsetAndExtent) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for(dir.path()));
  SwapSpace swap(engine);
  const std::vector<uint8_t> good = random_bytes(100000, 11);    // (100000)
  const std::vector<uint8_t> victim = random_bytes(200000, 12);  // (200000)
  Extent g = swap.allocate(good.size(), Category::param, "good");
  Extent v = swap.allocate(victim.size(), Category::param, "victim");
  engine.write(g, good.data()).wait();
  engine.write(v, victim.data()).wait();
  const auto [file, file_offset] = engine.locate(v.offset + 150000);
  {
    const int fd = ::open(engine.file_path(file).c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    uint8_t byte = 0;
    ASSERT_EQ(pread(fd, &byte, 1, static_cast<off_t>(file_offset)), 1);
    byte ^= 0x10;
    ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(file_offset)), 1);
    ASSERT_EQ(fsync(fd), 0);
    ::close(fd);
  }
  std::vector<uint8_t> back(victim.size());  // (200000)
  std::string error;
  try {
    engine.read(v, back.data()).wait();
  } catch (const Error& e) {
    error = e.what();
  }
  std::printf("flipped byte at file offset %llu: %s\n",
              static_cast<unsigned long long>(file_offset), error.c_str());
  EXPECT_TRUE(contains(error, "CRC32C mismatch"));
  EXPECT_TRUE(contains(error, "extent #" + std::to_string(v.id)));
  EXPECT_TRUE(contains(error, engine.file_path(file)));
  EXPECT_TRUE(contains(error, "chunk 2"));      // 150000 lies in the third 64 KiB stripe unit
  std::vector<uint8_t> good_back(good.size());  // (100000)
  engine.read(g, good_back.data()).wait();
  EXPECT_EQ(good_back, good) << "the other extent still reads back";
}

TEST(NvmeFaults, MissingPathIsAClearError) {
  std::string error;
  try {
    NvmeEngine engine(options_for("/nonexistent/tierzero/swap"));
  } catch (const Error& e) {
    error = e.what();
  }
  std::printf("missing path: %s\n", error.c_str());
  EXPECT_TRUE(contains(error, "/nonexistent/tierzero/swap"));
  EXPECT_TRUE(contains(error, "No such file or directory"));
  EXPECT_TRUE(contains(error, "create it"));
}

TEST(NvmeFaults, PermissionDeniedIsAClearError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  const std::string locked = dir.path() + "/locked";
  ASSERT_EQ(chmod(dir.path().c_str(), 0755), 0);  // the child may reach `locked`, not write it
  ASSERT_EQ(mkdir(locked.c_str(), 0555), 0);
  // Root ignores directory permissions, so the attempt runs as an unprivileged user in a child.
  const testing::ChildResult r = run_in_child([locked]() -> std::string {
    if (geteuid() == 0) {
      const passwd* nobody = getpwnam("nobody");
      const uid_t uid = nobody ? nobody->pw_uid : 65534;
      const gid_t gid = nobody ? nobody->pw_gid : 65534;
      if (setgid(gid) != 0 || setuid(uid) != 0) return "could not drop privileges";
    }
    NvmeEngine engine(options_for(locked));
    return "engine created without permission";
  });
  std::printf("child exit %d: %s\n", r.exit_code, r.message.c_str());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_TRUE(contains(r.message, "Permission denied"));
  EXPECT_TRUE(contains(r.message, "locked"));
}

TEST(NvmeFaults, ReadingWhatWasNeverWrittenIsAnError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for(dir.path()));
  SwapSpace swap(engine);
  Extent e = swap.allocate(1000, Category::param, "never written");
  std::vector<uint8_t> buf(1000);  // (1000)
  std::string error;
  try {
    engine.read(e, buf.data()).wait();
  } catch (const Error& ex) {
    error = ex.what();
  }
  std::printf("unwritten read: %s\n", error.c_str());
  EXPECT_TRUE(contains(error, "no completed write"));
  EXPECT_THROW(engine.write(Extent{9, 100, 10, 4096}, buf.data()), Error) << "unaligned offset";
}

}  // namespace
}  // namespace tierzero::offload
