// 16-bit compute (GPT::set_compute): GPT-2 and a Llama-style model (RMSNorm, rotary positions
// with Llama 3 scaling, SwiGLU, grouped-query attention, no biases, untied head) with their
// products' operands and activations in bf16 or fp16 against the fp32 reference on the same
// (rounded) weights, within what the precision allows, with the errors printed; bitwise the same
// results whatever the recompute mode, the classifier's chunking or the residual fusion (the
// same kernels on the same inputs); fewer activation bytes, exactly as counted; and the clear
// errors of what it does not run.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "tierzero/core/dtype.hpp"
#include "tierzero/nn/gpt.hpp"
#include "tierzero/nn/model_scratch.hpp"
#include "tierzero/train/adamw_optimizer.hpp"
#include "tiny_gpt.hpp"

using namespace tierzero;
using tierzero::testing::error_of;
using tierzero::testing::tiny_config;
using tierzero::testing::TinyGpt;

namespace {

// Every fp32 parameter rounded to `type` and widened back: the values both runs compute with
// (the working copy, if any, rewritten from them).
void round_params(nn::LocalParams& p, DType type) {
  std::vector<uint16_t> bits(p.numel());
  convert_from_f32(bits.data(), type, p.params(), p.numel());
  convert_to_f32(p.params(), bits.data(), type, p.numel());
  p.round_working();
}

// ||a - b|| / ||b|| over n floats.
double relative_error(const float* a, const float* b, size_t n) {
  double d = 0.0, r = 0.0;
  for (size_t i = 0; i < n; ++i) {
    d += (double{a[i]} - double{b[i]}) * (double{a[i]} - double{b[i]});
    r += double{b[i]} * double{b[i]};
  }
  return r > 0.0 ? std::sqrt(d / r) : std::sqrt(d);
}

struct StepResult {
  float loss;
  std::vector<float> grads;
};

StepResult forward_backward(TinyGpt& g, nn::ParamProvider& p) {
  g.params.zero_grads();
  const float loss = g.model.forward_backward(p, g.x.data(), g.y.data(), g.B, g.T, 1.0f);
  return {loss, std::vector<float>(g.params.grads(), g.params.grads() + g.params.numel())};
}

const nn::GPTConfig kConfig = tiny_config(90, 128, 32, 2, 4, 64);

// The Llama family's layers on a GPT-2 shape: `kv` kv heads, an intermediate size of
// `intermediate` (kConfig's: 4 query heads over 2, 176 features, no multiple of C).
nn::GPTConfig llama_of(const nn::GPTConfig& base, size_t kv, size_t intermediate) {
  nn::GPTConfig c = base;
  c.arch.norm = nn::NormKind::rmsnorm;
  c.arch.positions = nn::PositionKind::rope;
  c.arch.rope_scaling.llama3 = true;
  c.arch.rope_scaling.original_max_position_embeddings = 16;
  c.arch.mlp = nn::MlpKind::swiglu;
  c.arch.intermediate_size = intermediate;
  c.arch.num_kv_heads = kv;
  c.arch.qkv_bias = false;
  c.arch.linear_bias = false;
  c.arch.tie_embeddings = false;
  return c;
}

struct Arch {
  const char* name;
  nn::GPTConfig config;
};
const Arch kArchs[] = {{"GPT-2", kConfig}, {"Llama", llama_of(kConfig, 2, 176)}};

}  // namespace

