// NvmeEngine on io_uring (see nvme_engine.hpp for the contract).
// One ring per engine. Callers split an extent into stripe-unit requests and queue them; the
// ring is fed up to queue_depth requests, batched into one io_uring_submit. A completion thread
// reaps CQEs, retries what is retryable and tops the ring up again; completed reads go to a
// verifier thread that checks their checksums (and copies bounce buffers out). The reaper does no
// CPU-heavy work, so it stays a light sleeper that the scheduler wakes promptly and the queue
// stays full even when the CPUs are busy (bench io: with the CRC on the reaper, a loaded 2-core
// VM read at 0.85-0.9 of fio).
// Unaligned memory and padded tails go through the engine's registered bounce buffers; aligned
// memory goes to the drive directly (as a fixed buffer when it was registered).
#include "tierzero/offload/nvme_engine.hpp"

#include <fcntl.h>
#include <liburing.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "stale_swap.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/log.hpp"
#include "tierzero/core/memory_tracker.hpp"
#include "tierzero/offload/crc32c.hpp"
#include "tierzero/offload/host_pool.hpp"

namespace tierzero::offload {

namespace detail {

namespace {
int default_open(const char* path, int flags, unsigned mode) {
  return ::open(path, flags, static_cast<mode_t>(mode));
}
}  // namespace

OpenFn swap_open = default_open;

namespace {
// The completion filter (tests only). The flag keeps the cost of an unset filter to one relaxed
// load per completion; the mutex and shared_ptr make setting it safe even while I/O runs, since
// a filter being called stays alive until that call returns.
std::atomic<bool> completion_filter_set{false};
std::mutex completion_filter_mutex;
std::shared_ptr<const CompletionFilter> completion_filter;  // guarded by completion_filter_mutex

int filter_completion(const Completion& c) {
  std::shared_ptr<const CompletionFilter> f;
  {
    std::lock_guard<std::mutex> lock(completion_filter_mutex);
    f = completion_filter;
  }
  return f ? (*f)(c) : c.res;
}
}  // namespace

void set_completion_filter(CompletionFilter filter) {
  auto f = filter ? std::make_shared<const CompletionFilter>(std::move(filter)) : nullptr;
  std::lock_guard<std::mutex> lock(completion_filter_mutex);
  completion_filter_set.store(f != nullptr, std::memory_order_relaxed);
  completion_filter = std::move(f);
}

// One read or write of a whole extent, as seen by IoHandle.
struct IoOp {
  bool is_write = false;
  Extent extent;
  double timeout_s = 120.0;
  IoCallback callback;
  std::vector<uint32_t> crcs;  // (chunks) per-chunk CRC32C: computed (write) or expected (read)
  size_t remaining = 0;        // chunks not yet finished; guarded by the engine's mutex

  std::mutex mutex;  // guards done and result
  std::condition_variable cv;
  bool done = false;
  IoResult result;
};

}  // namespace detail

using detail::IoOp;

namespace {

constexpr uint64_t kShutdownTag = 1;  // user_data of the NOP that stops the completion thread
constexpr unsigned kExtraFixedSlots = 64;

std::string errno_name(int err) {
  return std::string(std::strerror(err)) + " (errno " + std::to_string(err) + ")";
}

std::string hint_for(int err) {
  switch (err) {
    case ENOSPC:
      return "the swap drive is full: free space there, add a drive to nvme_path, or keep more "
             "state in host memory";
    case EFBIG:
      return "the file size limit was reached (ulimit -f / RLIMIT_FSIZE, or the file system's "
             "largest file)";
    case EIO:
      return "the drive reported an I/O error; check dmesg and the drive's health";
    case EINVAL:
      return "the file system rejected the request; it may not support O_DIRECT with this "
             "alignment";
    case EACCES:
    case EPERM:
      return "check the permissions of the swap directory";
    default:
      return "see the OS error";
  }
}

// One request: the part of an extent that lies in one stripe unit.
struct Chunk {
  std::shared_ptr<IoOp> op;
  size_t index = 0;           // chunk number within the extent
  size_t file = 0;            // swap file index
  uint64_t file_offset = 0;   // where the chunk starts in that file
  size_t length = 0;          // on-disk bytes, a kIoAlignment multiple
  size_t logical = 0;         // of those, bytes of the extent's data
  std::byte* user = nullptr;  // caller memory for this chunk (logical bytes)
  int slot = -1;              // bounce buffer index, -1 when the caller's memory is used
  bool prepared = false;      // write checksum computed and bounce copy made
  size_t done = 0;            // bytes transferred so far (short transfers resume from here)
  int retries = 0;
};

}  // namespace

struct NvmeEngine::Impl {
  // Owns the private directories and files; its destructor removes them, on every path.
  struct SwapFiles {
    std::vector<std::string> dirs;
    std::vector<std::string> paths;
    std::vector<int> fds;
    ~SwapFiles() {
      for (int fd : fds) ::close(fd);
      for (const auto& p : paths) {
        if (::unlink(p.c_str()) != 0 && errno != ENOENT)
          log::warn("could not remove swap file " + p + ": " + errno_string());
      }
      for (const auto& d : dirs) {
        if (::rmdir(d.c_str()) != 0 && errno != ENOENT)
          log::warn("could not remove swap directory " + d + ": " + errno_string());
      }
    }
  };

