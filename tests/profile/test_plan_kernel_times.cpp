// The planner's kernel timing (src/cli/plan_kernel_times.cpp) in every compute dtype a planned
// config can run: on the CPU, and on a GPU where there is one. Each time it reports is measured
// (the kernels ran on buffers of the sizes they need, which the sanitizer builds check), and in
// 16-bit compute a GPT-2 MLP's GELU is timed inside its products, so its own times are 0, while
// the Llama family's SwiGLU stays a pass of its own.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "plan_kernel_times.hpp"
#include "tierzero/core/dtype.hpp"
#include "tierzero/device/device.hpp"
#include "tierzero/kernels/cpu_ops.hpp"

namespace tierzero::cli {
namespace {

class PlanKernelTimes : public ::testing::TestWithParam<std::string> {};

TEST_P(PlanKernelTimes, EveryComputeDtypeIsMeasuredAtTheRanksShapes) {
  std::string reason;
  if (GetParam() == "cuda" && cuda_device_count(&reason) == 0) GTEST_SKIP() << reason;
  kernels::cpu::set_threads(1);
  std::unique_ptr<Device> dev = make_device(GetParam(), 1);
  for (const char* name : {"gpt2", "llama-tiny"})
    for (const DType compute : {DType::f32, DType::bf16, DType::f16}) {
      const nn::GPTConfig model = nn::GPTConfig::preset(name);  // at 64 tokens per sequence
      const bool swiglu = model.arch.mlp == nn::MlpKind::swiglu;
      dev->kernels().set_matmul_precision(compute == DType::bf16  ? kernels::MatmulPrecision::bf16
                                          : compute == DType::f16 ? kernels::MatmulPrecision::fp16
                                                                  : kernels::MatmulPrecision::fp32);
      for (const int tp : {1, 2}) {
        profile::WorldLayout world;
        world.tp = tp;
        world.pp = 2;
        const LayerKernelTimes t = measure_layer_kernels(*dev, model, 64, world, compute);
        std::printf(
            "%s %s %s tp %d: attention %.3g + %.3g s, activation %.3g + %.3g s, block GEMMs "
            "%.3g GFLOP/s, %zu layers\n",
            GetParam().c_str(), name, dtype_name(compute), tp, t.attention_forward_s,
            t.attention_backward_s, t.gelu_forward_s, t.gelu_backward_s,
            t.block_gemm_flops_per_s / 1e9, t.layers);
        EXPECT_GT(t.attention_forward_s, 0.0);
        EXPECT_GT(t.attention_backward_s, 0.0);
        EXPECT_GT(t.block_gemm_flops_per_s, 0.0);
        EXPECT_EQ(t.layers, (model.num_layers + 1) / 2);  // ceil(L / pp 2)
        if (compute == DType::f32 || swiglu) {            // a pass of its own
          EXPECT_GT(t.gelu_forward_s, 0.0);
          EXPECT_GT(t.gelu_backward_s, 0.0);
        } else {  // GELU in the products' epilogues
          EXPECT_EQ(t.gelu_forward_s, 0.0);
          EXPECT_EQ(t.gelu_backward_s, 0.0);
        }
      }
    }
}

INSTANTIATE_TEST_SUITE_P(Backends, PlanKernelTimes, ::testing::Values("cpu", "cuda"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace tierzero::cli
