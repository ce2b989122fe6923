// `tierzero bench train`: one training step of a model preset (GPT-2 or the Llama family; fp32, one
// rank) against the machine's own sgemm rate measured in the same run. Table on stderr, one JSON
// object (train.step) on stdout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchTrainStepOptions {
  std::string device = "cpu";  // cpu, cuda or cuda:N
  int64_t threads = 2;         // CPU threads
  int64_t batch = 4;           // micro-batch
  int64_t seq = 64;            // sequence length
  int64_t steps = 3;           // timed steps, after one warm-up step
  std::string model = "gpt2";  // a preset (nn::GPTConfig::preset): gpt2 ... smollm-135m
};

struct BenchTrainStepResult {
  double sgemm_openblas_gflops = 0.0;  // 2048^3 sgemm, OpenBLAS's threads (0 off the CPU)
  double sgemm_backend_gflops = 0.0;   // the same through the backend's matmul
  double sgemm_gflops = 0.0;           // the baseline: the better of the two
  double step_s = 0.0;                 // median timed step
  double gflops = 0.0;                 // the step's model FLOPs over step_s
  double tokens_per_s = 0.0;
  size_t parameters = 0;
  std::string device;
  BenchReport report;  // the train.step line
};

BenchTrainStepResult bench_train_step(const BenchTrainStepOptions& options);

}  // namespace tierzero::bench
