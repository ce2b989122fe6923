// The CPU device: host memory from aligned_alloc, worker-thread streams, and events that mark
// points in them. It lets every layer above run the same code on a machine without a GPU, which
// is also how the fp32 reference path runs; because its streams are really asynchronous, the
// overlap logic above (copies, collectives and compute ordered by events) runs and is tested
// without a GPU too.
//  - create_stream(): a stream with its own worker thread that runs its tasks in FIFO order.
//  - default_stream(): inline. Work issued on it runs at once on the caller's thread, because the
//    kernels compute there (with OpenMP); a hand-off to a thread per kernel would only cost.
//  - A task that throws fails its worker stream: later tasks are skipped (they may depend on it),
//    events recorded later still complete but carry the failure, and synchronize() rethrows it.
#include <omp.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <mutex>
#include <thread>
#include <utility>

#include "task_failure.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/core/out_of_memory.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/host_waits.hpp"

namespace tierzero {

namespace {

using Clock = std::chrono::steady_clock;

using device_detail::capture_task_failure;
// The error a failed task left on its stream (see task_failure.hpp).
using Failure = device_detail::TaskFailure;

// One record of an event: the point a stream's work must reach. Shared by the event, the stream
// that completes it and every wait that refers to it, so re-recording the event (a new Marker)
// never changes what an earlier wait waits for.
class Marker {
 public:
  void complete(Failure failure) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
      when_ = Clock::now();
      failure_ = std::move(failure);
    }
    cv_.notify_all();
  }

  bool query() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (done_ && failure_) throw Error(*failure_);
    return done_;
  }

  void wait() {
    std::unique_lock<std::mutex> lock(mutex_);
    cv_.wait(lock, [this] { return done_; });
    if (failure_) throw Error(*failure_);
  }

  Clock::time_point when() {
    wait();
    std::lock_guard<std::mutex> lock(mutex_);
    return when_;
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  Clock::time_point when_{};
  Failure failure_;
};

std::shared_ptr<Marker> completed_marker() {
  auto marker = std::make_shared<Marker>();
  marker->complete(nullptr);
  return marker;
}

// The queue of a worker stream and the thread's loop over it. Shared by the stream and its
// thread, so that the thread can finish draining even if it must be detached.
class Worker {
 public:
  void enqueue(std::function<void()> work) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      TZ_CHECK(!stop_, "work issued on a CPU stream that is being destroyed",
               "issue work only on streams that outlive the call");
      queue_.push_back(Task{std::move(work), nullptr});
      ++issued_;
    }
    queued_cv_.notify_one();
  }

  std::shared_ptr<Marker> mark() {
    auto marker = std::make_shared<Marker>();
    Failure failure;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (issued_ != finished_) {
        queue_.push_back(Task{nullptr, marker});
        ++issued_;
        queued_cv_.notify_one();
        return marker;
      }
      failure = failure_;  // idle: the point is already reached
    }
    marker->complete(std::move(failure));
    return marker;
  }

  void synchronize() {
    std::unique_lock<std::mutex> lock(mutex_);
    const uint64_t target = issued_;
    done_cv_.wait(lock, [&] { return finished_ >= target; });
    if (failure_) throw Error(*failure_);
  }

  void stop() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    queued_cv_.notify_all();
  }

  void run() {
    for (;;) {
      Task task;
      Failure failure;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        queued_cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (queue_.empty()) return;  // stopped and drained
        task = std::move(queue_.front());
        queue_.pop_front();
        failure = failure_;
      }
      if (task.marker) {
        task.marker->complete(failure);
      } else if (!failure) {
        try {
          task.work();
        } catch (...) {
          Failure caught = capture_task_failure(std::current_exception());
          std::lock_guard<std::mutex> lock(mutex_);
          failure_ = std::move(caught);
        }
      }
      // What the task captured (buffers, promises) is released before synchronize() returns.
      task = Task{};
      {
        std::lock_guard<std::mutex> lock(mutex_);
        ++finished_;
      }
      done_cv_.notify_all();
    }
  }

 private:
  struct Task {
    std::function<void()> work;      // skipped once the stream has failed
    std::shared_ptr<Marker> marker;  // instead of work: completed, with the failure if any
  };

  std::mutex mutex_;
  std::condition_variable queued_cv_;  // work arrived, or stop
  std::condition_variable done_cv_;    // finished_ advanced
  std::deque<Task> queue_;
  uint64_t issued_ = 0;    // tasks and markers enqueued
  uint64_t finished_ = 0;  // of those, run (or skipped)
  bool stop_ = false;
  Failure failure_;  // the first task failure; sticky
};

