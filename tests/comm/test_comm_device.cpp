// Device buffers: the NCCL backend (every operation, fp32/bf16/fp16, blocking, asynchronous and
// batched in a group) and the MPI backend staging device buffers through host memory, each
// against a reference computed locally in fp32. Needs a GPU per rank for NCCL and one GPU for
// staging; skips with the reason elsewhere (CI builds it, so NCCL code always compiles).
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/comm/nccl_communicator.hpp"
#include "tierzero/device/device.hpp"

namespace tierzero::comm::test {
namespace {

// The CUDA device this rank uses, or null with the reason to skip.
std::unique_ptr<Device> rank_device(int ranks_needing_own_gpu, std::string* reason) {
  const int gpus = cuda_device_count(reason);
  if (gpus == 0) return nullptr;
  if (gpus < ranks_needing_own_gpu) {
    *reason = "NCCL needs one GPU per rank: " + std::to_string(ranks_needing_own_gpu) + " ranks, " +
              std::to_string(gpus) + " GPU(s)";
    return nullptr;
  }
  const int rank = session().world().rank();
  return make_cuda_device(rank % gpus);
}

// A device buffer of `dtype` elements, filled from and read back into floats.
class DeviceTyped {
 public:
  DeviceTyped(Device& dev, DType t, size_t count)
      : dev_(dev), host_(t, count), bytes_(count * dtype_size(t)) {
    ptr_ = dev_.raw_alloc(bytes_ == 0 ? 256 : bytes_);
  }
  ~DeviceTyped() { dev_.raw_free(ptr_); }
  void* data() { return ptr_; }
  void set(const std::vector<float>& v) {
    host_.set(v);
    dev_.copy(ptr_, host_.data(), bytes_, CopyKind::host_to_device, dev_.default_stream());
    dev_.default_stream().synchronize();
  }
  std::vector<float> get() {
    dev_.copy(host_.data(), ptr_, bytes_, CopyKind::device_to_host, dev_.default_stream());
    dev_.default_stream().synchronize();
    return host_.get();
  }

 private:
  Device& dev_;
  TypedBuffer host_;
  size_t bytes_;
  void* ptr_ = nullptr;  // (bytes_) device bytes
};

float reduced(int ranks, size_t index, uint32_t salt, DType t, ReduceOp op) {
  float sum = 0.0f;
  for (int r = 0; r < ranks; ++r) sum += test_value(r, index, salt, t);
  if (op == ReduceOp::avg) sum /= static_cast<float>(ranks);
  return round_to(sum, t);
}

// Every operation once per dtype on `c`, whose buffers live on `dev`; batched = inside a group.
void exercise(Communicator& c, Device& dev, bool batched) {
  const int n = c.size();
  const auto un = static_cast<size_t>(n);
  const size_t count = 1001;
  for (DType t : {DType::f32, DType::bf16, DType::f16}) {
    ErrorStats err;
    std::vector<float> mine(count * un);  // (n * count)
    for (size_t i = 0; i < mine.size(); ++i) mine[i] = test_value(c.rank(), i, 11, t);
    DeviceTyped send(dev, t, count * un), gathered(dev, t, count * un), shard(dev, t, count),
        summed(dev, t, count * un), bcast(dev, t, count), a2a(dev, t, count * un);
    send.set(mine);
    bcast.set(std::vector<float>(count, c.rank() == 0 ? 0.5f : -1.0f));
    std::vector<CommRequest> requests;
    if (batched) c.group_start();
    requests.push_back(c.all_gather_async(send.data(), gathered.data(), count, t));
    requests.push_back(c.reduce_scatter_async(send.data(), shard.data(), count, t, ReduceOp::avg));
    requests.push_back(
        c.all_reduce_async(send.data(), summed.data(), count * un, t, ReduceOp::sum));
    requests.push_back(c.broadcast_async(bcast.data(), count, t, 0));
    requests.push_back(c.all_to_all_async(send.data(), a2a.data(), count, t));
    if (batched) c.group_end();
    wait_all(requests);
    c.barrier();
    const std::vector<float> g = gathered.get(), s = shard.get(), a = summed.get(), b = bcast.get(),
                             x = a2a.get();
    for (int r = 0; r < n; ++r)
      for (size_t i = 0; i < count; ++i) {
        const size_t at = static_cast<size_t>(r) * count + i;
        err.compare(g[at], test_value(r, i, 11, t), 0.0, 0.0);
        err.compare(x[at], test_value(r, static_cast<size_t>(c.rank()) * count + i, 11, t), 0.0,
                    0.0);
      }
    for (size_t i = 0; i < count; ++i) {
      err.compare(s[i], reduced(n, static_cast<size_t>(c.rank()) * count + i, 11, t, ReduceOp::avg),
                  1e-5, rtol_for(t));
      err.compare(b[i], 0.5f, 0.0, 0.0);
    }
    for (size_t i = 0; i < count * un; ++i)
      err.compare(a[i], reduced(n, i, 11, t, ReduceOp::sum), 1e-5, rtol_for(t));
    const std::string what = std::string(c.backend()) + " device buffers " + dtype_name(t) +
                             (batched ? " (one group)" : "") + ", " + std::to_string(n) + " ranks";
    err.print(what, c.rank());
    EXPECT_EQ(err.bad, 0u) << what;
  }
  if (n >= 2) {  // a ring of send/recv
    const int next = (c.rank() + 1) % n, prev = (c.rank() + n - 1) % n;
    DeviceTyped out(dev, DType::f32, count), in(dev, DType::f32, count);
    std::vector<float> v(count);  // (count)
    for (size_t i = 0; i < count; ++i) v[i] = test_value(c.rank(), i, 12, DType::f32);
    out.set(v);
    c.group_start();
    CommRequest r = c.recv_async(in.data(), count, DType::f32, prev);
    CommRequest s = c.send_async(out.data(), count, DType::f32, next);
    c.group_end();
    s.wait();
    r.wait();
    ErrorStats err;
    const std::vector<float> got = in.get();
    for (size_t i = 0; i < count; ++i)
      err.compare(got[i], test_value(prev, i, 12, DType::f32), 0, 0);
    err.print(std::string(c.backend()) + " device send/recv ring", c.rank());
    EXPECT_EQ(err.bad, 0u);
  }
}

TEST(CommDevice, NcclEveryOperation) {
  std::string reason;
  std::unique_ptr<Device> dev = rank_device(session().world().size(), &reason);
  if (!dev) GTEST_SKIP() << reason;
  std::unique_ptr<Communicator> nccl = make_nccl_communicator(session().world(), *dev);
  exercise(*nccl, *dev, false);
  exercise(*nccl, *dev, true);
}

TEST(CommDevice, MpiStagesDeviceBuffers) {
  std::string reason;
  std::unique_ptr<Device> dev = rank_device(1, &reason);
  if (!dev) GTEST_SKIP() << reason;
  exercise(session().world(), *dev, false);
}

TEST(CommDevice, NcclAbsentIsAClearError) {
  std::string reason;
  if (nccl_available(&reason)) GTEST_SKIP() << "NCCL is available here";
  std::printf("[rank %d] NCCL unavailable: %s\n", session().world().rank(), reason.c_str());
  EXPECT_FALSE(reason.empty());
}

}  // namespace
}  // namespace tierzero::comm::test
