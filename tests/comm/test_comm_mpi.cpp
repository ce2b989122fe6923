// Every MPI-backend operation in every dtype, blocking and asynchronous, on sizes that do and do
// not divide by the rank count, against a reference each rank computes locally in fp32. Run by
// CTest under mpiexec with 2, 3 and 4 ranks. Also: bf16 sums are accumulated in fp32, operations
// progress while the caller computes, and bad arguments are clear errors.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "mpi_test_main.hpp"
#include "tierzero/comm/communicator.hpp"
#include "tierzero/core/error.hpp"

namespace tierzero::comm::test {
namespace {

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};
const size_t kCounts[] = {1, 7, 1000, 4099};  // per rank; 7 and 4099 are prime

enum class Mode { blocking, async };
const Mode kModes[] = {Mode::blocking, Mode::async};
const char* mode_name(Mode m) {
  return m == Mode::blocking ? "blocking" : "async";
}

Communicator& world() {
  return session().world();
}

std::string label(const char* op, DType t, Mode m) {
  return std::string(op) + " " + dtype_name(t) + " " + mode_name(m) + " (" +
         std::to_string(world().size()) + " ranks)";
}

// Runs `issue(count)` for every count: one at a time (blocking) or all issued first and then
// waited together (async), which also exercises several operations in flight at once.
template <typename Issue>
void run_counts(Mode mode, Issue&& issue) {
  std::vector<CommRequest> pending;
  for (size_t count : kCounts) {
    CommRequest r = issue(count);
    if (mode == Mode::blocking) {
      r.wait();
    } else {
      pending.push_back(std::move(r));
    }
  }
  wait_all(pending);
}

TEST(CommMpi, AllGather) {
  Communicator& c = world();
  const int n = c.size();
  for (DType t : kDTypes) {
    for (Mode m : kModes) {
      ErrorStats err;
      std::vector<TypedBuffer> sends, recvs;
      sends.reserve(8);
      recvs.reserve(8);
      run_counts(m, [&](size_t count) {
        std::vector<float> mine(count);  // (count)
        for (size_t i = 0; i < count; ++i) mine[i] = test_value(c.rank(), i, 1, t);
        sends.emplace_back(t, count);
        sends.back().set(mine);
        recvs.emplace_back(t, count * static_cast<size_t>(n));
        return c.all_gather_async(sends.back().data(), recvs.back().data(), count, t);
      });
      for (size_t k = 0; k < recvs.size(); ++k) {
        const size_t count = kCounts[k];
        const std::vector<float> got = recvs[k].get();
        for (int r = 0; r < n; ++r)
          for (size_t i = 0; i < count; ++i)
            err.compare(got[static_cast<size_t>(r) * count + i], test_value(r, i, 1, t), 0.0, 0.0);
      }
      err.print(label("all_gather", t, m), c.rank());
      EXPECT_EQ(err.bad, 0u) << label("all_gather", t, m);
    }
  }
}

TEST(CommMpi, AllGatherInPlace) {
  Communicator& c = world();
  const int n = c.size();
  const size_t count = 333;
  TypedBuffer buf(DType::bf16, count * static_cast<size_t>(n));
  std::vector<float> init(count * static_cast<size_t>(n), 0.0f);  // (n * count)
  for (size_t i = 0; i < count; ++i)
    init[static_cast<size_t>(c.rank()) * count + i] = test_value(c.rank(), i, 2, DType::bf16);
  buf.set(init);
  auto* mine = static_cast<unsigned char*>(buf.data()) +
               static_cast<size_t>(c.rank()) * count * dtype_size(DType::bf16);
  c.all_gather(mine, buf.data(), count, DType::bf16);
  ErrorStats err;
  const std::vector<float> got = buf.get();
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < count; ++i)
      err.compare(got[static_cast<size_t>(r) * count + i], test_value(r, i, 2, DType::bf16), 0.0,
                  0.0);
  err.print("all_gather in place bf16", c.rank());
  EXPECT_EQ(err.bad, 0u);
}

// The fp32 reference of a reduction over ranks of test_value(r, index, salt), in rank order.
float reduced_reference(int ranks, size_t index, uint32_t salt, DType t, ReduceOp op) {
  float sum = 0.0f;
  for (int r = 0; r < ranks; ++r) sum += test_value(r, index, salt, t);
  if (op == ReduceOp::avg) sum /= static_cast<float>(ranks);
  return round_to(sum, t);
}

