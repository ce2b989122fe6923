// Collectives that start after an Event (Communicator's `ready`), on the MPI backend, with the
// producer on a CPU worker stream: each rank's send buffer is filled by a copy that a host task
// holds back until the test opens it, which it does only after issuing the collective. The
// result must be the copied data, so the collective cannot have read the buffer before the
// event; later operations must start after it (issue order); a blocking form waits for its
// event first. Run by CTest under mpiexec with 2 ranks. (An event that never completes ends in
// the timeout Error: comm_failure_case.cpp "ready", in its own processes.)
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::comm::test {
namespace {

// Long enough for the slowest CI machine; only reached when something is broken.
constexpr std::chrono::seconds kGenerous{60};
const DType kDTypes[] = {DType::f32, DType::bf16};
constexpr size_t kCount = 4099;  // per rank; prime

Communicator& world() {
  return session().world();
}

// A copy into a send buffer on a CPU worker stream, held back until open(), with an event
// recorded after it: the producer a collective's `ready` event stands for.
class HeldProducer {
 public:
  HeldProducer()
      : device_(make_cpu_device()),
        stream_(device_->create_stream()),
        event_(device_->create_event()),
        opened_(promise_.get_future().share()) {}
  // Opened first, so that destroying the stream (which drains it) never waits for the gate.
  ~HeldProducer() { open(); }
  HeldProducer(const HeldProducer&) = delete;
  HeldProducer& operator=(const HeldProducer&) = delete;

  // Queues "wait for open(), then copy `bytes` from src to dst" and returns the event after it.
  Event& fill(void* dst, const void* src, size_t bytes) {
    device_->host_task(*stream_, [opened = opened_] {
      if (opened.wait_for(kGenerous) != std::future_status::ready)
        throw std::runtime_error("the producer was never opened");
    });
    device_->copy(dst, src, bytes, CopyKind::host_to_device, *stream_);
    event_->record(*stream_);
    return *event_;
  }

  void open() {
    std::call_once(opened_once_, [this] { promise_.set_value(); });
  }

 private:
  std::unique_ptr<Device> device_;
  std::unique_ptr<Stream> stream_;
  std::unique_ptr<Event> event_;
  std::promise<void> promise_;
  std::shared_future<void> opened_;
  std::once_flag opened_once_;
};

// What the send buffer holds before the producer's copy lands: a collective that read it too
// early delivers NaN.
TypedBuffer poisoned(DType dtype, size_t count) {
  TypedBuffer b(dtype, count);
  b.set(std::vector<float>(count, std::numeric_limits<float>::quiet_NaN()));
  return b;
}

TypedBuffer source_for(int rank, DType dtype, size_t count, uint32_t salt) {
  TypedBuffer b(dtype, count);
  std::vector<float> values(count);  // (count)
  for (size_t i = 0; i < count; ++i) values[i] = test_value(rank, i, salt, dtype);
  b.set(values);
  return b;
}

TEST(CommStreams, AllGatherStartsAfterItsReadyEvent) {
  Communicator& c = world();
  const auto n = static_cast<size_t>(c.size());
  for (DType t : kDTypes) {
    TypedBuffer source = source_for(c.rank(), t, kCount, 11);
    TypedBuffer send = poisoned(t, kCount);
    TypedBuffer recv = poisoned(t, kCount * n);
    HeldProducer producer;
    Event& ready = producer.fill(send.data(), source.data(), kCount * dtype_size(t));
    CommRequest r = c.all_gather_async(send.data(), recv.data(), kCount, t, &ready);
    EXPECT_FALSE(ready.query()) << "the producer ran before it was opened";
    EXPECT_FALSE(r.test()) << "the all_gather completed before its ready event";
    producer.open();
    r.wait();
    ErrorStats err;
    const std::vector<float> got = recv.get();
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < kCount; ++i)
        err.compare(got[j * kCount + i], test_value(static_cast<int>(j), i, 11, t), 0.0, 0.0);
    err.print(std::string("all_gather after event ") + dtype_name(t), c.rank());
    EXPECT_EQ(err.bad, 0u) << dtype_name(t);
  }
}

TEST(CommStreams, ReduceScatterStartsAfterItsReadyEvent) {
  Communicator& c = world();
  const auto n = static_cast<size_t>(c.size());
  for (DType t : kDTypes) {
    TypedBuffer source = source_for(c.rank(), t, kCount * n, 12);
    TypedBuffer send = poisoned(t, kCount * n);
    TypedBuffer recv = poisoned(t, kCount);
    HeldProducer producer;
    Event& ready = producer.fill(send.data(), source.data(), kCount * n * dtype_size(t));
    CommRequest r =
        c.reduce_scatter_async(send.data(), recv.data(), kCount, t, ReduceOp::sum, &ready);
    EXPECT_FALSE(r.test()) << "the reduce_scatter completed before its ready event";
    producer.open();
    r.wait();
    ErrorStats err;
    const std::vector<float> got = recv.get();
    const size_t block = static_cast<size_t>(c.rank()) * kCount;
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.0f;
      for (int j = 0; j < c.size(); ++j) want += test_value(j, block + i, 12, t);
      err.compare(got[i], round_to(want, t), 1e-6, rtol_for(t));
    }
    err.print(std::string("reduce_scatter after event ") + dtype_name(t), c.rank());
    EXPECT_EQ(err.bad, 0u) << dtype_name(t);
  }
}