  NvmeOptions opt;
  SwapFiles files;
  bool direct = true;
  std::unique_ptr<HostPool> own_pool;
  HostPool* pool = nullptr;
  std::vector<PinnedBuffer> bounce;  // (queue_depth) buffers of block_size bytes each

  io_uring ring{};
  bool ring_ready = false;
  bool sparse_buffers = false;  // extra fixed-buffer slots available for register_memory

  mutable std::mutex mutex;  // guards everything below, and the SQ side of the ring
  std::condition_variable idle_cv;
  std::deque<Chunk*> pending;  // queued, not yet submitted
  size_t inflight = 0;
  std::deque<Chunk*> verify_queue;  // completed reads for the verifier thread
  size_t verifying = 0;             // chunks handed to the verifier and not yet finished
  std::condition_variable verify_cv;
  bool verifier_stop = false;
  size_t inflight_sum = 0;  // inflight before each completion, summed (NvmeStats::mean_inflight)
  size_t completions = 0;   // completions reaped (successes, retries and failures alike)
  std::vector<int> free_slots;
  struct Region {
    size_t bytes;
    unsigned index;
  };
  std::map<uintptr_t, Region> regions;  // registered memory by start address
  std::vector<unsigned> free_fixed;     // unused fixed-buffer indices
  std::unordered_map<uint64_t, std::vector<uint32_t>> checksums;  // extent id -> chunk CRCs
  std::unordered_map<uint64_t, std::pair<uint64_t, size_t>> extent_shape;  // id -> offset, bytes
  NvmeStats stats;
  uint64_t reserved_end = 0;  // logical bytes preallocated so far
  bool preallocate = true;    // false once the file system refused fallocate
  std::thread reaper;
  std::thread verifier;

  explicit Impl(NvmeOptions o, HostPool* p);
  ~Impl();
  void open_files();
  void setup_ring();

  std::pair<size_t, uint64_t> locate(uint64_t logical) const {
    const uint64_t unit = logical / opt.block_size;
    const uint64_t n = files.fds.size();
    return {static_cast<size_t>(unit % n), (unit / n) * opt.block_size + logical % opt.block_size};
  }

  std::string describe(const IoOp& op, const Chunk& c) const {
    return "extent #" + std::to_string(op.extent.id) + " (" + std::to_string(op.extent.bytes) +
           " bytes at swap offset " + std::to_string(op.extent.offset) + "), chunk " +
           std::to_string(c.index) + ": file " + files.paths[c.file] + " offset " +
           std::to_string(c.file_offset) + ", " + std::to_string(c.length) + " bytes";
  }

