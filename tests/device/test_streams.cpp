// Tests of the semantics of streams, events and host tasks (docs/streams.md): FIFO order, work
// that is really asynchronous, cross-stream waits, re-recording, failures, copies. The common
// semantics run on every backend (CUDA skips with the reason where there is no GPU); what only
// the CPU backend has (the inline default stream, events that carry a failure, the draining
// destructor) is tested on its own. Ordering is checked by sequence numbers, never by timing:
// work is held back by a Gate the test opens only after issuing, and every wait is bounded by a
// generous timeout that fails the test with a message instead of hanging it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <future>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {
namespace {

// Long enough for the slowest CI machine; only reached when something is broken.
constexpr std::chrono::seconds kGenerous{60};

// Holds back the work issued on a stream after hold() until release(). A holding task that is
// run on the caller's thread (inline) fails at once rather than waiting for a release that can
// never come; one never released gives up after kGenerous.
class Gate {
 public:
  Gate() : opened_(promise_.get_future().share()) {}
  ~Gate() { release(); }  // a failed test must not leave a stream blocked at its destruction
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;

  std::function<void()> hold() {
    return [opened = opened_, caller = std::this_thread::get_id()] {
      if (std::this_thread::get_id() == caller)
        throw std::runtime_error("the stream ran its work inline on the issuing thread");
      if (opened.wait_for(kGenerous) != std::future_status::ready)
        throw std::runtime_error("the gate was never released");
    };
  }

  void release() {
    std::call_once(released_, [this] { promise_.set_value(); });
  }

 private:
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  std::once_flag released_;
};

// The order in which tasks ran, by the ids they were given.
class Sequence {
 public:
  std::function<void()> step(int id) {
    return [this, id] {
      std::lock_guard<std::mutex> lock(mutex_);
      ids_.push_back(id);
    };
  }
  std::vector<int> ids() {
    std::lock_guard<std::mutex> lock(mutex_);
    return ids_;
  }

 private:
  std::mutex mutex_;
  std::vector<int> ids_;
};

// Runs `fn` on another thread; the test fails (instead of hanging) when it does not finish.
void finishes(const std::function<void()>& fn, const char* what) {
  std::future<void> done = std::async(std::launch::async, fn);
  ASSERT_EQ(done.wait_for(kGenerous), std::future_status::ready) << what << " did not finish";
  done.get();
}

// A stream of no backend, for the cross-backend errors.
class ForeignStream final : public Stream {
 public:
  void synchronize() override {}
  void* native() override { return nullptr; }
};

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no tierzero::Error thrown)";
}

// --- the semantics every backend shares ---

class StreamSemantics : public ::testing::TestWithParam<const char*> {
 protected:
  void SetUp() override {
    const std::string backend = GetParam();
    if (backend == "cuda") {
      std::string reason;
      if (cuda_device_count(&reason) == 0) GTEST_SKIP() << reason;
      device_ = make_cuda_device(0);
    } else {
      device_ = make_cpu_device();
    }
  }
  bool is_cpu() const { return device_->kind() == DeviceKind::cpu; }
  Device& device() { return *device_; }

  std::unique_ptr<Device> device_;
};

TEST_P(StreamSemantics, RunsTasksInIssueOrder) {
  auto stream = device().create_stream();
  Sequence sequence;
  for (int i = 0; i < 200; ++i) device().host_task(*stream, sequence.step(i));
  finishes([&] { stream->synchronize(); }, "synchronize");
  const std::vector<int> ids = sequence.ids();
  ASSERT_EQ(ids.size(), 200u);
  for (int i = 0; i < 200; ++i) EXPECT_EQ(ids[static_cast<size_t>(i)], i);
}

TEST_P(StreamSemantics, WorkIsNotRunOnTheIssuingThread) {
  auto stream = device().create_stream();
  Gate gate;
  std::atomic<bool> ran{false};
  device().host_task(*stream, gate.hold());
  device().host_task(*stream, [&] { ran = true; });
  // Still held: the work is queued behind the gate, and issuing it did not block.
  EXPECT_FALSE(ran.load());
  gate.release();
  finishes([&] { stream->synchronize(); }, "synchronize");
  EXPECT_TRUE(ran.load());
}

TEST_P(StreamSemantics, QueryIsFalseWhileHeldAndTrueAfter) {
  auto stream = device().create_stream();
  auto event = device().create_event();
  Gate gate;
  device().host_task(*stream, gate.hold());
  event->record(*stream);
  EXPECT_FALSE(event->query());
  EXPECT_FALSE(event->query());  // asking again changes nothing, and never blocks
  gate.release();
  finishes([&] { event->synchronize(); }, "Event::synchronize");
  EXPECT_TRUE(event->query());
}

