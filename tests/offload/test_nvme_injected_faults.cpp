// Injected io_uring completion faults: short reads and writes, EAGAIN, EINTR, EIO, a read of 0
// bytes and retries that never succeed. A real drive almost never produces these, so the engine's
// handling of them (docs/offload.md, "Errors") is exercised through detail::set_completion_filter,
// which rewrites a completion's result before the engine interprets it. The filters also make the
// fault real where they can: a "short" or failed read gets garbage in the bytes it did not
// transfer and a "short" or failed write gets garbage on disk where it did not write, so only a
// correct resubmission round-trips the data bit-exactly. Every test removes its filter at scope
// exit (FilterGuard), even when an assertion fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "offload_test_util.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/offload/nvme_engine.hpp"
#include "tierzero/offload/swap_space.hpp"

namespace tierzero::offload {
namespace {

using testing::random_bytes;
using testing::TempDir;

constexpr size_t kBlock = size_t{64} << 10;  // stripe unit: a 300000-byte extent is 5 chunks
constexpr uint8_t kPoison = 0xA5;            // what "untransferred" bytes hold

NvmeOptions options_for(const std::vector<std::string>& dirs, int max_retries = 64) {
  NvmeOptions o;
  o.directories = dirs;
  o.block_size = kBlock;
  o.queue_depth = 8;
  o.io_timeout_s = 10;  // a hang shows up as a timeout Error well inside the test's budget
  o.max_retries = max_retries;
  return o;
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Installs a completion filter for one scope; the destructor removes it on every path, so a
// failing test cannot leak faults into the next one.
class FilterGuard {
 public:
  explicit FilterGuard(detail::CompletionFilter f) { detail::set_completion_filter(std::move(f)); }
  ~FilterGuard() { reset(); }
  FilterGuard(const FilterGuard&) = delete;
  FilterGuard& operator=(const FilterGuard&) = delete;
  void reset() { detail::set_completion_filter({}); }
};

// 4 KiB-aligned memory, so requests go to the drive without a bounce buffer (the direct path).
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n)
      : mem_(static_cast<uint8_t*>(std::aligned_alloc(kIoAlignment, round_up(n)))) {}
  uint8_t* data() const { return mem_.get(); }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  // aligned_alloc wants a multiple of the alignment.
  static size_t round_up(size_t n) { return (n + kIoAlignment - 1) / kIoAlignment * kIoAlignment; }
  std::unique_ptr<uint8_t, Free> mem_;
};

// Plain (buffered) descriptors of the engine's swap files, for putting garbage where a faulty
// write did not write. The kernel keeps them coherent with the engine's O_DIRECT descriptors:
// a direct write flushes and then invalidates the page cache over its range.
class SwapFileWriter {
 public:
  explicit SwapFileWriter(const NvmeEngine& engine) {
    for (size_t i = 0; i < engine.file_count(); ++i)
      fds_.push_back(::open(engine.file_path(i).c_str(), O_RDWR | O_CLOEXEC));
  }
  ~SwapFileWriter() {
    for (int fd : fds_)
      if (fd >= 0) ::close(fd);
  }
  SwapFileWriter(const SwapFileWriter&) = delete;
  SwapFileWriter& operator=(const SwapFileWriter&) = delete;
  bool ok() const {
    for (int fd : fds_)
      if (fd < 0) return false;
    return true;
  }
  // Overwrites [offset, offset + bytes) of swap file `file` with kPoison; false on failure.
  bool poison(size_t file, uint64_t offset, size_t bytes) const {
    const std::vector<uint8_t> junk(bytes, kPoison);  // (bytes)
    const int fd = fds_.at(file);
    return ::pwrite(fd, junk.data(), bytes, static_cast<off_t>(offset)) ==
               static_cast<ssize_t>(bytes) &&
           ::fdatasync(fd) == 0;
  }

