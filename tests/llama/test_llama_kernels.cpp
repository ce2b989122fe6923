// The Llama family's kernels on every backend. Grouped-query attention against the multi-head
// kernel on the same backend with each kv head repeated for its group's query heads (the forward
// must agree, and each kv head's gradient must be the sum over its group); rotary embeddings'
// backward must undo their forward and keep every pair's length; and where a backend other than
// the CPU runs, RMSNorm, RoPE and SwiGLU must match the CPU kernels (which test_llama checks
// against Hugging Face transformers).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "kernel_test_support.hpp"
#include "tierzero/core/error.hpp"
#include "tierzero/kernels/kernels.hpp"

namespace tierzero::test {
namespace {

class LlamaKernelTest : public KernelTest {};
TZ_INSTANTIATE_BACKENDS(LlamaKernelTest);

// The multi-head [q | k | v] rows equivalent to grouped rows: kv head g repeated for its rep
// query heads.
std::vector<float> to_multi_head(const std::vector<float>& grouped, size_t rows, size_t NH,
                                 size_t KVH, size_t hs) {
  const size_t rep = NH / KVH, C = NH * hs, W = KVH * (rep + 2) * hs;
  std::vector<float> mha(rows * 3 * C);
  for (size_t r = 0; r < rows; ++r)
    for (size_t h = 0; h < NH; ++h) {
      const size_t g = h / rep, base = r * W + g * (rep + 2) * hs;
      for (size_t i = 0; i < hs; ++i) {
        mha[r * 3 * C + h * hs + i] = grouped[base + (h % rep) * hs + i];
        mha[r * 3 * C + C + h * hs + i] = grouped[base + rep * hs + i];
        mha[r * 3 * C + 2 * C + h * hs + i] = grouped[base + (rep + 1) * hs + i];
      }
    }
  return mha;
}

// The multi-head gradient folded back onto the grouped layout: k and v summed over each group.
std::vector<double> to_grouped(const std::vector<float>& mha, size_t rows, size_t NH, size_t KVH,
                               size_t hs) {
  const size_t rep = NH / KVH, C = NH * hs, W = KVH * (rep + 2) * hs;
  std::vector<double> g(rows * W, 0.0);
  for (size_t r = 0; r < rows; ++r)
    for (size_t h = 0; h < NH; ++h) {
      const size_t base = r * W + h / rep * (rep + 2) * hs;
      for (size_t i = 0; i < hs; ++i) {
        g[base + (h % rep) * hs + i] += double{mha[r * 3 * C + h * hs + i]};
        g[base + rep * hs + i] += double{mha[r * 3 * C + C + h * hs + i]};
        g[base + (rep + 1) * hs + i] += double{mha[r * 3 * C + 2 * C + h * hs + i]};
      }
    }
  return g;
}

// The grouped layout through the backend's attention (on the CPU the tiled kernel, shape.grouped)
// and the reference grouped-query kernel (probabilities kept) both equal the multi-head attention
// on the same heads with each kv head repeated over its group.
TEST_P(LlamaKernelTest, GroupedQueryAttentionIsMultiHeadWithSharedKv) {
  const size_t B = 2, T = 11, NH = 4, hs = 8, C = NH * hs;
  uint32_t seed = 3000;
  const auto floats = [this](size_t n) { return empty<float>(std::max<size_t>(n, 1)); };
  for (size_t KVH : {size_t{4}, size_t{2}, size_t{1}}) {
    const std::string what = "KVH " + std::to_string(KVH);
    const size_t W = KVH * (NH / KVH + 2) * hs, rows = B * T;
    const kernels::AttentionShape g{B, T, NH, KVH, hs, true}, m{B, T, NH, NH, hs, false};
    const std::vector<float> qkv = random_normal(rows * W, seed++, 1.5f);
    const std::vector<float> mha = to_multi_head(qkv, rows, NH, KVH, hs);
    auto d_qkv = to_device(qkv);
    auto d_mha = to_device(mha);
    auto out = empty<float>(rows * C), out_ref = empty<float>(rows * C),
         out_mha = empty<float>(rows * C);
    auto saved = floats(kernels().attention_saved_floats(g)),
         saved_mha = floats(kernels().attention_saved_floats(m));
    auto att_ref = empty<float>(B * NH * T * T);
    kernels().attention_forward(out->get(), saved->get(), d_qkv->get(), g);
    kernels().gqa_attention_forward(out_ref->get(), att_ref->get(), d_qkv->get(), B, T, NH, KVH,
                                    hs);
    kernels().attention_forward(out_mha->get(), saved_mha->get(), d_mha->get(), m);
    expect_close("grouped forward out, " + what, out->download(), widen(out_mha->download()), 1e-6);
    // The naive reference against the tiled kernel: two fp32 algorithms (one softmax over the
    // row, an online one over tiles), 1.2e-6 apart on the Intel Xeon VM; 3e-6 is what the tiled
    // kernel's own test allows against the naive one.
    expect_close("reference gqa forward out, " + what, out_ref->download(),
                 widen(out_mha->download()), 5e-6);

    const std::vector<float> dout = random_normal(rows * C, seed++);
    auto d_dout = to_device(dout);
    // The fused kernel writes dqkv whole (NaN before); the naive reference adds into zeros.
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto dqkv = to_device(std::vector<float>(rows * W, nan));
    auto dqkv_ref = to_device(std::vector<float>(rows * W, 0.0f));
    auto dmha = to_device(std::vector<float>(rows * 3 * C, nan));
    auto scratch = floats(kernels().attention_scratch_floats(g)),
         scratch_mha = floats(kernels().attention_scratch_floats(m));
    auto datt_ref = empty<float>(B * NH * T * T);
    kernels().attention_backward(dqkv->get(), scratch->get(), d_dout->get(), out->get(),
                                 d_qkv->get(), saved->get(), g);
    kernels().gqa_attention_backward(dqkv_ref->get(), datt_ref->get(), d_dout->get(), d_qkv->get(),
                                     att_ref->get(), B, T, NH, KVH, hs);
    kernels().attention_backward(dmha->get(), scratch_mha->get(), d_dout->get(), out_mha->get(),
                                 d_mha->get(), saved_mha->get(), m);
    const std::vector<double> want = to_grouped(dmha->download(), rows, NH, KVH, hs);
    expect_close("grouped backward dqkv, " + what, dqkv->download(), want, 1e-5);
    expect_close("reference gqa backward dqkv, " + what, dqkv_ref->download(), want, 1e-5);
  }
}

TEST_P(LlamaKernelTest, RopeBackwardUndoesForwardAndKeepsLengths) {
  const size_t B = 2, T = 9, blocks = 2, block_heads = 4, rotated = 3, hs = 16;
  kernels::RopeParams p;
  p.llama3 = true;
  p.original_max = 16.0f;
  const size_t n = B * T * blocks * block_heads * hs;
  const std::vector<float> x = random_normal(n, 3100);
  auto d = to_device(x);
  kernels().rope_forward(d->get(), B, T, blocks, block_heads, rotated, hs, 3, p);
  const std::vector<float> y = d->download();
  size_t moved = 0;
  for (size_t row = 0; row < n / hs; ++row) {
    const bool turned = (row % block_heads) < rotated;
    for (size_t i = 0; i < hs / 2; ++i) {
      const size_t a = row * hs + i, b = a + hs / 2;
      const double before = std::hypot(double{x[a]}, double{x[b]});
      const double after = std::hypot(double{y[a]}, double{y[b]});
      ASSERT_NEAR(after, before, 1e-5 * (1.0 + before)) << "pair length changed";
      if (!turned) {
        ASSERT_EQ(y[a], x[a]) << "a v head was rotated";
      }
      moved += y[a] != x[a];
    }
  }
  EXPECT_GT(moved, n / 8) << "the rotation did not move the q and k heads";
  kernels().rope_backward(d->get(), B, T, blocks, block_heads, rotated, hs, 3, p);
  expect_close("rope backward(forward(x))", d->download(), widen(x), 1e-5);
}

TEST_P(LlamaKernelTest, MatchesTheCpuKernels) {
  if (is_cpu()) GTEST_SKIP() << "compares another backend with the CPU";
  auto cpu = kernels::make_cpu_kernels();
  const size_t N = 37, C = 96, H = 80;
  const std::vector<float> x = random_normal(N * C, 3200), w = random_normal(C, 3201, 0.2f, 1.0f);
  const std::vector<float> dy = random_normal(N * C, 3202);
  std::vector<float> y(N * C), rstd(N), dx(N * C, 0.0f), dw(C, 0.0f);
  cpu->rmsnorm_forward(y.data(), rstd.data(), x.data(), w.data(), N, C, 1e-6f);
  cpu->rmsnorm_backward(dx.data(), dw.data(), dy.data(), x.data(), w.data(), rstd.data(), N, C);
  auto d_x = to_device(x), d_w = to_device(w), d_dy = to_device(dy);
  auto d_y = empty<float>(N * C), d_rstd = empty<float>(N);
  auto d_dx = to_device(std::vector<float>(N * C, 0.0f)),
       d_dw = to_device(std::vector<float>(C, 0.0f));
  kernels().rmsnorm_forward(d_y->get(), d_rstd->get(), d_x->get(), d_w->get(), N, C, 1e-6f);
  kernels().rmsnorm_backward(d_dx->get(), d_dw->get(), d_dy->get(), d_x->get(), d_w->get(),
                             d_rstd->get(), N, C);
  expect_close("rmsnorm out", d_y->download(), widen(y), 1e-5);
  expect_close("rmsnorm dinp", d_dx->download(), widen(dx), 1e-5);
  expect_close("rmsnorm dweight", d_dw->download(), widen(dw), 1e-4);

  const std::vector<float> gu = random_normal(N * 2 * H, 3203), ds = random_normal(N * H, 3204);
  std::vector<float> s(N * H), dgu(N * 2 * H, 0.0f);
  cpu->swiglu_forward(s.data(), gu.data(), N, H);
  cpu->swiglu_backward(dgu.data(), gu.data(), ds.data(), N, H);
  auto d_gu = to_device(gu), d_ds = to_device(ds);
  auto d_s = empty<float>(N * H);
  auto d_dgu = to_device(std::vector<float>(N * 2 * H, 0.0f));
  kernels().swiglu_forward(d_s->get(), d_gu->get(), N, H);
  kernels().swiglu_backward(d_dgu->get(), d_gu->get(), d_ds->get(), N, H);
  expect_close("swiglu out", d_s->download(), widen(s), 1e-5);
  expect_close("swiglu dinp", d_dgu->download(), widen(dgu), 1e-5);

  kernels::RopeParams p;
  p.theta = 500000.0f;
  p.llama3 = true;
  std::vector<float> r = random_normal(2 * 300 * 3 * 64, 3205);
  auto d_r = to_device(r);
  cpu->rope_forward(r.data(), 2, 300, 1, 3, 2, 64, 100, p);
  kernels().rope_forward(d_r->get(), 2, 300, 1, 3, 2, 64, 100, p);
  expect_close("rope", d_r->download(), widen(r), 1e-4);
}

// The 16-bit RoPE and SwiGLU (16-bit compute of the Llama family) on the rounded inputs: bitwise
// the fp32 op on the widened values, then rounded, on the same backend; rope16 keeps the v heads'
// bits. Shapes that are not multiples of anything: N 37, H 7 and 80, T 9 over 2 blocks of 4 heads.
TEST_P(LlamaKernelTest, SixteenBitRopeAndSwigluAreTheFp32OpsRounded) {
  uint32_t seed = 3400;
  for (const DType type : {DType::bf16, DType::f16}) {
    const std::string tn = dtype_name(type);
    // The fp32 op `op` on the widened 16-bit x, rounded: what the 16-bit op must write.
    const auto via_fp32 = [&](const Rounded& x, const auto& op) {
      auto wide = to_device(x.values);
      op(wide->get());
      auto out = to_device(poison(x.values.size()));
      kernels().convert_from_f32(out->get(), type, wide->get(), x.values.size());
      return out->download();
    };
    kernels::RopeParams p;
    p.llama3 = true;
    p.original_max = 16.0f;
    const size_t B = 2, T = 9, blocks = 2, block_heads = 4, rotated = 3, hs = 16;
    const size_t n = B * T * blocks * block_heads * hs;
    const Rounded x = rounded(random_normal(n, seed++, 2.0f), type);
    for (const bool inverse : {false, true}) {
      auto x16 = to_device(poison(n));
      kernels().convert_from_f32(x16->get(), type, to_device(x.values)->get(), n);
      if (inverse)
        kernels().rope16_backward(x16->get(), type, B, T, blocks, block_heads, rotated, hs, 3, p);
      else
        kernels().rope16_forward(x16->get(), type, B, T, blocks, block_heads, rotated, hs, 3, p);
      const std::vector<float> want = via_fp32(x, [&](float* d) {
        if (inverse)
          kernels().rope_backward(d, B, T, blocks, block_heads, rotated, hs, 3, p);
        else
          kernels().rope_forward(d, B, T, blocks, block_heads, rotated, hs, 3, p);
      });
      EXPECT_TRUE(same_bits(x16->download(), want))
          << tn << (inverse ? " rope16_backward" : " rope16_forward");
      std::printf("%s rope16 %s: the fp32 op's bits, rounded\n", tn.c_str(),
                  inverse ? "backward" : "forward");
    }
    for (const size_t H : {size_t{7}, size_t{80}}) {
      const size_t N = 37;
      const Rounded gu = rounded(random_normal(N * 2 * H, seed++, 2.0f), type);  // (N, 2H)
      const Rounded dy = rounded(random_normal(N * H, seed++), type);            // (N, H)
      auto d_gu = to_device(gu.bits), d_dy = to_device(dy.bits);
      auto out = to_device(poison(N * H)), dinp = to_device(poison(N * 2 * H));
      kernels().swiglu16_forward(out->get(), d_gu->get(), type, N, H);
      kernels().swiglu16_backward(dinp->get(), d_gu->get(), d_dy->get(), type, N, H);
      auto w_gu = to_device(gu.values), w_dy = to_device(dy.values);
      auto out32 = empty<float>(N * H), dinp32 = empty<float>(N * 2 * H);
      kernels().swiglu_forward(out32->get(), w_gu->get(), N, H);
      kernels().swiglu_backward(dinp32->get(), w_gu->get(), w_dy->get(), N, H);
      auto want_out = to_device(poison(N * H)), want_dinp = to_device(poison(N * 2 * H));
      kernels().convert_from_f32(want_out->get(), type, out32->get(), N * H);
      kernels().convert_from_f32(want_dinp->get(), type, dinp32->get(), N * 2 * H);
      EXPECT_TRUE(same_bits(out->download(), want_out->download())) << tn << " swiglu16 H" << H;
      EXPECT_TRUE(same_bits(dinp->download(), want_dinp->download()))
          << tn << " swiglu16_backward H" << H;
      std::printf("%s swiglu16 N%zu H%zu: forward and backward the fp32 ops' bits, rounded\n",
                  tn.c_str(), N, H);
    }
  }
  // Another type is refused.
  auto f = to_device(poison(8));
  EXPECT_THROW(kernels().swiglu16_forward(f->get(), f->get(), DType::f32, 1, 2), Error);
}

// SwiGLU's backward writes dinp whole (it starts as NaN, which an element left unwritten or read
// would keep) and equals the double derivative of silu(gate) * up: d gate = dy up sig (1 + g (1 -
// sig)), d up = dy silu(g). Rows of H = 1, 7 and 80 features, and none.
TEST_P(LlamaKernelTest, SwigluBackwardWritesTheGradientWhole) {
  uint32_t seed = 3300;
  for (const size_t N : {size_t{1}, size_t{37}, size_t{0}})
    for (const size_t H : {size_t{1}, size_t{7}, size_t{80}}) {
      const std::vector<float> gu = random_normal(N * 2 * H, seed++, 2.0f);  // (N, 2H)
      const std::vector<float> dy = random_normal(N * H, seed++);            // (N, H)
      std::vector<double> want(N * 2 * H);                                   // (N, 2H)
      for (size_t n = 0; n < N; ++n)
        for (size_t i = 0; i < H; ++i) {
          const double g = gu[n * 2 * H + i], u = gu[n * 2 * H + H + i], d = dy[n * H + i];
          const double sig = 1.0 / (1.0 + std::exp(-g));
          want[n * 2 * H + i] = d * u * sig * (1.0 + g * (1.0 - sig));
          want[n * 2 * H + H + i] = d * g * sig;
        }
      auto d_gu = to_device(gu), d_dy = to_device(dy);
      auto d_dgu =
          to_device(std::vector<float>(N * 2 * H, std::numeric_limits<float>::quiet_NaN()));
      kernels().swiglu_backward(d_dgu->get(), d_gu->get(), d_dy->get(), N, H);
      expect_close("swiglu backward N" + std::to_string(N) + " H" + std::to_string(H),
                   d_dgu->download(), want, 1e-5);
    }
}

// fused_residual_rmsnorm_forward against residual_forward then rmsnorm_forward, bit for bit
// (fusing must not change the block's results), in fresh buffers and in place (residual aliasing
// a), and against a double reference of rmsnorm(a + b). C covers sizes that are not a multiple of
// a warp (1, 13, 100) and the Llama family's (576, 2048).
TEST_P(LlamaKernelTest, FusedResidualRmsNormIsTheUnfusedPair) {
  struct Shape {
    size_t N, C;
  };
  uint32_t seed = 3300;
  const float eps = 1e-5f;
  for (const Shape sh :
       {Shape{7, 48}, Shape{33, 576}, Shape{5, 13}, Shape{6, 2048}, Shape{1, 1}, Shape{9, 100}}) {
    const size_t N = sh.N, C = sh.C, n = N * C;
    const std::vector<float> a = random_normal(n, seed++, 2.0f, 0.5f);
    const std::vector<float> b = random_normal(n, seed++, 0.5f, -0.25f);
    const std::vector<float> w = random_normal(C, seed++, 0.1f, 1.0f);
    auto d_a = to_device(a), d_b = to_device(b), d_w = to_device(w);
    auto u_res = empty<float>(n), u_out = empty<float>(n), u_rstd = empty<float>(N);
    kernels().residual_forward(u_res->get(), d_a->get(), d_b->get(), n);
    kernels().rmsnorm_forward(u_out->get(), u_rstd->get(), u_res->get(), d_w->get(), N, C, eps);
    auto f_res = empty<float>(n), f_out = empty<float>(n), f_rstd = empty<float>(N);
    kernels().fused_residual_rmsnorm_forward(f_res->get(), f_out->get(), f_rstd->get(), d_a->get(),
                                             d_b->get(), d_w->get(), N, C, eps);
    auto i_res = to_device(a), i_out = empty<float>(n), i_rstd = empty<float>(N);
    kernels().fused_residual_rmsnorm_forward(i_res->get(), i_out->get(), i_rstd->get(),
                                             i_res->get(), d_b->get(), d_w->get(), N, C, eps);
    const std::vector<float> unfused[] = {u_res->download(), u_out->download(), u_rstd->download()};
    const std::vector<float> fused[] = {f_res->download(), f_out->download(), f_rstd->download()};
    const std::vector<float> in_place[] = {i_res->download(), i_out->download(),
                                           i_rstd->download()};
    const char* what[] = {"residual", "out", "rstd"};
    for (int t = 0; t < 3; ++t) {
      size_t differ = 0, differ_in_place = 0;
      for (size_t i = 0; i < unfused[t].size(); ++i) {
        differ += std::memcmp(&fused[t][i], &unfused[t][i], sizeof(float)) != 0;
        differ_in_place += std::memcmp(&in_place[t][i], &unfused[t][i], sizeof(float)) != 0;
      }
      std::printf(
          "fused_residual_rmsnorm %s N %zu C %zu: %zu of %zu differ in bits from the "
          "unfused pair, in place %zu\n",
          what[t], N, C, differ, unfused[t].size(), differ_in_place);
      EXPECT_EQ(differ, 0u) << what[t] << " N " << N << " C " << C;
      EXPECT_EQ(differ_in_place, 0u) << what[t] << " N " << N << " C " << C << " in place";
    }
    std::vector<double> want(n);  // rmsnorm of the exact sum
    for (size_t r = 0; r < N; ++r) {
      double sq = 0.0;
      for (size_t c = 0; c < C; ++c) {
        const double v = double{a[r * C + c]} + double{b[r * C + c]};
        sq += v * v;
      }
      const double s = 1.0 / std::sqrt(sq / static_cast<double>(C) + double{eps});
      for (size_t c = 0; c < C; ++c)
        want[r * C + c] = double{w[c]} * ((double{a[r * C + c]} + double{b[r * C + c]}) * s);
    }
    expect_close(
        "fused_residual_rmsnorm out vs double N " + std::to_string(N) + " C " + std::to_string(C),
        fused[1], want, 1e-5);
  }
}

}  // namespace
}  // namespace tierzero::test