TEST_P(StreamSemantics, MakeWaitOrdersAnotherStream) {
  auto a = device().create_stream();
  auto b = device().create_stream();
  auto event = device().create_event();
  Gate gate;
  Sequence sequence;
  device().host_task(*a, gate.hold());
  device().host_task(*a, sequence.step(1));
  event->record(*a);
  event->make_wait(*b);
  device().host_task(*b, sequence.step(2));
  // b is free to run, but must not pass the wait while a is held.
  EXPECT_TRUE(sequence.ids().empty());
  gate.release();
  finishes([&] { b->synchronize(); }, "synchronize of the waiting stream");
  EXPECT_EQ(sequence.ids(), (std::vector<int>{1, 2}));
}

TEST_P(StreamSemantics, WaitsReferToTheRecordAtTheTimeOfTheWait) {
  auto held = device().create_stream();
  auto idle = device().create_stream();
  auto waiting = device().create_stream();
  auto event = device().create_event();
  Sequence sequence;
  {
    // A first record, completed: re-recording must re-arm the event.
    event->record(*held);
    finishes([&] { event->synchronize(); }, "Event::synchronize");
    EXPECT_TRUE(event->query());
  }
  Gate gate;
  device().host_task(*held, gate.hold());
  device().host_task(*held, sequence.step(1));
  event->record(*held);
  EXPECT_FALSE(event->query()) << "recording again must re-arm the event";
  event->make_wait(*waiting);
  // Recording again on an idle stream does not release the wait already issued.
  event->record(*idle);
  device().host_task(*waiting, sequence.step(2));
  EXPECT_TRUE(sequence.ids().empty());
  gate.release();
  finishes([&] { waiting->synchronize(); }, "synchronize of the waiting stream");
  EXPECT_EQ(sequence.ids(), (std::vector<int>{1, 2}));
  finishes([&] { held->synchronize(); }, "synchronize");
}

TEST_P(StreamSemantics, NeverRecordedEventIsComplete) {
  auto stream = device().create_stream();
  auto event = device().create_event();
  EXPECT_TRUE(event->query());
  finishes([&] { event->synchronize(); }, "Event::synchronize");
  std::atomic<bool> ran{false};
  event->make_wait(*stream);
  device().host_task(*stream, [&] { ran = true; });
  finishes([&] { stream->synchronize(); }, "synchronize");
  EXPECT_TRUE(ran.load());
}

TEST_P(StreamSemantics, SynchronizeRethrowsATaskFailureAndLaterTasksAreSkipped) {
  auto stream = device().create_stream();
  std::atomic<bool> later_ran{false};
  device().host_task(*stream, [] { throw std::runtime_error("the task failed: code 42"); });
  device().host_task(*stream, [&] { later_ran = true; });
  std::string first;
  std::string second;
  finishes([&] { first = error_of([&] { stream->synchronize(); }); }, "synchronize");
  finishes([&] { second = error_of([&] { stream->synchronize(); }); }, "synchronize");
  std::printf("error: %s\n", first.c_str());
  EXPECT_NE(first.find("the task failed: code 42"), std::string::npos) << first;
  EXPECT_NE(second.find("the task failed: code 42"), std::string::npos)
      << "a failed stream stays failed: " << second;
  EXPECT_FALSE(later_ran.load()) << "work after a failure may depend on it and must be skipped";
}

TEST_P(StreamSemantics, CopiesAndFillZeroLandBySynchronize) {
  const size_t bytes = 1000003;  // odd: no alignment luck
  std::vector<uint8_t> source(bytes);
  for (size_t i = 0; i < bytes; ++i) source[i] = static_cast<uint8_t>((i * 131 + 7) % 251 + 1);
  std::vector<uint8_t> back(bytes, 0xEE);
  void* on_device = device().raw_alloc(bytes);  // (bytes)
  struct Free {
    Device& d;
    void* p;
    ~Free() { d.raw_free(p); }
  } free_on_exit{device(), on_device};

  // Page-locked on CUDA, where a copy from pageable memory may wait for the stream on the host
  // (and so for the gate this test opens only afterwards).
  device().register_host(source.data(), bytes);
  device().register_host(back.data(), bytes);
  struct Unregister {
    Device& d;
    void* a;
    void* b;
    ~Unregister() {
      d.unregister_host(a);
      d.unregister_host(b);
    }
  } unregister_on_exit{device(), source.data(), back.data()};

  auto stream = device().create_stream();
  Gate gate;
  device().host_task(*stream, gate.hold());
  device().copy(on_device, source.data(), bytes, CopyKind::host_to_device, *stream);
  device().fill_zero(static_cast<uint8_t*>(on_device) + 1000, 5000, *stream);
  device().copy(back.data(), on_device, bytes, CopyKind::device_to_host, *stream);
  EXPECT_EQ(back[0], 0xEE) << "the copy ran before the work ahead of it";
  gate.release();
  finishes([&] { stream->synchronize(); }, "synchronize");
  std::vector<uint8_t> want = source;
  std::memset(want.data() + 1000, 0, 5000);
  EXPECT_TRUE(back == want) << "the copies and the fill did not land in order";
}