 private:
  std::vector<int> fds_;
};

// A chunk's first submission starts on a stripe-unit boundary of its file (extents of a stripe
// unit or more are stripe aligned); a resubmission after a short transfer starts inside it.
bool first_submission(const detail::Completion& c) {
  return c.file_offset % kBlock == 0;
}

// Where chunk `index` of `e` lives: the file and its offset there.
std::pair<size_t, uint64_t> chunk_location(const NvmeEngine& engine, const Extent& e,
                                           size_t index) {
  return engine.locate(e.offset + index * kBlock);
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

size_t count_mismatches(const uint8_t* a, const uint8_t* b, size_t n) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) bad += a[i] != b[i];
  return bad;
}

TEST(NvmeInjectedFaults, ShortReadsAreResumedAndDataRoundTrips) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for({dir.path()}));
  SwapSpace swap(engine);
  const std::vector<uint8_t> data = random_bytes(300000, 21);  // (300000) 4 full chunks + a tail
  Extent e = swap.allocate(data.size(), Category::param, "short reads");
  engine.write(e, data.data()).wait();
  const size_t chunks = (e.padded + kBlock - 1) / kBlock;

  std::atomic<size_t> shortened{0}, resumed{0}, wrong_resume{0};
  // The first completion of each chunk reports half its bytes (4 KiB aligned, as O_DIRECT
  // needs) and leaves garbage in the other half; the resubmission must ask for exactly the rest.
  FilterGuard guard([&](const detail::Completion& c) {
    if (c.is_write || c.res != static_cast<int>(c.request_bytes)) return c.res;
    if (!first_submission(c)) {
      ++resumed;
      if (c.file_offset % kBlock + c.request_bytes > kBlock) ++wrong_resume;
      return c.res;
    }
    const size_t half = c.request_bytes / 2 / kIoAlignment * kIoAlignment;
    std::memset(c.buffer + half, kPoison, c.request_bytes - half);
    ++shortened;
    return static_cast<int>(half);
  });

  // Aligned memory (read straight into the caller's buffer) and unaligned (via bounce buffers).
  AlignedBytes aligned(data.size());
  ASSERT_NE(aligned.data(), nullptr);
  std::vector<uint8_t> unaligned(data.size() + 1);  // (300001) read at +1
  for (uint8_t* dst : {aligned.data(), unaligned.data() + 1}) {
    shortened = 0;
    resumed = 0;
    const size_t retries_before = engine.stats().retries;
    std::memset(dst, 0, data.size());
    engine.read(e, dst).wait();
    const size_t retries = engine.stats().retries - retries_before;
    const size_t bad = count_mismatches(dst, data.data(), data.size());
    std::printf(
        "short reads (%s): %zu injected, %zu resumed, %zu retries, %zu bytes compared, "
        "%zu differ\n",
        dst == aligned.data() ? "direct" : "bounce", shortened.load(), resumed.load(), retries,
        data.size(), bad);
    EXPECT_EQ(shortened.load(), chunks);
    EXPECT_EQ(resumed.load(), chunks);
    EXPECT_EQ(retries, chunks);
    EXPECT_EQ(bad, size_t{0});
  }
  EXPECT_EQ(wrong_resume.load(), size_t{0}) << "a resubmission ran past its chunk";
}

