// `tierzero bench train`: one training step of a model preset (GPT-2 or the Llama family; fp32
// parameters, one rank) against the machine's own GEMM rate measured in the same run, at the same
// matmul precision. Table on stderr, one JSON object (train.step) on stdout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tierzero/bench/results.hpp"

namespace tierzero::bench {

struct BenchTrainStepOptions {
  std::string device = "cpu";  // cpu, cuda or cuda:N
  int64_t threads = 2;         // CPU threads
  // micro-batch; 0: the largest whose step fits `device_mem` (train_batch_fit.hpp), on a GPU by
  // default its memory less what the CUDA context and the libraries hold and a margin
  int64_t batch = 4;
  int64_t device_mem = 0;      // bytes the step's allocator may hold; 0: the device's memory
  int64_t seq = 64;            // sequence length
  int64_t steps = 3;           // timed steps, after one warm-up step
  std::string model = "gpt2";  // a preset (nn::GPTConfig::preset): gpt2 ... smollm-135m
  // Kernels::set_matmul_precision for the step and for the GEMM baseline: fp32, tf32, bf16 or
  // fp16 (the parameters stay fp32; the CPU computes in fp32 whatever is asked).
  std::string matmul_precision = "fp32";
  // GPTConfig::classifier_chunk_tokens: tokens of logits held at once; 0 automatic (128 MiB),
  // batch * seq or more keeps them whole.
  int64_t classifier_chunk = 0;
  // What the step's products and activations run in (nn::GPT::set_compute): "auto", the 16-bit
  // type of a bf16 or fp16 precision on CUDA (every architecture), else fp32;
  // "fp32"; or "bf16" / "fp16", which must be the precision's type. 16-bit compute keeps a
  // 16-bit working copy of the parameters beside the fp32 master, written by the AdamW update.
  std::string compute_dtype = "auto";
};

struct BenchTrainStepResult {
  double sgemm_openblas_gflops = 0.0;  // 2048^3 sgemm, OpenBLAS's threads (0 off the CPU)
  double sgemm_backend_gflops = 0.0;   // the same through the backend's matmul
  double sgemm_gflops = 0.0;           // the baseline: the better of the two
  std::string matmul_precision;        // what the backend's products ran at (fp32 on the CPU)
  std::string compute_dtype;           // what the step's activations and operands were held in
  double step_s = 0.0;                 // median timed step
  double gflops = 0.0;                 // the step's model FLOPs over step_s
  double tokens_per_s = 0.0;
  size_t parameters = 0;
  std::string device;
  size_t batch = 0;       // the micro-batch stepped (the one found with batch 0)
  size_t peak_bytes = 0;  // the step's tracked device peak (its allocator's, rounded sizes)
  // With batch 0: the budget searched within, and the predicted peaks at `batch` and one more.
  size_t fit_budget = 0, fit_predicted_peak = 0, fit_next_peak = 0;
  int fit_retries = 0;  // times the device refused the predicted batch and one ~6% smaller ran
  BenchReport report;   // the train.step line
};

BenchTrainStepResult bench_train_step(const BenchTrainStepOptions& options);

}  // namespace tierzero::bench