TEST(CommStreams, AllReduceStartsAfterItsReadyEvent) {
  Communicator& c = world();
  for (DType t : kDTypes) {
    TypedBuffer source = source_for(c.rank(), t, kCount, 13);
    TypedBuffer send = poisoned(t, kCount);
    TypedBuffer recv = poisoned(t, kCount);
    HeldProducer producer;
    Event& ready = producer.fill(send.data(), source.data(), kCount * dtype_size(t));
    CommRequest r = c.all_reduce_async(send.data(), recv.data(), kCount, t, ReduceOp::sum, &ready);
    EXPECT_FALSE(r.test()) << "the all_reduce completed before its ready event";
    producer.open();
    r.wait();
    ErrorStats err;
    const std::vector<float> got = recv.get();
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.0f;
      for (int j = 0; j < c.size(); ++j) want += test_value(j, i, 13, t);
      err.compare(got[i], round_to(want, t), 1e-6, rtol_for(t));
    }
    err.print(std::string("all_reduce after event ") + dtype_name(t), c.rank());
    EXPECT_EQ(err.bad, 0u) << dtype_name(t);
  }
}

// Ranks must start their collectives in the same order, so an operation issued after one that
// waits for its event waits behind it, even though it has no event of its own.
TEST(CommStreams, LaterOperationsStartInIssueOrder) {
  Communicator& c = world();
  const auto n = static_cast<size_t>(c.size());
  const DType t = DType::f32;
  TypedBuffer source = source_for(c.rank(), t, kCount, 14);
  TypedBuffer send = poisoned(t, kCount);
  TypedBuffer gathered = poisoned(t, kCount * n);
  TypedBuffer other = source_for(c.rank(), t, kCount, 15);
  TypedBuffer summed = poisoned(t, kCount);
  HeldProducer producer;
  Event& ready = producer.fill(send.data(), source.data(), kCount * sizeof(float));
  CommRequest first = c.all_gather_async(send.data(), gathered.data(), kCount, t, &ready);
  CommRequest second = c.all_reduce_async(other.data(), summed.data(), kCount, t, ReduceOp::sum);
  EXPECT_FALSE(second.test()) << "an operation started ahead of one issued before it";
  producer.open();
  first.wait();
  second.wait();
  const std::vector<float> g = gathered.get();
  const std::vector<float> s = summed.get();
  ErrorStats err;
  for (size_t j = 0; j < n; ++j)
    for (size_t i = 0; i < kCount; ++i)
      err.compare(g[j * kCount + i], test_value(static_cast<int>(j), i, 14, t), 0.0, 0.0);
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0.0f;
    for (int j = 0; j < c.size(); ++j) want += test_value(j, i, 15, t);
    err.compare(s[i], want, 1e-6, rtol_for(t));
  }
  err.print("all_gather after event, then all_reduce", c.rank());
  EXPECT_EQ(err.bad, 0u);
}