  IoHandle start(bool is_write, const Extent& e, std::byte* user, IoCallback cb);
  void pump_locked();
  void complete_locked(Chunk* c, int res, std::vector<std::shared_ptr<IoOp>>& finished,
                       std::vector<Chunk*>& to_verify);
  std::string verify(Chunk* c) const;
  void chunk_finished_locked(Chunk* c, const std::string& error,
                             std::vector<std::shared_ptr<IoOp>>& finished);
  void reap_loop();
  void verify_loop();
  void stop_verifier();  // after the reaper: the verifier finishes what is queued, then exits
  bool idle_locked() const { return inflight == 0 && pending.empty() && verifying == 0; }
  static void finalize(const std::shared_ptr<IoOp>& op);
  int fixed_index_locked(const std::byte* p, size_t len) const;
};

NvmeEngine::Impl::Impl(NvmeOptions o, HostPool* p) : opt(std::move(o)), pool(p) {
  TZ_CHECK(!opt.directories.empty(), "NVMe engine needs at least one swap directory",
           "set zero_optimization.offload_*.nvme_path");
  TZ_CHECK(opt.block_size >= kIoAlignment && opt.block_size % kIoAlignment == 0,
           "aio.block_size " + std::to_string(opt.block_size) + " is not a positive multiple of " +
               std::to_string(kIoAlignment),
           "use a power of two such as 1048576");
  TZ_CHECK(opt.queue_depth >= 1 && opt.queue_depth <= 4096,
           "aio.queue_depth " + std::to_string(opt.queue_depth) + " is outside [1, 4096]",
           "8 to 64 suits most NVMe drives");
  open_files();
  if (!pool) {
    own_pool = std::make_unique<HostPool>(opt.queue_depth * HostPool::round_size(opt.block_size));
    pool = own_pool.get();
  }
  for (size_t i = 0; i < opt.queue_depth; ++i) {
    bounce.push_back(pool->allocate(opt.block_size, Category::io, "nvme bounce buffer"));
    free_slots.push_back(static_cast<int>(i));
  }
  try {
    setup_ring();
  } catch (...) {
    if (ring_ready) io_uring_queue_exit(&ring);
    throw;
  }
  verifier = std::thread([this] { verify_loop(); });
  try {
    reaper = std::thread([this] { reap_loop(); });
  } catch (...) {
    stop_verifier();
    io_uring_queue_exit(&ring);
    throw;
  }
}

void NvmeEngine::Impl::stop_verifier() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    verifier_stop = true;
  }
  verify_cv.notify_all();
  if (verifier.joinable()) verifier.join();
}

void NvmeEngine::Impl::open_files() {
  for (const std::string& dir : opt.directories) {
    struct stat st {};
    if (::stat(dir.c_str(), &st) != 0) {
      TZ_THROW("swap directory '" + dir + "' is not usable: " + errno_string(),
               errno == ENOENT ? "create it, or fix nvme_path" : "check the path and permissions");
    }
    TZ_CHECK(S_ISDIR(st.st_mode), "swap path '" + dir + "' is not a directory",
             "nvme_path must name directories, one per drive");
    detail::remove_stale_swap_dirs(dir, opt.stale_swap_min_age_s);
    std::string templ = dir + "/tierzero-swap-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());  // (templ.size() + 1) for mkdtemp
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) {
      TZ_THROW("cannot create a private swap directory in '" + dir + "': " + errno_string(),
               hint_for(errno));
    }
    files.dirs.emplace_back(buf.data());  // mkdtemp makes it mode 0700
    const std::string path = files.dirs.back() + "/swap.bin";
    const int base = O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC;
    int fd = -1;
    bool file_direct = false;
    if (opt.direct_io == DirectIo::automatic) {
      fd = detail::swap_open(path.c_str(), base | O_DIRECT, 0600);
      file_direct = fd >= 0;
      if (fd < 0 && errno == EINVAL) {
        log::warn("the file system of '" + dir +
                  "' does not support O_DIRECT; using buffered I/O there (slower, and it goes "
                  "through the page cache)");
      } else if (fd < 0) {
        TZ_THROW("cannot create swap file " + path + ": " + errno_string(), hint_for(errno));
      }
    }
    if (fd < 0) fd = detail::swap_open(path.c_str(), base, 0600);
    if (fd < 0)
      TZ_THROW("cannot create swap file " + path + ": " + errno_string(), hint_for(errno));
    files.paths.push_back(path);
    files.fds.push_back(fd);
    detail::lock_swap_file(fd, path);  // held until the process ends: marks the file as live
    direct = direct && file_direct;
  }
}