TEST_P(StreamSemantics, ElapsedTimeBetweenTwoRecords) {
  auto stream = device().create_stream();
  auto start = device().create_event();
  auto end = device().create_event();
  start->record(*stream);
  device().host_task(*stream, [] { std::this_thread::yield(); });
  end->record(*stream);
  double ms = -1.0;
  finishes([&] { ms = end->elapsed_ms_since(*start); }, "elapsed_ms_since");
  EXPECT_GE(ms, 0.0);
  auto never = device().create_event();
  EXPECT_THROW(never->elapsed_ms_since(*start), Error);
}

TEST_P(StreamSemantics, IssuingFromSeveralThreadsIsSafe) {
  auto stream = device().create_stream();
  constexpr int kThreads = 4;
  constexpr int kTasks = 300;
  std::mutex mutex;
  std::vector<std::vector<int>> seen(kThreads);  // per issuing thread, the task ids in run order
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      auto event = device().create_event();
      for (int i = 0; i < kTasks; ++i) {
        device().host_task(*stream, [&, t, i] {
          std::lock_guard<std::mutex> lock(mutex);
          seen[static_cast<size_t>(t)].push_back(i);
        });
        if (i % 50 == 0) {
          event->record(*stream);
          (void)event->query();
        }
      }
    });
  }
  for (auto& thread : threads) thread.join();
  finishes([&] { stream->synchronize(); }, "synchronize");
  for (int t = 0; t < kThreads; ++t) {
    const std::vector<int>& ids = seen[static_cast<size_t>(t)];
    ASSERT_EQ(ids.size(), static_cast<size_t>(kTasks)) << "thread " << t;
    for (int i = 0; i < kTasks; ++i) EXPECT_EQ(ids[static_cast<size_t>(i)], i) << "thread " << t;
  }
}

TEST_P(StreamSemantics, StreamsOfAnotherBackendAreAnError) {
  ForeignStream foreign;
  auto event = device().create_event();
  std::vector<uint8_t> a(16), b(16);
  const std::string record = error_of([&] { event->record(foreign); });
  EXPECT_NE(record.find("does not belong"), std::string::npos) << record;
  const std::string wait = error_of([&] { event->make_wait(foreign); });
  EXPECT_NE(wait.find("does not belong"), std::string::npos) << wait;
  const std::string task = error_of([&] { device().host_task(foreign, [] {}); });
  EXPECT_NE(task.find("does not belong"), std::string::npos) << task;
  if (is_cpu()) {
    const std::string copy =
        error_of([&] { device().copy(b.data(), a.data(), 16, CopyKind::host_to_device, foreign); });
    EXPECT_NE(copy.find("does not belong"), std::string::npos) << copy;
  }
}

INSTANTIATE_TEST_SUITE_P(Backends, StreamSemantics, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<const char*>& param) {
                           return std::string(param.param);
                         });

// --- what only the CPU backend has ---

TEST(CpuStreams, DefaultStreamIsInline) {
  auto device = make_cpu_device();
  Stream& inline_stream = device->default_stream();
  std::thread::id ran_on;
  device->host_task(inline_stream, [&] { ran_on = std::this_thread::get_id(); });
  EXPECT_EQ(ran_on, std::this_thread::get_id()) << "the default stream runs work at once, here";
  std::vector<uint8_t> a(64, 7), b(64, 0);
  device->copy(b.data(), a.data(), 64, CopyKind::host_to_device, inline_stream);
  EXPECT_EQ(b, a) << "a copy on the inline stream completes before it returns";
  device->fill_zero(b.data(), 64, inline_stream);
  EXPECT_EQ(b, std::vector<uint8_t>(64, 0));
  auto event = device->create_event();
  event->record(inline_stream);
  EXPECT_TRUE(event->query()) << "an event recorded on the inline stream is complete at once";
}

