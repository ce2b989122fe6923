// Tests of the CUDA Device, Stream and Event: memory round trips, fill_zero, cross-stream
// ordering through events, timing, the kernels binding, and the errors for impossible requests.
// Tests that need a GPU skip with the reason cuda_device_count() gives; the "no device" contract
// itself is checked on every machine.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tierzero/core/error.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero {
namespace {

class CudaDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string reason;
    if (cuda_device_count(&reason) == 0) GTEST_SKIP() << reason;
    device_ = make_cuda_device(0);
  }

  // Device memory freed at scope exit, so a failing assertion does not leak.
  struct DeviceBytes {
    DeviceBytes(Device& d, size_t bytes) : device(d), ptr(d.raw_alloc(bytes)) {}
    ~DeviceBytes() { device.raw_free(ptr); }
    DeviceBytes(const DeviceBytes&) = delete;
    DeviceBytes& operator=(const DeviceBytes&) = delete;
    Device& device;
    void* const ptr;
  };
  DeviceBytes alloc(size_t bytes) { return DeviceBytes(*device_, bytes); }

  static std::vector<uint8_t> pattern(size_t bytes, uint8_t seed) {
    std::vector<uint8_t> v(bytes);
    for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<uint8_t>((i * 131 + seed) % 251 + 1);
    return v;
  }

  std::unique_ptr<Device> device_;
};

TEST(CudaDeviceCount, ExplainsWhenThereIsNoDevice) {
  std::string reason;
  const int count = cuda_device_count(&reason);
  EXPECT_GE(count, 0);
  if (count == 0) {
    EXPECT_FALSE(reason.empty()) << "a count of 0 must come with a reason";
    EXPECT_THROW(make_cuda_device(0), Error);
  }
  EXPECT_NO_THROW(cuda_device_count(nullptr));
}

TEST_F(CudaDeviceTest, DescribesItself) {
  EXPECT_EQ(device_->kind(), DeviceKind::cuda);
  EXPECT_EQ(device_->index(), 0);
  EXPECT_FALSE(device_->name().empty());
  EXPECT_GT(device_->total_memory(), size_t{1} << 30);
  std::printf("device: %s, %zu bytes\n", device_->name().c_str(), device_->total_memory());
}

TEST_F(CudaDeviceTest, AllocationsAreAligned) {
  for (size_t bytes : {size_t{1}, size_t{255}, size_t{4096}, size_t{1000003}}) {
    DeviceBytes buffer = alloc(bytes);
    ASSERT_NE(buffer.ptr, nullptr);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(buffer.ptr) % 256, 0u) << bytes << " bytes";
  }
  EXPECT_EQ(device_->raw_alloc(0), nullptr);
  device_->raw_free(nullptr);  // a no-op, like free(nullptr)
}

TEST_F(CudaDeviceTest, CopyRoundTripIsExact) {
  const size_t bytes = 1000003;  // odd size: no alignment luck
  const std::vector<uint8_t> source = pattern(bytes, 7);
  std::vector<uint8_t> back(bytes, 0);
  DeviceBytes a = alloc(bytes);
  DeviceBytes b = alloc(bytes);
  Stream& stream = device_->default_stream();
  device_->copy(a.ptr, source.data(), bytes, CopyKind::host_to_device, stream);
  device_->copy(b.ptr, a.ptr, bytes, CopyKind::device_to_device, stream);
  device_->copy(back.data(), b.ptr, bytes, CopyKind::device_to_host, stream);
  stream.synchronize();
  EXPECT_EQ(std::memcmp(back.data(), source.data(), bytes), 0);
  device_->copy(back.data(), a.ptr, 0, CopyKind::device_to_host, stream);  // zero bytes: no-op
}

TEST_F(CudaDeviceTest, FillZeroClearsExactlyTheRange) {
  const size_t bytes = 1 << 20;
  const size_t offset = 4096 + 3;
  const size_t length = 100001;
  const std::vector<uint8_t> source = pattern(bytes, 11);
  std::vector<uint8_t> back(bytes, 0);
  DeviceBytes a = alloc(bytes);
  Stream& stream = device_->default_stream();
  device_->copy(a.ptr, source.data(), bytes, CopyKind::host_to_device, stream);
  device_->fill_zero(static_cast<uint8_t*>(a.ptr) + offset, length, stream);
  device_->copy(back.data(), a.ptr, bytes, CopyKind::device_to_host, stream);
  stream.synchronize();
  size_t wrong = 0;
  for (size_t i = 0; i < bytes; ++i) {
    const bool inside = i >= offset && i < offset + length;
    const uint8_t expected = inside ? 0 : source[i];
    if (back[i] != expected) ++wrong;
  }
  EXPECT_EQ(wrong, 0u);
}