void NvmeEngine::Impl::setup_ring() {
  const auto entries = static_cast<unsigned>(std::max<size_t>(opt.queue_depth, 8));
  int ret = io_uring_queue_init(entries, &ring, 0);
  if (ret < 0) {
    TZ_THROW("io_uring_queue_init(" + std::to_string(entries) + ") failed: " + errno_name(-ret),
             "io_uring may be disabled (sysctl kernel.io_uring_disabled, or a container's "
             "seccomp profile)");
  }
  ring_ready = true;
  ret = io_uring_register_files(&ring, files.fds.data(), static_cast<unsigned>(files.fds.size()));
  if (ret < 0) TZ_THROW("io_uring_register_files failed: " + errno_name(-ret), hint_for(-ret));

  const auto slots = static_cast<unsigned>(opt.queue_depth) + kExtraFixedSlots;
  ret = io_uring_register_buffers_sparse(&ring, slots);
  std::vector<iovec> iov(bounce.size());  // (queue_depth) the bounce buffers
  for (size_t i = 0; i < bounce.size(); ++i) iov[i] = {bounce[i].data(), opt.block_size};
  if (ret == 0) {
    sparse_buffers = true;
    ret = io_uring_register_buffers_update_tag(&ring, 0, iov.data(), nullptr,
                                               static_cast<unsigned>(iov.size()));
    if (ret >= 0) ret = 0;
    for (unsigned i = slots; i > iov.size(); --i) free_fixed.push_back(i - 1);
  } else {
    // Older kernels: a fixed table of just the bounce buffers.
    ret = io_uring_register_buffers(&ring, iov.data(), static_cast<unsigned>(iov.size()));
  }
  if (ret < 0) {
    TZ_THROW("io_uring buffer registration (" + format_bytes(opt.queue_depth * opt.block_size) +
                 ") failed: " + errno_name(-ret),
             "raise the locked-memory limit (ulimit -l) or lower aio.queue_depth / block_size");
  }
}

NvmeEngine::Impl::~Impl() {
  {
    std::unique_lock<std::mutex> lock(mutex);
    const auto limit = std::chrono::duration<double>(opt.io_timeout_s);
    if (!idle_cv.wait_for(lock, limit, [&] { return idle_locked(); })) {
      log::error("NVMe engine closing with " + std::to_string(inflight) +
                 " requests still in flight after " + std::to_string(opt.io_timeout_s) +
                 " s; the drive is stalled");
    }
    for (Chunk* c : pending) delete c;
    pending.clear();
    if (reaper.joinable()) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, kShutdownTag);
        int ret = io_uring_submit(&ring);
        if (ret < 0) log::error("io_uring_submit of the shutdown NOP failed: " + errno_name(-ret));
      }
    }
  }
  if (reaper.joinable()) reaper.join();
  stop_verifier();
  if (ring_ready) io_uring_queue_exit(&ring);  // also drops registered files and buffers
}

int NvmeEngine::Impl::fixed_index_locked(const std::byte* p, size_t len) const {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  auto it = regions.upper_bound(addr);
  if (it == regions.begin()) return -1;
  --it;
  if (addr + len <= it->first + it->second.bytes) return static_cast<int>(it->second.index);
  return -1;
}

IoHandle NvmeEngine::Impl::start(bool is_write, const Extent& e, std::byte* user, IoCallback cb) {
  TZ_CHECK(e.offset % kIoAlignment == 0 && e.padded % kIoAlignment == 0 && e.padded >= e.bytes,
           "extent #" + std::to_string(e.id) + " (offset " + std::to_string(e.offset) + ", bytes " +
               std::to_string(e.bytes) + ", padded " + std::to_string(e.padded) +
               ") is not 4 KiB aligned or its padded size is too small",
           "allocate extents through SwapSpace");
  TZ_CHECK(user != nullptr || e.bytes == 0, "null buffer for extent #" + std::to_string(e.id),
           "pass the tensor's host memory");
  auto op = std::make_shared<IoOp>();
  op->is_write = is_write;
  op->extent = e;
  op->timeout_s = opt.io_timeout_s;
  op->callback = std::move(cb);

  // Split at stripe-unit boundaries.
  std::vector<Chunk*> chunks;
  for (uint64_t pos = e.offset; pos < e.offset + e.padded;) {
    const uint64_t next =
        std::min<uint64_t>(e.offset + e.padded, (pos / opt.block_size + 1) * opt.block_size);
    auto* c = new Chunk();
    c->op = op;
    c->index = chunks.size();
    std::tie(c->file, c->file_offset) = locate(pos);
    c->length = static_cast<size_t>(next - pos);
    const uint64_t rel = pos - e.offset;
    c->logical =
        rel >= e.bytes ? 0 : static_cast<size_t>(std::min<uint64_t>(c->length, e.bytes - rel));
    c->user = user ? user + rel : nullptr;
    chunks.push_back(c);
    pos = next;
  }
  op->remaining = chunks.size();
  op->crcs.assign(chunks.size(), 0);
  IoHandle handle(op);
  std::unique_lock<std::mutex> lock(mutex);
  if (!is_write) {
    auto it = checksums.find(e.id);
    auto shape = extent_shape.find(e.id);
    if (it == checksums.end() || shape == extent_shape.end() ||
        shape->second != std::make_pair(e.offset, e.bytes) || it->second.size() != chunks.size()) {
      for (Chunk* c : chunks) delete c;
      TZ_THROW("read of extent #" + std::to_string(e.id) + " (" + std::to_string(e.bytes) +
                   " bytes at swap offset " + std::to_string(e.offset) +
                   "), which has no completed write",
               "an extent must be written (and the write waited for) before it is read; if its "
               "write failed, its data is lost");
    }
    op->crcs = it->second;
  }
  if (chunks.empty()) {
    lock.unlock();
    finalize(op);
    return handle;
  }
  for (Chunk* c : chunks) pending.push_back(c);
  pump_locked();
  return handle;
}