TEST(CpuStreams, InlineFailurePropagatesToTheCaller) {
  auto device = make_cpu_device();
  EXPECT_THROW(
      device->host_task(device->default_stream(), [] { throw std::invalid_argument("bad"); }),
      std::invalid_argument);
  EXPECT_NO_THROW(device->default_stream().synchronize()) << "the inline stream keeps no failure";
}

TEST(CpuStreams, MakeWaitOnTheDefaultStreamBlocksTheCaller) {
  auto device = make_cpu_device();
  auto worker = device->create_stream();
  auto event = device->create_event();
  Gate gate;
  std::atomic<bool> worker_done{false};
  device->host_task(*worker, gate.hold());
  device->host_task(*worker, [&] { worker_done = true; });
  event->record(*worker);
  // Released from another thread, a little later, so that a make_wait that did not wait would
  // be caught returning early (the check below is on the order, not on the time).
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    gate.release();
  });
  finishes([&] { event->make_wait(device->default_stream()); }, "make_wait on the default stream");
  EXPECT_TRUE(worker_done.load()) << "make_wait on the inline stream returned before the event";
  EXPECT_TRUE(event->query());
  releaser.join();
}

TEST(CpuStreams, EventsRecordedAfterAFailureCompleteAndCarryIt) {
  auto device = make_cpu_device();
  auto failing = device->create_stream();
  auto waiting = device->create_stream();
  auto before = device->create_event();
  auto after = device->create_event();
  Gate gate;
  device->host_task(*failing, gate.hold());
  before->record(*failing);
  device->host_task(*failing, [] { throw Error("copy of shard 3 failed", "test", "none"); });
  after->record(*failing);
  after->make_wait(*waiting);
  std::atomic<bool> waiter_ran{false};
  device->host_task(*waiting, [&] { waiter_ran = true; });
  gate.release();
  finishes([&] { before->synchronize(); }, "synchronize of the event before the failure");
  EXPECT_TRUE(before->query()) << "an event recorded before the failure is unaffected";
  std::string sync;
  finishes([&] { sync = error_of([&] { after->synchronize(); }); }, "Event::synchronize");
  EXPECT_NE(sync.find("copy of shard 3 failed"), std::string::npos) << sync;
  const std::string query = error_of([&] { (void)after->query(); });
  EXPECT_NE(query.find("copy of shard 3 failed"), std::string::npos) << query;
  // A stream that waited for the failed work fails too: its later work depended on it.
  std::string waited;
  finishes([&] { waited = error_of([&] { waiting->synchronize(); }); }, "synchronize");
  EXPECT_NE(waited.find("copy of shard 3 failed"), std::string::npos) << waited;
  EXPECT_FALSE(waiter_ran.load());
  // And the inline stream, whose caller is that stream, gets the Error at once.
  const std::string inline_wait = error_of([&] { after->make_wait(device->default_stream()); });
  EXPECT_NE(inline_wait.find("copy of shard 3 failed"), std::string::npos) << inline_wait;
}

TEST(CpuStreams, SynchronizingFromItsOwnTaskIsAnError) {
  auto device = make_cpu_device();
  auto stream = device->create_stream();
  Stream* self = stream.get();
  device->host_task(*stream, [self] { self->synchronize(); });
  std::string error;
  finishes([&] { error = error_of([&] { stream->synchronize(); }); }, "synchronize");
  EXPECT_NE(error.find("would wait forever"), std::string::npos) << error;
}

TEST(CpuStreams, DestructorDrainsTheQueue) {
  auto device = make_cpu_device();
  auto stream = device->create_stream();
  Gate gate;
  Sequence sequence;
  device->host_task(*stream, gate.hold());
  for (int i = 0; i < 10; ++i) device->host_task(*stream, sequence.step(i));
  std::thread releaser([&] { gate.release(); });
  finishes([&] { stream.reset(); }, "destroying the stream");
  releaser.join();
  EXPECT_EQ(sequence.ids().size(), 10u) << "destroying a stream must run what was issued on it";
}

TEST(CpuStreams, DestructorDoesNotThrowForAFailedStream) {
  auto device = make_cpu_device();
  auto stream = device->create_stream();
  device->host_task(*stream, [] { throw std::runtime_error("failed, never synchronized"); });
  finishes([&] { stream.reset(); }, "destroying the stream");
}

}  // namespace
}  // namespace tierzero