TEST(NvmeInjectedFaults, ShortWritesAreResumedAndDataRoundTrips) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for({dir.path()}));
  SwapSpace swap(engine);
  const SwapFileWriter files(engine);
  ASSERT_TRUE(files.ok());
  const std::vector<uint8_t> data = random_bytes(300000, 22);  // (300000)
  AlignedBytes aligned(data.size());
  ASSERT_NE(aligned.data(), nullptr);
  std::memcpy(aligned.data(), data.data(), data.size());
  std::vector<uint8_t> unaligned(data.size() + 1);  // (300001) written from +1
  std::memcpy(unaligned.data() + 1, data.data(), data.size());
  Extent a = swap.allocate(data.size(), Category::param, "short writes, direct");
  Extent b = swap.allocate(data.size(), Category::param, "short writes, bounce");
  const size_t chunks = 2 * ((a.padded + kBlock - 1) / kBlock);

  std::atomic<size_t> shortened{0}, resumed{0}, poison_failed{0};
  // The first completion of each chunk reports half its bytes, and the half it "did not write"
  // gets garbage on disk, so only rewriting exactly the rest gives the right data back.
  FilterGuard guard([&](const detail::Completion& c) {
    if (!c.is_write || c.res != static_cast<int>(c.request_bytes)) return c.res;
    if (!first_submission(c)) {
      ++resumed;
      return c.res;
    }
    const size_t half = c.request_bytes / 2 / kIoAlignment * kIoAlignment;
    if (!files.poison(c.file, c.file_offset + half, c.request_bytes - half)) ++poison_failed;
    ++shortened;
    return static_cast<int>(half);
  });
  const size_t retries_before = engine.stats().retries;
  IoHandle wa = engine.write(a, aligned.data());
  IoHandle wb = engine.write(b, unaligned.data() + 1);
  wa.wait();
  wb.wait();
  const size_t retries = engine.stats().retries - retries_before;
  guard.reset();

  std::vector<uint8_t> back_a(data.size()), back_b(data.size());  // (300000) each
  engine.read(a, back_a.data()).wait();
  engine.read(b, back_b.data()).wait();
  const size_t bad = count_mismatches(back_a.data(), data.data(), data.size()) +
                     count_mismatches(back_b.data(), data.data(), data.size());
  std::printf(
      "short writes: %zu injected, %zu resumed, %zu retries, %zu bytes compared, %zu "
      "differ\n",
      shortened.load(), resumed.load(), retries, 2 * data.size(), bad);
  EXPECT_EQ(poison_failed.load(), size_t{0});
  EXPECT_EQ(shortened.load(), chunks);
  EXPECT_EQ(resumed.load(), chunks);
  EXPECT_EQ(retries, chunks);
  EXPECT_EQ(bad, size_t{0});
}

TEST(NvmeInjectedFaults, EagainAndEintrAreRetried) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for({dir.path()}));
  SwapSpace swap(engine);
  const SwapFileWriter files(engine);
  ASSERT_TRUE(files.ok());
  // Sizes that take every path: several chunks, one aligned chunk, a tail-only extent.
  const std::vector<size_t> sizes = {300000, kBlock, 1000, 200000};
  std::vector<std::vector<uint8_t>> data;
  std::vector<Extent> extents;
  for (size_t i = 0; i < sizes.size(); ++i) {
    data.push_back(random_bytes(sizes[i], 30 + i));
    extents.push_back(swap.allocate(sizes[i], Category::param, "eagain/eintr"));
  }

  // Every third completion fails with EAGAIN or EINTR (alternately) and nothing of it counts:
  // a read's buffer gets garbage, a write's range on disk gets garbage.
  std::atomic<size_t> seen{0}, eagain{0}, eintr{0}, poison_failed{0};
  FilterGuard guard([&](const detail::Completion& c) {
    if (c.res != static_cast<int>(c.request_bytes)) return c.res;
    const size_t n = ++seen;
    if (n % 3 != 0) return c.res;
    if (c.is_write) {
      if (!files.poison(c.file, c.file_offset, c.request_bytes)) ++poison_failed;
    } else {
      std::memset(c.buffer, kPoison, c.request_bytes);
    }
    const bool again = (n / 3) % 2 == 1;  // the first fault is an EAGAIN
    ++(again ? eagain : eintr);
    return again ? -EAGAIN : -EINTR;
  });
  const size_t retries_before = engine.stats().retries;
  std::vector<IoHandle> handles;
  for (size_t i = 0; i < extents.size(); ++i)
    handles.push_back(engine.write(extents[i], data[i].data()));
  for (const IoHandle& h : handles) h.wait();
  handles.clear();
  std::vector<std::vector<uint8_t>> back;
  for (size_t size : sizes) back.emplace_back(size);  // (size) per extent
  for (size_t i = 0; i < extents.size(); ++i)
    handles.push_back(engine.read(extents[i], back[i].data()));
  for (const IoHandle& h : handles) h.wait();
  const size_t retries = engine.stats().retries - retries_before;

  size_t compared = 0, bad = 0;
  for (size_t i = 0; i < sizes.size(); ++i) {
    compared += sizes[i];
    bad += count_mismatches(back[i].data(), data[i].data(), sizes[i]);
  }
  std::printf(
      "EAGAIN/EINTR: %zu completions, %zu EAGAIN + %zu EINTR injected, %zu retries, %zu "
      "bytes compared, %zu differ\n",
      seen.load(), eagain.load(), eintr.load(), retries, compared, bad);
  EXPECT_EQ(poison_failed.load(), size_t{0});
  EXPECT_GT(eagain.load(), size_t{0});
  EXPECT_GT(eintr.load(), size_t{0});
  EXPECT_EQ(retries, eagain.load() + eintr.load());
  EXPECT_EQ(bad, size_t{0});
}