// The 16-bit run on the rounded weights against the fp32 run on the same weights. The
// tolerances: each stored activation is rounded once per layer (2^-8 relative for bf16, 2^-11
// for fp16), and a two-block model's chain of them stays within two roundings for the loss and
// the whole gradient, four for any one tensor's gradient.
TEST(Compute16, FollowsTheFp32ReferenceWithinThePrecision) {
  for (const Arch& arch : kArchs)
    for (const DType type : {DType::bf16, DType::f16}) {
      SCOPED_TRACE(arch.name);
      TinyGpt ref(arch.config, 4, 24, 7), half(arch.config, 4, 24, 7, type);
      round_params(ref.params, type);
      round_params(half.params, type);
      half.model.set_compute(type);
      ASSERT_EQ(half.model.compute(), type);
      const StepResult r = forward_backward(ref, ref.params);
      const StepResult h = forward_backward(half, half.params);
      // The products ran on other operands: not the fp32 run's bits.
      EXPECT_NE(std::memcmp(h.grads.data(), r.grads.data(), r.grads.size() * sizeof(float)), 0);
      const double loss_err = std::fabs(double{h.loss} - double{r.loss}) / double{r.loss};
      const double grad_err = relative_error(h.grads.data(), r.grads.data(), r.grads.size());
      std::printf(
          "%s, %s compute vs fp32: loss %.6f vs %.6f (relative %.3g), gradients' relative "
          "error %.3g\n",
          arch.name, dtype_name(type), h.loss, r.loss, loss_err, grad_err);
      const double unit = type == DType::bf16 ? 0x1p-8 : 0x1p-11;
      EXPECT_LT(loss_err, 2 * unit) << dtype_name(type);
      EXPECT_LT(grad_err, 2 * unit) << dtype_name(type);
      // Tensor by tensor, so that a small one (a norm's bias) cannot hide in the whole's norm.
      double worst = 0.0;
      std::string worst_name;
      for (const nn::ParamTensor& t : half.model.layout().tensors()) {
        const double e =
            relative_error(h.grads.data() + t.offset, r.grads.data() + t.offset, t.numel);
        if (e > worst) worst = e, worst_name = t.name();
      }
      std::printf("  worst tensor: %s, relative error %.3g\n", worst_name.c_str(), worst);
      EXPECT_LT(worst, 4 * unit) << dtype_name(type) << " " << worst_name;
      // Evaluation: the loss of the forward alone.
      const float er = ref.model.evaluate(ref.params, ref.x.data(), ref.y.data(), ref.B, ref.T);
      const float eh =
          half.model.evaluate(half.params, half.x.data(), half.y.data(), half.B, half.T);
      EXPECT_LT(std::fabs(double{eh} - double{er}) / double{er}, 2 * unit) << dtype_name(type);
    }
}

// Recompute (selective, full) and the unfused residual add run the same kernels on the same
// inputs: bitwise the plain run's loss and gradients. The chunked classifier sums the head's
// weight gradient chunk by chunk: the same up to the order of its fp32 additions.
TEST(Compute16, BitwiseTheSameInEveryRecomputeAndChunking) {
  for (const Arch& arch : kArchs) {
    SCOPED_TRACE(arch.name);
    const DType type = DType::bf16;
    TinyGpt plain(arch.config, 4, 24, 11, type);
    round_params(plain.params, type);
    plain.model.set_compute(type);
    const StepResult base = forward_backward(plain, plain.params);
    struct Variant {
      const char* name;
      nn::Recompute recompute;
      size_t chunk;  // classifier_chunk_tokens; 0: whole logits
      bool fuse;
    };
    for (const Variant& v : {Variant{"selective recompute", nn::Recompute::selective, 0, true},
                             Variant{"full recompute", nn::Recompute(true), 0, true},
                             Variant{"chunked classifier", nn::Recompute(false), 64, true},
                             Variant{"unfused residual add", nn::Recompute(false), 0, false}}) {
      nn::GPTConfig cfg = arch.config;
      cfg.classifier_chunk_tokens = v.chunk;
      TinyGpt g(cfg, 4, 24, 11, type);
      round_params(g.params, type);
      g.model.set_compute(type);
      g.model.set_recompute(v.recompute);
      g.model.set_residual_fusion(v.fuse);
      const StepResult r = forward_backward(g, g.params);
      if (v.chunk > 0) {
        const double err = relative_error(r.grads.data(), base.grads.data(), r.grads.size());
        std::printf("%s, %s: loss %.7f vs %.7f, gradients' relative error %.3g\n", arch.name,
                    v.name, r.loss, base.loss, err);
        EXPECT_NEAR(r.loss, base.loss, 1e-6 * std::fabs(base.loss)) << v.name;
        EXPECT_LT(err, 1e-6) << v.name;
        const float eval = g.model.evaluate(g.params, g.x.data(), g.y.data(), g.B, g.T);
        EXPECT_NEAR(eval, base.loss, 1e-6 * std::fabs(base.loss)) << v.name << " evaluate";
        continue;
      }
      EXPECT_EQ(std::memcmp(&r.loss, &base.loss, sizeof(float)), 0)
          << v.name << ": " << r.loss << " vs " << base.loss;
      EXPECT_EQ(std::memcmp(r.grads.data(), base.grads.data(), r.grads.size() * sizeof(float)), 0)
          << v.name << ": relative error "
          << relative_error(r.grads.data(), base.grads.data(), r.grads.size());
    }
  }
}