// The blocking forms wait for their event first (here opened from another thread, a little
// later, so that a form that did not wait would read the poisoned buffer).
TEST(CommStreams, BlockingFormsWaitForTheirReadyEvent) {
  Communicator& c = world();
  const auto n = static_cast<size_t>(c.size());
  const DType t = DType::f32;
  const auto open_later = [](HeldProducer& producer) {
    return std::thread([&producer] {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      producer.open();
    });
  };
  ErrorStats err;
  {
    TypedBuffer source = source_for(c.rank(), t, kCount, 16);
    TypedBuffer send = poisoned(t, kCount);
    TypedBuffer recv = poisoned(t, kCount * n);
    HeldProducer producer;
    Event& ready = producer.fill(send.data(), source.data(), kCount * sizeof(float));
    std::thread opener = open_later(producer);
    c.all_gather(send.data(), recv.data(), kCount, t, &ready);
    opener.join();
    const std::vector<float> got = recv.get();
    for (size_t j = 0; j < n; ++j)
      for (size_t i = 0; i < kCount; ++i)
        err.compare(got[j * kCount + i], test_value(static_cast<int>(j), i, 16, t), 0.0, 0.0);
  }
  {
    TypedBuffer source = source_for(c.rank(), t, kCount * n, 17);
    TypedBuffer send = poisoned(t, kCount * n);
    TypedBuffer recv = poisoned(t, kCount);
    HeldProducer producer;
    Event& ready = producer.fill(send.data(), source.data(), kCount * n * sizeof(float));
    std::thread opener = open_later(producer);
    c.reduce_scatter(send.data(), recv.data(), kCount, t, ReduceOp::avg, &ready);
    opener.join();
    const std::vector<float> got = recv.get();
    const size_t block = static_cast<size_t>(c.rank()) * kCount;
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.0f;
      for (int j = 0; j < c.size(); ++j) want += test_value(j, block + i, 17, t);
      err.compare(got[i], want / static_cast<float>(c.size()), 1e-6, rtol_for(t));
    }
  }
  {
    TypedBuffer source = source_for(c.rank(), t, kCount, 18);
    TypedBuffer buffer = poisoned(t, kCount);
    HeldProducer producer;
    Event& ready = producer.fill(buffer.data(), source.data(), kCount * sizeof(float));
    std::thread opener = open_later(producer);
    c.all_reduce(buffer.data(), buffer.data(), kCount, t, ReduceOp::sum, &ready);  // in place
    opener.join();
    const std::vector<float> got = buffer.get();
    for (size_t i = 0; i < kCount; ++i) {
      float want = 0.0f;
      for (int j = 0; j < c.size(); ++j) want += test_value(j, i, 18, t);
      err.compare(got[i], want, 1e-6, rtol_for(t));
    }
  }
  err.print("blocking all_gather, reduce_scatter, all_reduce after events", c.rank());
  EXPECT_EQ(err.bad, 0u);
}

// An event that has already completed (or was never recorded) holds nothing back.
TEST(CommStreams, CompletedOrUnrecordedEventsDoNotDelay) {
  Communicator& c = world();
  auto device = make_cpu_device();
  auto never_recorded = device->create_event();
  auto completed = device->create_event();
  completed->record(device->default_stream());
  std::vector<float> send(kCount, 1.0f), recv(kCount, 0.0f);
  c.all_reduce(send.data(), recv.data(), kCount, DType::f32, ReduceOp::sum, never_recorded.get());
  CommRequest r = c.all_reduce_async(send.data(), recv.data(), kCount, DType::f32, ReduceOp::sum,
                                     completed.get());
  r.wait();
  EXPECT_EQ(recv[kCount - 1], static_cast<float>(c.size()));
}

}  // namespace
}  // namespace tierzero::comm::test