TEST(NvmeInjectedFaults, EioOnReadIsAClearErrorAndOtherExtentsSurvive) {
  TempDir d0, d1;
  ASSERT_TRUE(d0.ok() && d1.ok());
  NvmeEngine engine(options_for({d0.path(), d1.path()}));  // two striped files
  SwapSpace swap(engine);
  const std::vector<uint8_t> a_data = random_bytes(100000, 41);  // (100000)
  const std::vector<uint8_t> b_data = random_bytes(300000, 42);  // (300000)
  const std::vector<uint8_t> c_data = random_bytes(70000, 43);   // (70000)
  Extent a = swap.allocate(a_data.size(), Category::param, "before");
  Extent b = swap.allocate(b_data.size(), Category::param, "victim");
  Extent c = swap.allocate(c_data.size(), Category::param, "after");
  engine.write(a, a_data.data()).wait();
  engine.write(b, b_data.data()).wait();
  engine.write(c, c_data.data()).wait();

  // Chunk 2 of b fails with EIO (and leaves garbage); b's other chunks still complete.
  const auto [file, offset] = chunk_location(engine, b, 2);
  FilterGuard guard([file = file, offset = offset](const detail::Completion& cq) {
    if (cq.is_write || cq.file != file || cq.file_offset != offset) return cq.res;
    std::memset(cq.buffer, kPoison, cq.request_bytes);
    return -EIO;
  });
  std::promise<IoResult> callback_result;
  std::vector<uint8_t> back(b_data.size());  // (300000)
  std::string error;
  const auto t0 = std::chrono::steady_clock::now();
  IoHandle h =
      engine.read(b, back.data(), [&](const IoResult& r) { callback_result.set_value(r); });
  try {
    h.wait();
  } catch (const Error& ex) {
    error = ex.what();
  }
  const double waited = seconds_since(t0);
  std::printf("EIO on read (after %.3f s): %s\n", waited, error.c_str());
  EXPECT_TRUE(contains(error, "NVMe read failed: Input/output error (errno 5)"));
  EXPECT_TRUE(contains(error, "extent #" + std::to_string(b.id)));
  EXPECT_TRUE(contains(error, "chunk 2"));
  EXPECT_TRUE(contains(error, engine.file_path(file) + " offset " + std::to_string(offset)));
  EXPECT_TRUE(contains(error, "dmesg"));
  EXPECT_LT(waited, 5.0) << "wait() must return as soon as the failed request completes";
  std::future<IoResult> cb = callback_result.get_future();
  ASSERT_EQ(cb.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const IoResult r = cb.get();
  EXPECT_FALSE(r.ok);
  EXPECT_TRUE(contains(error, r.error)) << "the callback sees the same error";

  // With the fault still in place, the extents around b read back intact.
  std::vector<uint8_t> a_back(a_data.size()), c_back(c_data.size());  // (100000), (70000)
  engine.read(a, a_back.data()).wait();
  engine.read(c, c_back.data()).wait();
  EXPECT_EQ(a_back, a_data);
  EXPECT_EQ(c_back, c_data);
  // A failed read loses nothing on disk: once the drive behaves, b reads back too.
  guard.reset();
  engine.read(b, back.data()).wait();
  EXPECT_EQ(back, b_data);
  std::printf("EIO on read: %zu bytes of the other extents and %zu of the victim compared\n",
              a_data.size() + c_data.size(), b_data.size());
}

TEST(NvmeInjectedFaults, EioOnWriteIsAClearErrorAndTheExtentIsRefused) {
  TempDir d0, d1;
  ASSERT_TRUE(d0.ok() && d1.ok());
  NvmeEngine engine(options_for({d0.path(), d1.path()}));
  SwapSpace swap(engine);
  const SwapFileWriter files(engine);
  ASSERT_TRUE(files.ok());
  const std::vector<uint8_t> a_data = random_bytes(200000, 51);  // (200000)
  const std::vector<uint8_t> b_old = random_bytes(300000, 52);   // (300000)
  const std::vector<uint8_t> b_new = random_bytes(300000, 53);   // (300000)
  Extent a = swap.allocate(a_data.size(), Category::param, "before");
  Extent b = swap.allocate(b_old.size(), Category::param, "victim");
  engine.write(a, a_data.data()).wait();
  engine.write(b, b_old.data()).wait();

  // Rewriting b fails at chunk 1 with EIO, leaving garbage there on disk.
  const auto [file, offset] = chunk_location(engine, b, 1);
  std::atomic<size_t> poison_failed{0};
  FilterGuard guard([&, file = file, offset = offset](const detail::Completion& cq) {
    if (!cq.is_write || cq.file != file || cq.file_offset != offset) return cq.res;
    if (!files.poison(cq.file, cq.file_offset, cq.request_bytes)) ++poison_failed;
    return -EIO;
  });
  std::string error;
  try {
    engine.write(b, b_new.data()).wait();
  } catch (const Error& ex) {
    error = ex.what();
  }
  std::printf("EIO on write: %s\n", error.c_str());
  EXPECT_EQ(poison_failed.load(), size_t{0});
  EXPECT_TRUE(contains(error, "NVMe write failed: Input/output error (errno 5)"));
  EXPECT_TRUE(contains(error, "extent #" + std::to_string(b.id)));
  EXPECT_TRUE(contains(error, "chunk 1"));
  EXPECT_TRUE(contains(error, engine.file_path(file) + " offset " + std::to_string(offset)));

  // The earlier extent is untouched.
  std::vector<uint8_t> a_back(a_data.size());  // (200000)
  engine.read(a, a_back.data()).wait();
  EXPECT_EQ(a_back, a_data);
  // docs/offload.md: an extent whose last write failed is not readable (neither the old nor a
  // half-written new version may come back as if it were good).
  std::vector<uint8_t> b_back(b_new.size());  // (300000)
  std::string refused;
  try {
    engine.read(b, b_back.data()).wait();
  } catch (const Error& ex) {
    refused = ex.what();
  }
  std::printf("read after the failed write: %s\n", refused.c_str());
  EXPECT_TRUE(contains(refused, "extent #" + std::to_string(b.id)));
  EXPECT_TRUE(contains(refused, "no completed write"));
  // Once the drive behaves, rewriting the extent makes it readable again.
  guard.reset();
  engine.write(b, b_new.data()).wait();
  engine.read(b, b_back.data()).wait();
  EXPECT_EQ(b_back, b_new);
}

TEST(NvmeInjectedFaults, PersistentEagainOrEintrGivesUpAfterMaxRetries) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  constexpr int kMaxRetries = 5;
  NvmeEngine engine(options_for({dir.path()}, kMaxRetries));
  SwapSpace swap(engine);
  const std::vector<uint8_t> x_data = random_bytes(300000, 61);  // (300000)
  const std::vector<uint8_t> y_data = random_bytes(300000, 62);  // (300000)
  Extent x = swap.allocate(x_data.size(), Category::param, "read keeps failing");
  Extent y = swap.allocate(y_data.size(), Category::param, "write keeps failing");
  engine.write(x, x_data.data()).wait();

  // Reads of chunk 3 of x and writes of chunk 0 of y never succeed.
  const auto [x_file, x_offset] = chunk_location(engine, x, 3);
  const auto [y_file, y_offset] = chunk_location(engine, y, 0);
  std::atomic<size_t> x_calls{0}, y_calls{0};
  FilterGuard guard([&, x_file = x_file, x_offset = x_offset, y_file = y_file,
                     y_offset = y_offset](const detail::Completion& c) {
    if (!c.is_write && c.file == x_file && c.file_offset == x_offset) {
      ++x_calls;
      return -EAGAIN;
    }
    if (c.is_write && c.file == y_file && c.file_offset == y_offset) {
      ++y_calls;
      return -EINTR;
    }
    return c.res;
  });

  auto error_of = [](const IoHandle& h) {
    try {
      h.wait();
    } catch (const Error& ex) {
      return std::string(ex.what());
    }
    return std::string("no error");
  };
  std::vector<uint8_t> back(x_data.size());  // (300000)
  size_t retries_before = engine.stats().retries;
  auto t0 = std::chrono::steady_clock::now();
  const std::string read_error = error_of(engine.read(x, back.data()));
  const double read_s = seconds_since(t0);
  const size_t read_retries = engine.stats().retries - retries_before;
  std::printf("persistent EAGAIN on read: %zu completions, %zu retries, %.3f s: %s\n",
              x_calls.load(), read_retries, read_s, read_error.c_str());
  EXPECT_TRUE(contains(read_error,
                       "NVMe read gave up after 5 retries (Resource temporarily "
                       "unavailable (errno 11))"));
  EXPECT_TRUE(contains(read_error, "extent #" + std::to_string(x.id)));
  EXPECT_TRUE(
      contains(read_error, engine.file_path(x_file) + " offset " + std::to_string(x_offset)));
  EXPECT_TRUE(contains(read_error, "(hint: "));
  EXPECT_EQ(x_calls.load(), size_t{kMaxRetries + 1}) << "the first try and max_retries retries";
  EXPECT_EQ(read_retries, size_t{kMaxRetries});
  EXPECT_LT(read_s, 5.0);

  retries_before = engine.stats().retries;
  t0 = std::chrono::steady_clock::now();
  const std::string write_error = error_of(engine.write(y, y_data.data()));
  const double write_s = seconds_since(t0);
  const size_t write_retries = engine.stats().retries - retries_before;
  std::printf("persistent EINTR on write: %zu completions, %zu retries, %.3f s: %s\n",
              y_calls.load(), write_retries, write_s, write_error.c_str());
  EXPECT_TRUE(contains(write_error,
                       "NVMe write gave up after 5 retries (Interrupted system call "
                       "(errno 4))"));
  EXPECT_TRUE(contains(write_error, "extent #" + std::to_string(y.id)));
  EXPECT_TRUE(
      contains(write_error, engine.file_path(y_file) + " offset " + std::to_string(y_offset)));
  EXPECT_EQ(y_calls.load(), size_t{kMaxRetries + 1});
  EXPECT_EQ(write_retries, size_t{kMaxRetries});
  EXPECT_LT(write_s, 5.0);
  EXPECT_THROW(engine.read(y, back.data()), Error) << "the failed write left y unreadable";

  // The fault gone, x (whose data on disk was never touched) reads back intact.
  guard.reset();
  engine.read(x, back.data()).wait();
  EXPECT_EQ(back, x_data);
}