class CpuStream final : public Stream {
 public:
  // worker: a stream with its own thread; otherwise the inline default stream.
  explicit CpuStream(bool worker) {
    if (!worker) return;
    worker_ = std::make_shared<Worker>();
    thread_ = std::thread([state = worker_] { state->run(); });
  }

  ~CpuStream() override {
    if (!worker_) return;
    worker_->stop();
    if (thread_.get_id() == std::this_thread::get_id()) {
      // A task destroying its own stream: joining would wait for itself. The thread holds the
      // queue, so it drains the rest and ends on its own.
      thread_.detach();
      return;
    }
    thread_.join();  // the loop drains the queue before it returns
  }

  CpuStream(const CpuStream&) = delete;
  CpuStream& operator=(const CpuStream&) = delete;

  bool is_inline() const { return worker_ == nullptr; }

  // Runs `work` in stream order: at once on the inline stream, else on the worker.
  void submit(std::function<void()> work) {
    if (!worker_) {
      work();
      return;
    }
    worker_->enqueue(std::move(work));
  }

  // A marker that completes when the work issued so far has run.
  std::shared_ptr<Marker> mark() { return worker_ ? worker_->mark() : completed_marker(); }

  void synchronize() override {
    count_host_wait();
    if (!worker_) return;  // inline work has run before its call returned
    TZ_CHECK(thread_.get_id() != std::this_thread::get_id(),
             "Stream::synchronize called by a task of the same stream, which would wait forever",
             "a host_task must not synchronize its own stream; record an event instead");
    worker_->synchronize();
  }

  void* native() override { return nullptr; }

 private:
  std::shared_ptr<Worker> worker_;  // null for the inline stream
  std::thread thread_;
};

// Streams of another backend cannot order CPU work (as CUDA refuses foreign streams).
CpuStream& as_cpu_stream(Stream& stream, const char* operation) {
  auto* cpu_stream = dynamic_cast<CpuStream*>(&stream);
  TZ_CHECK(cpu_stream != nullptr,
           std::string(operation) + ": the stream does not belong to the CPU backend",
           "use streams created by the CPU device (default_stream() or create_stream())");
  return *cpu_stream;
}

class CpuEvent final : public Event {
 public:
  void record(Stream& stream) override {
    std::shared_ptr<Marker> marker = as_cpu_stream(stream, "Event::record").mark();
    std::lock_guard<std::mutex> lock(mutex_);
    marker_ = std::move(marker);
  }

  bool query() override {
    std::shared_ptr<Marker> marker = current();
    return marker == nullptr || marker->query();
  }

  void synchronize() override {
    count_host_wait();
    if (std::shared_ptr<Marker> marker = current()) marker->wait();
  }

  void make_wait(Stream& stream) override {
    CpuStream& cpu_stream = as_cpu_stream(stream, "Event::make_wait");
    std::shared_ptr<Marker> marker = current();
    if (marker == nullptr) return;  // never recorded: complete
    if (cpu_stream.is_inline()) {
      marker->wait();  // the caller's thread is that stream
      return;
    }
    // A failure of the awaited work fails this stream too: its later work depends on it.
    cpu_stream.submit([marker] { marker->wait(); });
  }

  double elapsed_ms_since(Event& start) override {
    auto* start_event = dynamic_cast<CpuEvent*>(&start);
    TZ_CHECK(start_event != nullptr, "elapsed_ms_since: the start event is not a CPU event",
             "time CPU work with two events of the CPU device");
    std::shared_ptr<Marker> end_marker = current();
    std::shared_ptr<Marker> start_marker = start_event->current();
    TZ_CHECK(end_marker != nullptr && start_marker != nullptr,
             "elapsed_ms_since: both events must have been recorded",
             "call record(stream) on the start and the end event first");
    const Clock::time_point end_time = end_marker->when();
    const Clock::time_point start_time = start_marker->when();
    return std::chrono::duration<double, std::milli>(end_time - start_time).count();
  }

 private:
  std::shared_ptr<Marker> current() {
    std::lock_guard<std::mutex> lock(mutex_);
    return marker_;
  }