// The activations the products read are half as large; the allocation is what the static count
// says, to the byte.
TEST(Compute16, HoldsFewerActivationBytesExactlyAsCounted) {
  TinyGpt ref(kConfig, 4, 24, 3), half(kConfig, 4, 24, 3, DType::bf16);
  half.model.set_compute(DType::bf16);
  (void)forward_backward(ref, ref.params);
  (void)forward_backward(half, half.params);
  const size_t f32 = ref.model.activation_bytes(), b16 = half.model.activation_bytes();
  const nn::ActivationDims d = half.model.dims(4, 24);
  EXPECT_EQ(d.compute, DType::bf16);
  EXPECT_EQ(b16, nn::GPT::micro_batch_bytes_for(kConfig, d, nn::PipelineStage::whole(kConfig),
                                                nn::Recompute(false)) +
                     nn::ModelScratch::bytes_for(d, nn::Recompute(false)));
  std::printf("activation bytes: fp32 %zu, bf16 compute %zu (%.2fx)\n", f32, b16,
              static_cast<double>(f32) / static_cast<double>(b16));
  EXPECT_LT(b16, f32);
}

TEST(Compute16, RefusesWhatItDoesNotRun) {
  TinyGpt g(kConfig, 2, 8, 5);
  // A provider without a 16-bit copy (LocalParams, the fp32 reference).
  g.model.set_compute(DType::bf16);
  const std::string fp32_params =
      error_of([&] { g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f); });
  EXPECT_NE(fp32_params.find("handed out in fp32"), std::string::npos) << fp32_params;
  // A copy of another 16-bit type.
  TinyGpt f16(kConfig, 2, 8, 5, DType::f16);
  f16.model.set_compute(DType::bf16);
  const std::string other = error_of([&] {
    f16.model.forward_backward(f16.params, f16.x.data(), f16.y.data(), f16.B, f16.T, 1.0f);
  });
  EXPECT_NE(other.find("computes in bf16"), std::string::npos) << other;
  // Every split: tensor, sequence and Ulysses parallelism.
  EXPECT_NO_THROW((void)nn::ActivationDims::of(kConfig, 2, 8, 2, false, 1, DType::bf16));
  EXPECT_NO_THROW((void)nn::ActivationDims::of(kConfig, 2, 8, 2, true, 1, DType::bf16));
  EXPECT_NO_THROW((void)nn::ActivationDims::of(kConfig, 2, 8, 1, false, 2, DType::bf16));
  // A micro-batch made before the switch holds fp32 buffers.
  TinyGpt m(kConfig, 2, 8, 5, DType::bf16);
  nn::MicroBatch stale = m.model.make_micro_batch(2, 8);
  m.model.set_compute(DType::bf16);
  const std::string stale_error =
      error_of([&] { m.model.forward(stale, m.params, m.x.data(), m.y.data()); });
  EXPECT_NE(stale_error.find("made for fp32 compute"), std::string::npos) << stale_error;
  // fp32 again: the reference, on the same model.
  g.model.set_compute(DType::f32);
  EXPECT_TRUE(
      std::isfinite(g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f)));
}

