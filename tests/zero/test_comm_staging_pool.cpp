// The comm layer's host staging drawn from a pinned pool (zero::CommStagingPool), under mpiexec:
// a 16-bit all-reduce widened to fp32 on the host takes its widening buffers from the pool (its
// in-use bytes show them, and go back to zero once the binding is gone) and gives bitwise the
// result of heap staging; a message whose staging the pool's budget cannot hold is an Error
// naming the staging buffer and the budget. That last test fails the process's communication
// (every rank fails the same way), so it runs last and this program has no other tests.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/zero/comm_staging_pool.hpp"

using namespace tierzero;
using namespace tierzero::comm::test;

namespace {

// The bf16 all-reduce (sum) of every rank's test values, of `count` elements.
std::vector<uint16_t> all_reduce_bf16(size_t count) {
  comm::Communicator& world = session().world();
  std::vector<uint16_t> data(count);  // (count) bf16
  for (size_t i = 0; i < count; ++i)
    data[i] = to_bf16(test_value(world.rank(), i, 5, DType::bf16)).bits;
  world.all_reduce(data.data(), data.data(), count, DType::bf16, comm::ReduceOp::sum);
  return data;
}

}  // namespace

TEST(CommStagingPool, WideningBuffersComeFromThePoolAndMatchHeapStaging) {
  const size_t count = size_t{1} << 16;  // widened: 256 KiB per fp32 buffer
  const std::vector<uint16_t> heap = all_reduce_bf16(count);
  offload::HostPool pool(size_t{4} << 20);
  size_t in_use = 0;
  std::vector<uint16_t> pooled;
  {
    zero::CommStagingPool binding(pool);
    pooled = all_reduce_bf16(count);
    in_use = pool.stats().in_use;
  }
  std::printf("[rank %d] pool in use during the all-reduce %zu bytes, after the binding %zu\n",
              session().world().rank(), in_use, pool.stats().in_use);
  EXPECT_GE(in_use, 2 * count * sizeof(float)) << "the send and receive widening buffers";
  EXPECT_EQ(pool.stats().in_use, 0u);
  size_t differ = 0;
  for (size_t i = 0; i < count; ++i) differ += heap[i] != pooled[i];
  std::printf("[rank %d] %zu of %zu elements differ from heap staging\n", session().world().rank(),
              differ, count);
  EXPECT_EQ(differ, 0u);
}

TEST(CommStagingPool, StagingBeyondTheBudgetIsAnErrorNamingIt) {
  offload::HostPool pool(size_t{1} << 20);
  zero::CommStagingPool binding(pool);
  std::string message;
  try {
    (void)all_reduce_bf16(size_t{1} << 19);  // 2 MiB per widened buffer, over the 1 MiB budget
  } catch (const Error& e) {
    message = e.what();
  }
  std::printf("[rank %d] %s\n", session().world().rank(), message.c_str());
  EXPECT_NE(message.find("comm fp32"), std::string::npos) << message;
  EXPECT_NE(message.find("budget"), std::string::npos) << message;
}
