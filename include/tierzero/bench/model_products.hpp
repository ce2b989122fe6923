// The model's own products timed two ways on the backend, in the same run: with fp32 operands as
// the training step computes them (Kernels::matmul_forward at the backend's matmul precision;
// with bf16 / fp16 products cuBLASLt rounds the operands inside the GEMM) and with native 16-bit
// operands (Kernels::gemm_16bit), shape by shape. What 16-bit activations would buy the
// products before they exist: `bench train` prints it with 16-bit products on a GPU, the
// evidence for or against keeping activations in 16 bits (issue 26).
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/device/device_allocator.hpp"
#include "tierzero/nn/gpt_config.hpp"

namespace tierzero::bench {

struct ModelProduct {
  // qkv, attn_proj, fc, mlp_proj, head (whole chunks of rows), head_tail (the last chunk)
  std::string name;
  size_t m = 0, n = 0, k = 0;    // c (m, n) = a (m, k) b (n, k)^T, as the forward computes it
  size_t per_step = 0;           // forward products of this shape per micro-batch
  double fp32_operands_s = 0.0;  // median seconds, matmul_forward
  double native_s = 0.0;         // median seconds, gemm_16bit
};

// The forward products of one micro-batch of B x T (rows B·T; the classifier's rows
// classifier_rows at a time, as the chunked head computes them).
std::vector<ModelProduct> model_products(const nn::GPTConfig& cfg, size_t B, size_t T,
                                         size_t classifier_rows);

// Times each product `repeats` times both ways (the first call of each warms up and is not
// counted) with random operands; `type` is the 16-bit type (bf16 or fp16).
void time_model_products(Device& dev, DeviceAllocator& alloc, DType type,
                         std::vector<ModelProduct>& products, int repeats = 5);

// GFLOP/s of one product of p's shape taking `seconds`.
double product_gflops(const ModelProduct& p, double seconds);

// Sum over products of per_step x fp32_operands_s, over the same with native_s: how much faster
// the model's products would run with 16-bit operands.
double native_speedup(const std::vector<ModelProduct>& products);

}  // namespace tierzero::bench