// Moves queued requests into the ring while there is room; one io_uring_submit per batch.
void NvmeEngine::Impl::pump_locked() {
  // Submitting every few SQEs lets the drive start on the first requests while we prepare more.
  constexpr unsigned kSubmitBatch = 8;
  unsigned queued = 0;
  auto submit = [&] {
    for (int attempt = 0; queued > 0; ++attempt) {
      int ret = io_uring_submit(&ring);
      ++stats.submit_calls;
      if (ret >= 0) {
        queued -= std::min(queued, static_cast<unsigned>(ret));
        if (ret == 0) std::this_thread::sleep_for(std::chrono::microseconds(100));
      } else if ((ret == -EAGAIN || ret == -EBUSY || ret == -EINTR) && attempt < 10000) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));  // kernel short of memory
      } else {
        TZ_THROW("io_uring_submit failed: " + errno_name(-ret), hint_for(-ret));
      }
      TZ_CHECK(attempt < 10000, "io_uring_submit made no progress for 1 s",
               "the kernel is out of memory for I/O requests");
    }
  };
  while (!pending.empty() && inflight < opt.queue_depth) {
    Chunk* c = pending.front();
    const bool aligned = reinterpret_cast<uintptr_t>(c->user) % kIoAlignment == 0;
    const bool needs_bounce = c->logical != c->length || !aligned;
    if (needs_bounce && c->slot < 0) {
      if (free_slots.empty()) break;
      c->slot = free_slots.back();
      free_slots.pop_back();
    }
    std::byte* io = c->slot >= 0 ? bounce[static_cast<size_t>(c->slot)].bytes_ptr() : c->user;
    IoOp& op = *c->op;
    if (op.is_write && !c->prepared) {
      if (opt.checksums) op.crcs[c->index] = crc32c(c->user, c->logical);
      if (c->slot >= 0) {
        if (c->logical) std::memcpy(io, c->user, c->logical);
        std::memset(io + c->logical, 0, c->length - c->logical);  // the padded tail
        ++stats.bounce_copies;
      }
      c->prepared = true;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) {
      submit();
      sqe = io_uring_get_sqe(&ring);
      if (!sqe) break;
    }
    const int fixed = c->slot >= 0 ? c->slot : fixed_index_locked(c->user, c->length);
    const auto fd = static_cast<int>(c->file);
    std::byte* buf = io + c->done;
    const auto len = static_cast<unsigned>(c->length - c->done);
    const uint64_t off = c->file_offset + c->done;
    if (op.is_write) {
      if (fixed >= 0)
        io_uring_prep_write_fixed(sqe, fd, buf, len, off, fixed);
      else
        io_uring_prep_write(sqe, fd, buf, len, off);
    } else {
      if (fixed >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, len, off, fixed);
      else
        io_uring_prep_read(sqe, fd, buf, len, off);
    }
    io_uring_sqe_set_flags(sqe, IOSQE_FIXED_FILE);
    io_uring_sqe_set_data(sqe, c);
    pending.pop_front();
    ++inflight;
    stats.max_inflight = std::max(stats.max_inflight, inflight);
    ++queued;
    if (opt.single_submit || queued >= kSubmitBatch) submit();
  }
  submit();
}