// LocalParams' working copy follows its parameters: the AdamW update writes it in its own pass,
// bit for bit the rounded parameters.
TEST(Compute16, TheUpdateRewritesTheWorkingCopy) {
  TinyGpt g(kConfig, 2, 8, 9, DType::bf16);
  g.model.set_compute(DType::bf16);
  train::AdamWOptimizer opt(train::OptimizerConfig{}, g.model.layout(), g.alloc);
  for (int step = 0; step < 2; ++step) {
    g.params.zero_grads();
    (void)g.model.forward_backward(g.params, g.x.data(), g.y.data(), g.B, g.T, 1.0f);
    (void)opt.step(g.params, 1e-2, 1.0);
  }
  std::vector<uint16_t> want(g.params.numel());
  convert_from_f32(want.data(), DType::bf16, g.params.params(), g.params.numel());
  EXPECT_EQ(std::memcmp(want.data(), g.params.working(), want.size() * sizeof(uint16_t)), 0);
}

// The same 16-bit step on CUDA, at that matmul precision as the trainer runs it (the products
// on the tensor cores through cuBLASLt, the attention in its tensor-core flash kernels) against
// the CPU's, which is the fp32 ops on the widened operands: the two differ in their order of
// addition, where cuBLASLt rounds an epilogue, and in fp16 the attention's tiles rounded to
// bf16 as they load; so to bf16's precision, not bitwise. Head dim 64 as GPT-2's; GPT-2 and the
// Llama family (2 query heads over 1 kv head). Skipped without a GPU.
TEST(Compute16, CudaFollowsTheCpu) {
  std::string reason;
  if (cuda_device_count(&reason) == 0) GTEST_SKIP() << "no CUDA device: " << reason;
  const nn::GPTConfig gpt2 = tiny_config(90, 128, 64, 2, 2, 128);
  for (const Arch& arch : {Arch{"GPT-2", gpt2}, Arch{"Llama", llama_of(gpt2, 1, 320)}})
    for (const DType type : {DType::bf16, DType::f16}) {
      const nn::GPTConfig& cfg = arch.config;
      TinyGpt cpu(cfg, 4, 48, 13, type);
      round_params(cpu.params, type);
      cpu.model.set_compute(type);
      const StepResult want = forward_backward(cpu, cpu.params);
      std::unique_ptr<Device> dev = make_device("cuda");
      dev->kernels().set_matmul_precision(type == DType::bf16 ? kernels::MatmulPrecision::bf16
                                                              : kernels::MatmulPrecision::fp16);
      DeviceAllocator alloc(*dev, 0);
      nn::GPT model(cfg, alloc);
      model.set_compute(type);
      nn::LocalParams params(model.layout(), alloc, type);
      const size_t n = params.numel();
      Stream& s = dev->default_stream();
      dev->copy(params.params(), cpu.params.params(), n * sizeof(float), CopyKind::host_to_device,
                s);
      params.round_working();
      params.zero_grads();
      const float loss =
          model.forward_backward(params, cpu.x.data(), cpu.y.data(), cpu.B, cpu.T, 1.0f);
      std::vector<float> grads(n);  // (total_numel)
      dev->copy(grads.data(), params.grads(), n * sizeof(float), CopyKind::device_to_host, s);
      s.synchronize();
      const double unit = 0x1p-8;  // bf16's rounding: fp16's attention tiles are rounded to it
      const double loss_err = std::fabs(double{loss} - double{want.loss}) / double{want.loss};
      const double grad_err = relative_error(grads.data(), want.grads.data(), n);
      double worst = 0.0;
      std::string worst_name;
      for (const nn::ParamTensor& t : model.layout().tensors()) {
        const double e =
            relative_error(grads.data() + t.offset, want.grads.data() + t.offset, t.numel);
        if (e > worst) worst = e, worst_name = t.name();
      }
      std::printf(
          "%s, %s compute, CUDA vs CPU: loss %.6f vs %.6f (relative %.3g), gradients' "
          "relative error %.3g, worst tensor %s %.3g\n",
          arch.name, dtype_name(type), loss, want.loss, loss_err, grad_err, worst_name.c_str(),
          worst);
      EXPECT_LT(loss_err, 2 * unit) << arch.name << " " << dtype_name(type);
      EXPECT_LT(grad_err, 2 * unit) << arch.name << " " << dtype_name(type);
      EXPECT_LT(worst, 4 * unit) << arch.name << " " << dtype_name(type) << " " << worst_name;
    }
}
