// The planner's time for the kernels outside the GEMMs: a GPT step also runs attention (its T^2
// score work is not in the 6 FLOPs per parameter per token) and the activation (GELU or SwiGLU) of
// every MLP element, which on a CPU take a quarter of a small model's step. `tierzero plan` times
// both once on the device at the rank's shapes (one sequence) and scales them to each candidate's
// micro-batch. It also times one block's four products (qkv, attention projection, MLP up and down;
// forward and backward) at those shapes: the GEMM rate they reach, which on a CPU core can be far
// below a large square product's, is the rate the plan's GEMM time is taken at.
#pragma once

#include <cstddef>

#include "tierzero/device/device.hpp"
#include "tierzero/nn/gpt_config.hpp"
#include "tierzero/profile/estimator.hpp"
#include "tierzero/profile/planner.hpp"

namespace tierzero::cli {

// Seconds of one layer's kernels for one sequence of `seq` tokens on one rank.
struct LayerKernelTimes {
  double attention_forward_s = 0.0;
  double attention_backward_s = 0.0;
  // The MLP's activation, GELU or SwiGLU (named gelu_* in the plan's JSON since the GELU came
  // first); 0 for a GELU folded into the products in 16-bit compute.
  double gelu_forward_s = 0.0;
  double gelu_backward_s = 0.0;
  size_t layers = 0;  // on this rank: ceil(L / pp)
  // FLOP/s of one block's products (forward and backward) for one sequence on this rank.
  double block_gemm_flops_per_s = 0.0;
};

// Times the kernels on `device` (best of a few runs, as on an idle machine: see
// profile::compute_seconds) in the `compute` dtype the model runs them in, at its shapes (grouped
// kv heads, the MLP's hidden width and activation). A rank computes the attention of NH / (tp *
// sp) heads over all `seq` tokens and the activation of seq / sp tokens' H / tp hidden features.
// In 16-bit compute a GPT-2 MLP folds its GELU into its products (the fc's forward and the
// projection's backward), so their times hold it and the GELU's own are 0; SwiGLU is a pass of
// its own in either dtype.
LayerKernelTimes measure_layer_kernels(Device& device, const nn::GPTConfig& model, size_t seq,
                                       const profile::WorldLayout& world, DType compute);

// Seconds per micro-step of `micro_batch` sequences; selective recompute runs the attention's
// forward twice, full recompute both forwards.
double other_kernel_seconds(const LayerKernelTimes& t, size_t micro_batch,
                            profile::RecomputeMode recompute);

}  // namespace tierzero::cli