void NvmeEngine::Impl::chunk_finished_locked(Chunk* c, const std::string& error,
                                             std::vector<std::shared_ptr<IoOp>>& finished) {
  std::shared_ptr<IoOp> op = std::move(c->op);
  if (c->slot >= 0) free_slots.push_back(c->slot);
  delete c;
  {
    std::lock_guard<std::mutex> op_lock(op->mutex);
    if (!error.empty() && op->result.ok) {
      op->result.ok = false;
      op->result.error = error;
    }
  }
  if (--op->remaining > 0) return;
  if (op->is_write) {
    // Only a fully written extent can be read; a failed write forgets the old contents too.
    if (op->result.ok) {
      checksums[op->extent.id] = op->crcs;
      extent_shape[op->extent.id] = {op->extent.offset, op->extent.bytes};
    } else {
      checksums.erase(op->extent.id);
      extent_shape.erase(op->extent.id);
    }
  }
  if (op->result.ok) op->result.bytes = op->extent.bytes;
  finished.push_back(std::move(op));
}

void NvmeEngine::Impl::complete_locked(Chunk* c, int res,
                                       std::vector<std::shared_ptr<IoOp>>& finished,
                                       std::vector<Chunk*>& to_verify) {
  inflight_sum += inflight;
  ++completions;
  --inflight;
  IoOp& op = *c->op;
  const char* verb = op.is_write ? "write" : "read";
  if (detail::completion_filter_set.load(std::memory_order_relaxed)) {  // tests only
    std::byte* io = c->slot >= 0 ? bounce[static_cast<size_t>(c->slot)].bytes_ptr() : c->user;
    res = detail::filter_completion(
        {op.is_write, c->file, c->file_offset + c->done, io + c->done, c->length - c->done, res});
  }
  if (res == -EINTR || res == -EAGAIN ||
      (res >= 0 && static_cast<size_t>(res) + c->done < c->length)) {
    if (res > 0) c->done += static_cast<size_t>(res);
    if (res == 0 && !op.is_write) {
      chunk_finished_locked(c,
                            std::string("NVMe read hit the end of the swap file: ") +
                                describe(op, *c) + " (hint: the swap file was truncated)",
                            finished);
      return;
    }
    if (++c->retries > opt.max_retries) {
      chunk_finished_locked(c,
                            std::string("NVMe ") + verb + " gave up after " +
                                std::to_string(opt.max_retries) + " retries (" +
                                (res < 0 ? errno_name(-res) : "short transfers") +
                                "): " + describe(op, *c) +
                                " (hint: the request kept failing with errors that are "
                                "normally transient; check dmesg and the drive's health)",
                            finished);
      return;
    }
    ++stats.retries;
    pending.push_front(c);  // keeps its bounce buffer and progress
    return;
  }
  if (res < 0) {
    chunk_finished_locked(c,
                          std::string("NVMe ") + verb + " failed: " + errno_name(-res) + ": " +
                              describe(op, *c) + " (hint: " + hint_for(-res) + ")",
                          finished);
    return;
  }
  ++stats.requests;
  if (op.is_write) {
    stats.bytes_written += c->length;
    chunk_finished_locked(c, {}, finished);
    return;
  }
  stats.bytes_read += c->length;
  if (!opt.checksums && c->slot < 0) {
    chunk_finished_locked(c, {}, finished);  // nothing to check or copy
    return;
  }
  to_verify.push_back(c);  // for the verifier thread, once the ring is topped up again
}

// Checks a completed read's CRC32C and copies it out of its bounce buffer. Runs without the
// engine's lock, on the verifier thread: a chunk taken from verify_queue belongs to it until
// chunk_finished_locked (nothing else holds a pointer to it), and the expected checksums,
// bounce buffers and file names do not change while requests exist.
std::string NvmeEngine::Impl::verify(Chunk* c) const {
  const IoOp& op = *c->op;
  const std::byte* io = c->slot >= 0 ? bounce[static_cast<size_t>(c->slot)].bytes_ptr() : c->user;
  const uint32_t got = opt.checksums ? crc32c(io, c->logical) : 0;
  if (opt.checksums && got != op.crcs[c->index]) {
    char buf[96];
    std::snprintf(buf, sizeof buf, "stored 0x%08X, read 0x%08X", op.crcs[c->index], got);
    return "CRC32C mismatch reading " + describe(op, *c) + ": " + buf +
           " (hint: the swap file was modified or the drive returned corrupt data; this "
           "extent's data is lost)";
  }
  if (c->slot >= 0 && c->logical) std::memcpy(c->user, io, c->logical);
  return {};
}