TEST(NvmeInjectedFaults, ReadOfZeroBytesIsATruncatedFileError) {
  TempDir dir;
  ASSERT_TRUE(dir.ok());
  NvmeEngine engine(options_for({dir.path()}));
  SwapSpace swap(engine);
  const std::vector<uint8_t> data = random_bytes(150000, 71);  // (150000)
  Extent e = swap.allocate(data.size(), Category::param, "truncated");
  engine.write(e, data.data()).wait();
  const auto [file, offset] = chunk_location(engine, e, 1);
  FilterGuard guard([file = file, offset = offset](const detail::Completion& c) {
    return !c.is_write && c.file == file && c.file_offset == offset ? 0 : c.res;  // end of file
  });
  std::vector<uint8_t> back(data.size());  // (150000)
  std::string error;
  try {
    engine.read(e, back.data()).wait();
  } catch (const Error& ex) {
    error = ex.what();
  }
  std::printf("0-byte read: %s\n", error.c_str());
  EXPECT_TRUE(contains(error, "NVMe read hit the end of the swap file"));
  EXPECT_TRUE(contains(error, engine.file_path(file) + " offset " + std::to_string(offset)));
  EXPECT_TRUE(contains(error, "truncated"));
}

}  // namespace
}  // namespace tierzero::offload