TEST(CommMpi, ReduceScatter) {
  Communicator& c = world();
  const int n = c.size();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    for (DType t : kDTypes) {
      for (Mode m : kModes) {
        ErrorStats err;
        std::vector<TypedBuffer> sends, recvs;
        sends.reserve(8);
        recvs.reserve(8);
        run_counts(m, [&](size_t count) {
          const size_t total = count * static_cast<size_t>(n);
          std::vector<float> mine(total);  // (n * count)
          for (size_t i = 0; i < total; ++i) mine[i] = test_value(c.rank(), i, 3, t);
          sends.emplace_back(t, total);
          sends.back().set(mine);
          recvs.emplace_back(t, count);
          return c.reduce_scatter_async(sends.back().data(), recvs.back().data(), count, t, op);
        });
        for (size_t k = 0; k < recvs.size(); ++k) {
          const size_t count = kCounts[k];
          const std::vector<float> got = recvs[k].get();
          for (size_t i = 0; i < count; ++i)
            err.compare(got[i],
                        reduced_reference(n, static_cast<size_t>(c.rank()) * count + i, 3, t, op),
                        1e-5, rtol_for(t));
        }
        const std::string what = label("reduce_scatter", t, m) + " " + reduce_op_name(op);
        err.print(what, c.rank());
        EXPECT_EQ(err.bad, 0u) << what;
      }
    }
  }
}

TEST(CommMpi, AllReduce) {
  Communicator& c = world();
  const int n = c.size();
  for (ReduceOp op : {ReduceOp::sum, ReduceOp::avg}) {
    for (DType t : kDTypes) {
      for (Mode m : kModes) {
        for (bool in_place : {false, true}) {
          ErrorStats err;
          std::vector<TypedBuffer> sends, recvs;
          sends.reserve(8);
          recvs.reserve(8);
          run_counts(m, [&](size_t count) {
            std::vector<float> mine(count);  // (count)
            for (size_t i = 0; i < count; ++i) mine[i] = test_value(c.rank(), i, 4, t);
            sends.emplace_back(t, count);
            sends.back().set(mine);
            recvs.emplace_back(t, count);
            if (in_place) recvs.back().set(mine);
            void* out = recvs.back().data();
            return c.all_reduce_async(in_place ? out : sends.back().data(), out, count, t, op);
          });
          for (size_t k = 0; k < recvs.size(); ++k) {
            const std::vector<float> got = recvs[k].get();
            for (size_t i = 0; i < kCounts[k]; ++i)
              err.compare(got[i], reduced_reference(n, i, 4, t, op), 1e-5, rtol_for(t));
          }
          const std::string what =
              label("all_reduce", t, m) + " " + reduce_op_name(op) + (in_place ? " in place" : "");
          err.print(what, c.rank());
          EXPECT_EQ(err.bad, 0u) << what;
        }
      }
    }
  }
}

// bf16 sums are accumulated in fp32 and rounded once: 1 + (n-1) * 3 * 2^-10 rounds up to the
// next bf16 (1 + 2^-7) for n >= 3, while adding in bf16 one rank at a time would stay at 1.
TEST(CommMpi, Bf16SumAccumulatesInFp32) {
  Communicator& c = world();
  const int n = c.size();
  const float small = 3.0f / 1024.0f;
  TypedBuffer buf(DType::bf16, 16);
  buf.set(std::vector<float>(16, c.rank() == 0 ? 1.0f : small));
  c.all_reduce(buf.data(), buf.data(), 16, DType::bf16, ReduceOp::sum);
  const float want = round_to(1.0f + static_cast<float>(n - 1) * small, DType::bf16);
  float stepwise = 1.0f;  // what per-step bf16 rounding would give
  for (int r = 1; r < n; ++r) stepwise = round_to(stepwise + small, DType::bf16);
  ErrorStats err;
  for (float v : buf.get()) err.compare(v, want, 0.0, 0.0);
  err.print("bf16 sum accumulates in fp32 (want " + std::to_string(want) + ", bf16 stepwise " +
                std::to_string(stepwise) + ")",
            c.rank());
  EXPECT_EQ(err.bad, 0u);
  if (n >= 3) {
    EXPECT_NE(want, stepwise) << "the test values no longer tell the two apart";
  }
}