void NvmeEngine::Impl::finalize(const std::shared_ptr<IoOp>& op) {
  IoResult result;
  {
    std::lock_guard<std::mutex> lock(op->mutex);
    op->done = true;
    result = op->result;
  }
  op->cv.notify_all();
  if (op->callback) {
    try {
      op->callback(result);
    } catch (const std::exception& ex) {
      log::error(std::string("an I/O completion callback threw: ") + ex.what());
    }
  }
}

void NvmeEngine::Impl::reap_loop() {
  bool stop = false;
  std::vector<std::shared_ptr<IoOp>> finished;
  std::vector<Chunk*> to_verify;  // completed reads awaiting their checksum check
  while (!stop) {
    io_uring_cqe* cqe = nullptr;
    // Blocks until a completion; bounded because the destructor always submits a NOP.
    int ret = io_uring_wait_cqe(&ring, &cqe);
    if (ret == -EINTR || ret == -EAGAIN) continue;
    if (ret < 0) {
      log::error("io_uring_wait_cqe failed: " + errno_name(-ret));
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      continue;
    }
    bool wake_verifier = false;
    {
      std::lock_guard<std::mutex> lock(mutex);
      unsigned head = 0, seen = 0;
      io_uring_for_each_cqe(&ring, head, cqe) {
        ++seen;
        if (io_uring_cqe_get_data64(cqe) == kShutdownTag) {
          stop = true;
          continue;
        }
        complete_locked(static_cast<Chunk*>(io_uring_cqe_get_data(cqe)), cqe->res, finished,
                        to_verify);
      }
      io_uring_cq_advance(&ring, seen);
      try {
        pump_locked();
      } catch (const Error& ex) {
        // Requests stay queued; the next completion or new request retries the submission.
        log::error(ex.what());
      }
      if (!to_verify.empty()) {
        verify_queue.insert(verify_queue.end(), to_verify.begin(), to_verify.end());
        verifying += to_verify.size();
        to_verify.clear();
        wake_verifier = true;
      }
      if (idle_locked()) idle_cv.notify_all();
    }
    if (wake_verifier) verify_cv.notify_one();
    for (const auto& op : finished) finalize(op);
    finished.clear();
  }
}

// Checks completed reads handed over by the reaper, outside the engine's lock, then finishes
// them (which may free bounce buffers, so the ring is topped up again) and runs completions.
void NvmeEngine::Impl::verify_loop() {
  std::vector<std::shared_ptr<IoOp>> finished;
  std::vector<Chunk*> batch;  // taken from verify_queue
  std::vector<std::string> errors;
  std::unique_lock<std::mutex> lock(mutex);
  for (;;) {
    verify_cv.wait(lock, [&] { return verifier_stop || !verify_queue.empty(); });
    if (verify_queue.empty()) return;  // asked to stop and nothing is left
    batch.assign(verify_queue.begin(), verify_queue.end());
    verify_queue.clear();
    lock.unlock();
    errors.clear();
    for (Chunk* c : batch) errors.push_back(verify(c));
    lock.lock();
    for (size_t i = 0; i < batch.size(); ++i) chunk_finished_locked(batch[i], errors[i], finished);
    verifying -= batch.size();
    try {
      pump_locked();  // bounce buffers were freed
    } catch (const Error& ex) {
      log::error(ex.what());
    }
    if (idle_locked()) idle_cv.notify_all();
    lock.unlock();
    for (const auto& op : finished) finalize(op);
    finished.clear();
    lock.lock();
  }
}

// IoHandle

bool IoHandle::poll() const {
  if (!op_) return true;
  std::lock_guard<std::mutex> lock(op_->mutex);
  return op_->done;
}

IoResult IoHandle::result() const {
  if (!op_) return {};
  std::lock_guard<std::mutex> lock(op_->mutex);
  return op_->result;
}

void IoHandle::wait() const {
  if (!op_) return;
  std::unique_lock<std::mutex> lock(op_->mutex);
  const auto limit = std::chrono::duration<double>(op_->timeout_s);
  if (!op_->cv.wait_for(lock, limit, [&] { return op_->done; })) {
    TZ_THROW("NVMe " + std::string(op_->is_write ? "write" : "read") + " of extent #" +
                 std::to_string(op_->extent.id) + " (" + std::to_string(op_->extent.bytes) +
                 " bytes at swap offset " + std::to_string(op_->extent.offset) +
                 ") did not finish within " + std::to_string(op_->timeout_s) + " s",
             "the drive is stalled or badly overloaded; check dmesg");
  }
  if (!op_->result.ok) throw Error(op_->result.error, "nvme_engine.cpp, tier nvme");
}