  std::mutex mutex_;
  std::shared_ptr<Marker> marker_;  // the most recent record; null before the first
};

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(int threads) : kernels_(kernels::make_cpu_kernels()) {
    if (threads > 0) omp_set_num_threads(threads);
  }
  DeviceKind kind() const override { return DeviceKind::cpu; }
  int index() const override { return 0; }
  std::string name() const override {
    return "cpu (" + std::to_string(omp_get_max_threads()) + " threads)";
  }
  size_t total_memory() const override {
    long pages = sysconf(_SC_PHYS_PAGES);
    long page = sysconf(_SC_PAGE_SIZE);
    return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
  }

  void* raw_alloc(size_t bytes) override {
    constexpr size_t kAlign = 4096;  // page-aligned: O_DIRECT-capable and SIMD-friendly
    size_t rounded = (bytes + kAlign - 1) / kAlign * kAlign;
    void* p = std::aligned_alloc(kAlign, rounded == 0 ? kAlign : rounded);
    if (!p)
      TZ_THROW_OUT_OF_MEMORY("cpu device: allocation of " + std::to_string(bytes) + " bytes failed",
                             "the machine is out of memory; lower the batch size or offload more");
    return p;
  }
  void raw_free(void* ptr) override { std::free(ptr); }

  void register_host(void*, size_t) override {}
  void unregister_host(void*) override {}

  void copy(void* dst, const void* src, size_t bytes, CopyKind, Stream& stream) override {
    CpuStream& cpu_stream = as_cpu_stream(stream, "Device::copy");
    if (bytes == 0) return;
    if (cpu_stream.is_inline()) {
      std::memcpy(dst, src, bytes);
      return;
    }
    cpu_stream.submit([dst, src, bytes] { std::memcpy(dst, src, bytes); });
  }

  void fill_zero(void* dst, size_t bytes, Stream& stream) override {
    CpuStream& cpu_stream = as_cpu_stream(stream, "Device::fill_zero");
    if (bytes == 0) return;
    if (cpu_stream.is_inline()) {
      std::memset(dst, 0, bytes);
      return;
    }
    cpu_stream.submit([dst, bytes] { std::memset(dst, 0, bytes); });
  }

  void host_task(Stream& stream, std::function<void()> fn) override {
    CpuStream& cpu_stream = as_cpu_stream(stream, "Device::host_task");
    TZ_CHECK(fn != nullptr, "Device::host_task: the function is empty",
             "pass the callable the stream should run");
    cpu_stream.submit(std::move(fn));
  }

  Stream& default_stream() override { return stream_; }
  std::unique_ptr<Stream> create_stream() override { return std::make_unique<CpuStream>(true); }
  std::unique_ptr<Event> create_event() override { return std::make_unique<CpuEvent>(); }
  kernels::Kernels& kernels() override { return *kernels_; }

 private:
  CpuStream stream_{false};
  std::unique_ptr<kernels::Kernels> kernels_;
};

}  // namespace

std::unique_ptr<Device> make_cpu_device(int threads) {
  return std::make_unique<CpuDevice>(threads);
}

bool parse_device_name(const std::string& name, DeviceKind* kind, int* cuda_index) {
  int index = 0;
  if (name == "cpu") {
    *kind = DeviceKind::cpu;
    return true;
  }
  if (name != "cuda") {
    if (name.rfind("cuda:", 0) != 0 || name.size() == 5) return false;
    long long n = 0;  // digits only (no sign, no space), at most INT_MAX
    for (size_t i = 5; i < name.size(); ++i) {
      if (name[i] < '0' || name[i] > '9') return false;
      n = n * 10 + (name[i] - '0');
      if (n > std::numeric_limits<int>::max()) return false;
    }
    index = static_cast<int>(n);
  }
  *kind = DeviceKind::cuda;
  if (cuda_index != nullptr) *cuda_index = index;
  return true;
}

std::unique_ptr<Device> make_device(const std::string& spec, int cpu_threads) {
  DeviceKind kind = DeviceKind::cpu;
  int index = 0;
  TZ_CHECK(parse_device_name(spec, &kind, &index), "unknown device '" + spec + "'",
           "use cpu, cuda or cuda:N");
  if (kind == DeviceKind::cpu) return make_cpu_device(cpu_threads);
  return make_cuda_device(index);
}

}  // namespace tierzero