// A tensor whose size does not divide by the rank count, the way ZeRO handles it: the caller
// pads to padded_count() with zeros, reduce-scatters into shards, and all-gathers them back.
TEST(CommMpi, UnevenSizesPaddedByCaller) {
  Communicator& c = world();
  const int n = c.size();
  for (DType t : kDTypes) {
    for (size_t total : {size_t{1}, size_t{1001}, size_t{4097}}) {
      const size_t shard = shard_count(total, n);
      const size_t padded = padded_count(total, n);
      std::vector<float> grads(padded, 0.0f);  // (padded); the tail stays zero
      for (size_t i = 0; i < total; ++i) grads[i] = test_value(c.rank(), i, 5, t);
      TypedBuffer full(t, padded), mine(t, shard), gathered(t, padded);
      full.set(grads);
      c.reduce_scatter(full.data(), mine.data(), shard, t, ReduceOp::sum);
      ErrorStats err;
      const std::vector<float> got = mine.get();
      const size_t begin = shard * static_cast<size_t>(c.rank());
      EXPECT_EQ(owned_count(total, n, c.rank()),
                begin >= total ? 0 : std::min(shard, total - begin));
      for (size_t i = 0; i < shard; ++i) {
        const size_t g = begin + i;
        err.compare(got[i], g < total ? reduced_reference(n, g, 5, t, ReduceOp::sum) : 0.0f, 1e-5,
                    rtol_for(t));
      }
      c.all_gather(mine.data(), gathered.data(), shard, t);
      const std::vector<float> all = gathered.get();
      for (size_t i = 0; i < padded; ++i)
        err.compare(all[i], i < total ? reduced_reference(n, i, 5, t, ReduceOp::sum) : 0.0f, 1e-5,
                    rtol_for(t));
      const std::string what = std::string("uneven ") + std::to_string(total) + " elements " +
                               dtype_name(t) + " over " + std::to_string(n) + " ranks (shard " +
                               std::to_string(shard) + ", padded " + std::to_string(padded) + ")";
      err.print(what, c.rank());
      EXPECT_EQ(err.bad, 0u) << what;
    }
  }
}

TEST(CommMpi, Broadcast) {
  Communicator& c = world();
  for (DType t : kDTypes) {
    for (Mode m : kModes) {
      ErrorStats err;
      for (int root = 0; root < c.size(); ++root) {
        std::vector<TypedBuffer> bufs;
        bufs.reserve(8);
        run_counts(m, [&](size_t count) {
          std::vector<float> v(count, -7.0f);  // (count)
          if (c.rank() == root)
            for (size_t i = 0; i < count; ++i) v[i] = test_value(root, i, 6, t);
          bufs.emplace_back(t, count);
          bufs.back().set(v);
          return c.broadcast_async(bufs.back().data(), count, t, root);
        });
        for (size_t k = 0; k < bufs.size(); ++k) {
          const std::vector<float> got = bufs[k].get();
          for (size_t i = 0; i < kCounts[k]; ++i)
            err.compare(got[i], test_value(root, i, 6, t), 0.0, 0.0);
        }
      }
      err.print(label("broadcast", t, m), c.rank());
      EXPECT_EQ(err.bad, 0u) << label("broadcast", t, m);
    }
  }
}

// A ring: each rank sends to the next and receives from the previous. Both are issued before
// either is waited, which would deadlock if sends blocked the engine.
TEST(CommMpi, SendRecvRing) {
  Communicator& c = world();
  const int n = c.size();
  const int next = (c.rank() + 1) % n;
  const int prev = (c.rank() + n - 1) % n;
  for (DType t : kDTypes) {
    for (Mode m : kModes) {
      ErrorStats err;
      for (size_t count : {size_t{5}, size_t{100000}}) {  // eager and rendezvous protocols
        std::vector<float> mine(count);                   // (count)
        for (size_t i = 0; i < count; ++i) mine[i] = test_value(c.rank(), i, 7, t);
        TypedBuffer out(t, count), in(t, count);
        out.set(mine);
        if (m == Mode::async) {
          CommRequest r = c.recv_async(in.data(), count, t, prev, 3);
          CommRequest s = c.send_async(out.data(), count, t, next, 3);
          s.wait();
          r.wait();
        } else if (c.rank() % 2 == 0) {
          c.send(out.data(), count, t, next, 3);
          c.recv(in.data(), count, t, prev, 3);
        } else {
          c.recv(in.data(), count, t, prev, 3);
          c.send(out.data(), count, t, next, 3);
        }
        const std::vector<float> got = in.get();
        for (size_t i = 0; i < count; ++i) err.compare(got[i], test_value(prev, i, 7, t), 0.0, 0.0);
      }
      err.print(label("send/recv", t, m), c.rank());
      EXPECT_EQ(err.bad, 0u) << label("send/recv", t, m);
    }
  }
}

TEST(CommMpi, AllToAll) {
  Communicator& c = world();
  const int n = c.size();
  for (DType t : kDTypes) {
    for (Mode m : kModes) {
      ErrorStats err;
      std::vector<TypedBuffer> sends, recvs;
      sends.reserve(8);
      recvs.reserve(8);
      run_counts(m, [&](size_t count) {
        const size_t total = count * static_cast<size_t>(n);
        std::vector<float> mine(total);  // (n * count): block p goes to rank p
        for (size_t i = 0; i < total; ++i) mine[i] = test_value(c.rank(), i, 8, t);
        sends.emplace_back(t, total);
        sends.back().set(mine);
        recvs.emplace_back(t, total);
        return c.all_to_all_async(sends.back().data(), recvs.back().data(), count, t);
      });
      for (size_t k = 0; k < recvs.size(); ++k) {
        const size_t count = kCounts[k];
        const std::vector<float> got = recvs[k].get();
        for (int j = 0; j < n; ++j)
          for (size_t i = 0; i < count; ++i)
            err.compare(got[static_cast<size_t>(j) * count + i],
                        test_value(j, static_cast<size_t>(c.rank()) * count + i, 8, t), 0.0, 0.0);
      }
      err.print(label("all_to_all", t, m), c.rank());
      EXPECT_EQ(err.bad, 0u) << label("all_to_all", t, m);
    }
  }
}