// NvmeEngine

NvmeEngine::NvmeEngine(NvmeOptions options, HostPool* pool)
    : impl_(std::make_unique<Impl>(std::move(options), pool)) {}

NvmeEngine::~NvmeEngine() = default;

IoHandle NvmeEngine::write(const Extent& extent, const void* src, IoCallback on_done) {
  // The engine never writes through this pointer; the cast only shares Chunk's field.
  return impl_->start(true, extent, const_cast<std::byte*>(static_cast<const std::byte*>(src)),
                      std::move(on_done));
}

IoHandle NvmeEngine::read(const Extent& extent, void* dst, IoCallback on_done) {
  return impl_->start(false, extent, static_cast<std::byte*>(dst), std::move(on_done));
}

void NvmeEngine::register_memory(void* ptr, size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  // The kernel caps one fixed buffer at 1 GiB; larger memory simply stays unregistered.
  if (!impl_->sparse_buffers || impl_->free_fixed.empty() || bytes > (size_t{1} << 30) ||
      bytes == 0)
    return;
  const unsigned index = impl_->free_fixed.back();
  iovec iov{ptr, bytes};
  int ret = io_uring_register_buffers_update_tag(&impl_->ring, index, &iov, nullptr, 1);
  if (ret < 0) {
    log::warn("io_uring could not register " + format_bytes(bytes) +
              " as a fixed buffer: " + errno_name(-ret) + "; it is used unregistered");
    return;
  }
  impl_->free_fixed.pop_back();
  impl_->regions[reinterpret_cast<uintptr_t>(ptr)] = {bytes, index};
}

void NvmeEngine::unregister_memory(void* ptr) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  auto it = impl_->regions.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == impl_->regions.end()) return;
  iovec iov{nullptr, 0};  // an empty entry clears the slot
  int ret = io_uring_register_buffers_update_tag(&impl_->ring, it->second.index, &iov, nullptr, 1);
  if (ret < 0) log::warn("io_uring could not unregister a fixed buffer: " + errno_name(-ret));
  impl_->free_fixed.push_back(it->second.index);
  impl_->regions.erase(it);
}

void NvmeEngine::forget(const Extent& extent) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->checksums.erase(extent.id);
  impl_->extent_shape.erase(extent.id);
}

void NvmeEngine::reserve(uint64_t logical_end) {
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  if (!m.preallocate || logical_end <= m.reserved_end) return;
  const uint64_t n = m.files.fds.size();
  const uint64_t unit = m.opt.block_size;
  constexpr uint64_t kMinStep = uint64_t{16} << 20;
  uint64_t target =
      std::max({logical_end, m.reserved_end + m.reserved_end / 8, m.reserved_end + kMinStep});
  target = (target + unit * n - 1) / (unit * n) * (unit * n);  // whole stripes
  const auto file_bytes = static_cast<off_t>(target / n);
  for (size_t f = 0; f < n; ++f) {
    if (::fallocate(m.files.fds[f], 0, 0, file_bytes) == 0) continue;
    const int err = errno;
    m.preallocate = false;
    if (err == EOPNOTSUPP || err == ENOSYS) {
      log::debug("swap file " + m.files.paths[f] + " cannot be preallocated: " + errno_name(err));
    } else {
      log::warn("preallocating swap file " + m.files.paths[f] + " to " +
                format_bytes(static_cast<size_t>(file_bytes)) + " failed: " + errno_name(err) +
                "; writes beyond the current end may fail the same way (" + hint_for(err) + ")");
    }
    return;
  }
  m.reserved_end = target;
}

const NvmeOptions& NvmeEngine::options() const {
  return impl_->opt;
}
bool NvmeEngine::direct_io() const {
  return impl_->direct;
}
size_t NvmeEngine::file_count() const {
  return impl_->files.paths.size();
}
std::string NvmeEngine::file_path(size_t i) const {
  return impl_->files.paths.at(i);
}
std::pair<size_t, uint64_t> NvmeEngine::locate(uint64_t logical_offset) const {
  return impl_->locate(logical_offset);
}
NvmeStats NvmeEngine::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  NvmeStats st = impl_->stats;
  const size_t n = impl_->completions;
  st.mean_inflight = n ? static_cast<double>(impl_->inflight_sum) / static_cast<double>(n) : 0.0;
  return st;
}

}  // namespace tierzero::offload