TEST_F(CudaDeviceTest, EventOrdersWorkAcrossStreams) {
  // Stream 1 produces a buffer through a chain of copies; stream 2 consumes it after waiting on
  // an event. Without the wait, stream 2 could read the buffer before stream 1 wrote it.
  const size_t bytes = size_t{64} << 20;
  const std::vector<uint8_t> source = pattern(bytes, 3);
  std::vector<uint8_t> back(bytes, 0);
  DeviceBytes a = alloc(bytes);
  DeviceBytes b = alloc(bytes);
  DeviceBytes c = alloc(bytes);
  std::unique_ptr<Stream> producer = device_->create_stream();
  std::unique_ptr<Stream> consumer = device_->create_stream();
  ASSERT_NE(producer->native(), nullptr);
  ASSERT_NE(producer->native(), consumer->native());

  device_->copy(a.ptr, source.data(), bytes, CopyKind::host_to_device, *producer);
  device_->fill_zero(b.ptr, bytes, *producer);
  for (int i = 0; i < 8; ++i) {
    device_->copy(b.ptr, a.ptr, bytes, CopyKind::device_to_device, *producer);
  }
  std::unique_ptr<Event> produced = device_->create_event();
  produced->record(*producer);
  produced->make_wait(*consumer);
  device_->copy(c.ptr, b.ptr, bytes, CopyKind::device_to_device, *consumer);
  device_->copy(back.data(), c.ptr, bytes, CopyKind::device_to_host, *consumer);
  consumer->synchronize();
  EXPECT_TRUE(produced->query()) << "the consumer finished, so the event it waited on has too";
  EXPECT_EQ(std::memcmp(back.data(), source.data(), bytes), 0);
}

TEST_F(CudaDeviceTest, EventsQuerySynchronizeAndTime) {
  const size_t bytes = size_t{32} << 20;
  DeviceBytes a = alloc(bytes);
  DeviceBytes b = alloc(bytes);
  std::unique_ptr<Stream> stream = device_->create_stream();
  std::unique_ptr<Event> start = device_->create_event();
  std::unique_ptr<Event> stop = device_->create_event();
  EXPECT_TRUE(start->query()) << "an event never recorded has no pending work";
  start->record(*stream);
  for (int i = 0; i < 4; ++i)
    device_->copy(b.ptr, a.ptr, bytes, CopyKind::device_to_device, *stream);
  stop->record(*stream);
  stop->synchronize();
  EXPECT_TRUE(stop->query());
  const double ms = stop->elapsed_ms_since(*start);
  EXPECT_GE(ms, 0.0);
  std::printf("4 x 32 MiB device copies: %.3f ms\n", ms);
}

TEST_F(CudaDeviceTest, ElapsedTimeNeedsRecordedEvents) {
  std::unique_ptr<Event> start = device_->create_event();
  std::unique_ptr<Event> stop = device_->create_event();
  EXPECT_THROW(stop->elapsed_ms_since(*start), Error);
}

TEST_F(CudaDeviceTest, AbsurdAllocationGivesClearError) {
  const size_t one_pib = size_t{1} << 50;
  try {
    void* p = device_->raw_alloc(one_pib);
    device_->raw_free(p);
    FAIL() << "a 1 PiB allocation succeeded";
  } catch (const Error& e) {
    const std::string message = e.what();
    std::printf("error seen: %s\n", message.c_str());
    EXPECT_NE(message.find("cudaMalloc"), std::string::npos) << message;
    EXPECT_NE(message.find(std::to_string(one_pib)), std::string::npos) << message;
    EXPECT_NE(message.find("free of"), std::string::npos) << message;
    EXPECT_FALSE(e.hint().empty());
  }
  // The refused allocation must leave the device usable.
  DeviceBytes small = alloc(4096);
  EXPECT_NE(small.ptr, nullptr);
  device_->fill_zero(small.ptr, 4096, device_->default_stream());
  device_->default_stream().synchronize();
}

TEST_F(CudaDeviceTest, MissingDeviceIndexThrows) {
  const int count = cuda_device_count();
  EXPECT_THROW(make_cuda_device(count), Error);
  EXPECT_THROW(make_cuda_device(-1), Error);
}

TEST_F(CudaDeviceTest, KernelsRunOnTheDefaultStream) {
  kernels::Kernels& k = device_->kernels();
  EXPECT_STREQ(k.backend_name(), "cuda");
  EXPECT_EQ(&k, &device_->kernels()) << "kernels() is made once";
  const std::vector<float> host = {1.0f, 2.0f, 3.0f, -4.0f};
  const size_t bytes = host.size() * sizeof(float);
  DeviceBytes x = alloc(bytes);
  Stream& stream = device_->default_stream();
  device_->copy(x.ptr, host.data(), bytes, CopyKind::host_to_device, stream);
  k.scale(static_cast<float*>(x.ptr), host.size(), 0.5f);
  const double sum = k.sum_squares(static_cast<float*>(x.ptr), host.size());  // synchronises
  EXPECT_DOUBLE_EQ(sum, 0.25 * (1.0 + 4.0 + 9.0 + 16.0));
}

}  // namespace
}  // namespace tierzero