TEST(CommMpi, Barrier) {
  Communicator& c = world();
  c.barrier();
  CommRequest r = c.barrier_async();
  r.wait();
  EXPECT_FALSE(r.pending());
}

// An asynchronous all-gather completes while this thread computes and makes no MPI call:
// the engine thread drives it. (Open MPI alone progresses non-blocking collectives only inside
// MPI calls.)
TEST(CommMpi, AsyncProgressesWhileCallerComputes) {
  Communicator& c = world();
  const size_t count = size_t{1} << 20;                            // 4 MiB of fp32 per rank
  std::vector<float> send(count, static_cast<float>(c.rank()));    // (count)
  std::vector<float> recv(count * static_cast<size_t>(c.size()));  // (n * count)
  using Clock = std::chrono::steady_clock;
  c.barrier();
  const Clock::time_point t0 = Clock::now();
  c.all_gather(send.data(), recv.data(), count, DType::f32);
  const double blocking_s = std::chrono::duration<double>(Clock::now() - t0).count();
  c.barrier();

  const Clock::time_point t1 = Clock::now();
  CommRequest r = c.all_gather_async(send.data(), recv.data(), count, DType::f32);
  const double issue_s = std::chrono::duration<double>(Clock::now() - t1).count();
  // "Compute": a dependent arithmetic chain, checking the request (no MPI inside) every 1 ms.
  volatile double sink = 0.0;
  double x = 1.0;
  bool done = false;
  double done_after_s = 0.0;
  const double give_up_s = 20.0 * blocking_s + 5.0;
  while (!done) {
    const Clock::time_point chunk = Clock::now();
    while (std::chrono::duration<double>(Clock::now() - chunk).count() < 1e-3)
      for (int i = 0; i < 1000; ++i) x = x * 1.0000001 + 1e-9;
    sink = x;
    done_after_s = std::chrono::duration<double>(Clock::now() - t1).count();
    done = r.test();
    if (done_after_s > give_up_s) break;
  }
  (void)sink;
  std::printf(
      "[rank %d] all_gather 4 MiB/rank: blocking %.2f ms; async issue %.3f ms, done "
      "after %.2f ms of computing (no MPI calls by the caller)\n",
      c.rank(), blocking_s * 1e3, issue_s * 1e3, done_after_s * 1e3);
  ASSERT_TRUE(done) << "the asynchronous all_gather made no progress while the caller computed";
  for (int r2 = 0; r2 < c.size(); ++r2)
    EXPECT_EQ(recv[static_cast<size_t>(r2) * count + count - 1], static_cast<float>(r2));
}

// Under mpiexec on one machine every rank shares the node: local rank = rank, local size =
// size, for the world and for a group split from it; asking again is local (kept).
TEST(CommMpi, NodeLocalRankOnOneNode) {
  MpiCommunicator& w = session().world();
  EXPECT_EQ(node_local_size(w), w.size());
  EXPECT_EQ(node_local_rank(w), w.rank());
  EXPECT_EQ(node_local_rank(w), w.rank());
  std::unique_ptr<MpiCommunicator> half = w.split(w.rank() % 2, w.rank(), "half");
  EXPECT_EQ(node_local_rank(*half), half->rank());
  EXPECT_EQ(node_local_size(*half), half->size());
  std::printf("[rank %d] node-local rank %d of %d (world); %d of %d (group half)\n", w.rank(),
              node_local_rank(w), node_local_size(w), node_local_rank(*half),
              node_local_size(*half));
  w.barrier();  // and the group still works after the collective
}

TEST(CommMpi, BadArgumentsAreClearErrors) {
  Communicator& c = world();
  float x = 0.0f;
  try {
    c.send(&x, 1, DType::f32, c.size());
    FAIL() << "sending to a rank outside the group did not throw";
  } catch (const Error& e) {
    std::printf("[rank %d] expected error: %s\n", c.rank(), e.what());
    EXPECT_NE(std::string(e.what()).find("is not in the group"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("group world"), std::string::npos);
  }
  EXPECT_THROW(c.all_reduce(nullptr, nullptr, 4, DType::f32, ReduceOp::sum), Error);
  EXPECT_THROW(c.all_to_all(&x, &x, 1, DType::f32), Error);
}

}  // namespace
}  // namespace tierzero::comm::test
